//! The exporter's side of a handle, as the contract names it: the handle,
//! its descriptors, what serves them to other processes, and what the
//! vendor requires the exporter to close. The serving itself (this
//! process's descriptor broker) is the exchange's: the contract holds it as
//! a guard it does not look into.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::handle::wire::MAX_PIDS;
use crate::handle::{Handle, HandleFlags, SharedHandle};
use crate::types::{BackendId, Importers};

/// An exported resource: its [`Handle`], the descriptors that go with it, and
/// their registration with this process's descriptor broker (see
/// [`exchange`](crate::exchange)), so that the handle's text alone is enough
/// for another process to import.
///
/// Dropping it unregisters the descriptors: importers that already hold
/// them keep them, later imports from the text get [`Error::NotFound`].
/// Backends return it from their `export_*` calls. Keep it as long as the
/// handle is in use: `device.export_memory(..)?.to_text()` drops the export
/// at the end of the statement and hands out a handle that no import can
/// use. A dropped export is a compile error under `#![deny(unused_must_use)]`:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # fn main() -> hal_core::Result<()> {
/// # use hal_core::{BackendId, Exported, FdSource, Handle, HandleFlags, HandleKind};
/// # use hal_core::kit::{os};
/// # use hal_core::{Location, PidKind};
/// # let (pid, start) = os::self_identity();
/// # let handle = Handle {
/// #     kind: HandleKind::Memory, backend: BackendId::CpuShm, device: 0,
/// #     device_uuid: [0; 16], location: Location::Host, size: 4096, offset: 0,
/// #     address: 0, creator_pid: pid, creator_start: start,
/// #     creator_pid_ns: os::pid_namespace(), object_id: os::random_id(),
/// #     flags: HandleFlags::default(), pid_kind: PidKind::Os,
/// #     allowed_pids: Vec::new(), fds: FdSource::None, payload: Vec::new(),
/// # };
/// Exported::new(handle, vec![os::memfd("dropped", 4096, None)?])?; // error: unused `Exported`
/// # Ok(())
/// # }
/// ```
///
/// ```
/// use hal_core::{BackendId, Exported, FdSource, Handle, HandleFlags, HandleKind};
/// use hal_core::kit::{os};
/// use hal_core::{Importers, Location, PidKind};
///
/// let (pid, start) = os::self_identity();
/// let handle = Handle {
///     kind: HandleKind::Memory,
///     backend: BackendId::CpuShm,
///     device: 0,
///     device_uuid: [0; 16],
///     location: Location::Host,
///     size: 4096,
///     offset: 0,
///     address: 0,
///     creator_pid: pid,
///     creator_start: start,
///     creator_pid_ns: os::pid_namespace(),
///     object_id: os::random_id(),
///     flags: HandleFlags::default(),
///     pid_kind: PidKind::Os,
///     allowed_pids: Vec::new(), // nobody yet
///     fds: FdSource::None,
///     payload: Vec::new(),
/// };
/// let mut exported = Exported::new(handle, vec![os::memfd("example", 4096, None)?])?;
/// assert!(matches!(exported.handle().fds, FdSource::Broker { count: 1, .. }));
/// exported.add_importers(&[4242])?;
/// assert!(exported.handle().allows(4242));
/// exported.set_importers(&Importers::Anyone)?;
/// assert!(exported.handle().allows(1));
/// # Ok::<(), hal_core::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "dropping an export unregisters it: its handle can no longer be imported"]
pub struct Exported {
    handle: Handle,
    fds: Arc<[OwnedFd]>,
    registration: Option<Box<dyn Serving>>,
    // Declared after the registration: fields drop in order, so the broker
    // serves no importer once the guard is gone.
    guard: Option<Guard>,
}

/// What serves an export's descriptors to other processes (the exchange's
/// broker registration): dropping it stops serving them.
pub(crate) trait Serving: Send + Sync + std::fmt::Debug {
    /// Who may import changed: serve only the importers `handle` allows.
    fn set_policy_of(&self, handle: &Handle);
}

/// What the exporter's side of an export must close (see
/// [`Exported::with_guard`]).
struct Guard(#[allow(dead_code)] Box<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard")
    }
}

impl Exported {
    /// An export of `handle` (whose `fds` already says where its
    /// descriptors are) with its descriptors and what serves them.
    pub(crate) fn assemble(
        handle: Handle,
        fds: Arc<[OwnedFd]>,
        registration: Option<Box<dyn Serving>>,
    ) -> Exported {
        Exported {
            handle,
            fds,
            registration,
            guard: None,
        }
    }

    /// Keep `guard` until the export is dropped: what the vendor requires
    /// the exporter to close when it stops exporting (Ascend's
    /// `aclrtIpcMemClose` of a key, a VMM shareable descriptor). It is
    /// dropped after the broker registration, so no importer is served the
    /// export once the guard has closed it. Importers that already imported
    /// keep what they hold: the resource's own lifetime (its leases) decides
    /// when the memory itself goes.
    pub fn with_guard(mut self, guard: impl Send + Sync + 'static) -> Exported {
        self.guard = Some(Guard(Box::new(guard)));
        self
    }

    /// Name another backend and device in the handle, keeping its
    /// descriptors, broker registration, leases and importers: for a
    /// backend layered on another one's export (`hal-cuda-uvm` exports
    /// memfd pages through `hal-cpu-shm` and names itself and its GPU), so
    /// that importers route the handle to the layered backend, which
    /// restores the inner names before it imports. The broker checks only
    /// who may import, never the backend, so nothing else changes.
    pub fn set_device(&mut self, backend: BackendId, device: u32, device_uuid: [u8; 16]) {
        self.handle.backend = backend;
        self.handle.device = device;
        self.handle.device_uuid = device_uuid;
    }

    /// The handle.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The descriptors, in the order the backend gave them.
    pub fn fds(&self) -> &[OwnedFd] {
        &self.fds
    }

    /// The handle's text form ([`Handle::to_text`]).
    pub fn to_text(&self) -> String {
        self.handle.to_text()
    }

    /// A copy of the handle with duplicates of the descriptors: to import in
    /// this process, or to pass to a child.
    pub fn share(&self) -> Result<SharedHandle> {
        let fds = self
            .fds
            .iter()
            .map(|fd| {
                fd.try_clone()
                    .map_err(|e| Error::io("dup of a descriptor", e))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(SharedHandle {
            handle: self.handle.clone(),
            fds,
        })
    }

    /// Replace who may import: the handle's flags and allow-list, and the
    /// broker's policy, which is what other processes are checked against.
    ///
    /// [`Importers::BackendDefault`] is refused with
    /// [`Error::InvalidArgument`]: only the backend knows its default, and
    /// resolves it to [`Importers::Anyone`] or [`Importers::Pids`] first.
    /// Pids are deduplicated; pid 0 and more than
    /// [`MAX_PIDS`](crate::handle::wire::MAX_PIDS) pids are refused.
    pub fn set_importers(&mut self, importers: &Importers) -> Result<()> {
        match importers {
            Importers::Anyone => {
                self.handle.flags.0 &= !HandleFlags::SAME_USER.0;
                self.handle.flags.insert(HandleFlags::ANY_IMPORTER);
                self.handle.allowed_pids.clear();
            }
            Importers::Pids(pids) => {
                let list = merge(&[], pids)?;
                self.handle.flags.0 &= !(HandleFlags::ANY_IMPORTER.0 | HandleFlags::SAME_USER.0);
                self.handle.allowed_pids = list;
            }
            Importers::SameUser => {
                self.handle.flags.0 &= !HandleFlags::ANY_IMPORTER.0;
                self.handle.flags.insert(HandleFlags::SAME_USER);
                self.handle.allowed_pids.clear();
            }
            Importers::BackendDefault => {
                return Err(Error::invalid(
                    "Importers::BackendDefault means the backend's choice: the backend resolves \
                     it to Importers::Anyone or Importers::Pids before Exported::set_importers",
                ))
            }
        }
        self.sync_policy();
        Ok(())
    }

    /// Allow more pids to import (Ascend's `aclrtIpcMemSetImportPid`). Pids
    /// already allowed are skipped; pid 0 and a list over
    /// [`MAX_PIDS`](crate::handle::wire::MAX_PIDS) are refused, leaving the
    /// export unchanged.
    ///
    /// An export to [`Importers::SameUser`] takes no pids (every process of
    /// the user may import already): [`Error::InvalidArgument`].
    pub fn add_importers(&mut self, pids: &[u32]) -> Result<()> {
        if self.handle.flags.contains(HandleFlags::SAME_USER) {
            return Err(Error::invalid(
                "the export is open to every process of this user (Importers::SameUser): \
                 there is no pid list to add to",
            ));
        }
        self.handle.allowed_pids = merge(&self.handle.allowed_pids, pids)?;
        self.sync_policy();
        Ok(())
    }

    fn sync_policy(&self) {
        if let Some(reg) = &self.registration {
            reg.set_policy_of(&self.handle);
        }
    }
}

/// `old` followed by the pids of `new` not in it yet.
fn merge(old: &[u32], new: &[u32]) -> Result<Vec<u32>> {
    let mut list = old.to_vec();
    for &pid in new {
        if pid == 0 {
            return Err(Error::invalid("pid 0 names no process"));
        }
        if !list.contains(&pid) {
            list.push(pid);
        }
    }
    check_pid_count(list.len())?;
    Ok(list)
}

/// Refuse an allow-list of `count` pids when more than a handle carries.
pub(crate) fn check_pid_count(count: usize) -> Result<()> {
    if count > MAX_PIDS {
        return Err(Error::invalid(format!(
            "{count} importer pids, over the bound of {MAX_PIDS} that a handle carries: allow \
             fewer pids, or export with Importers::SameUser (any process of this user) or \
             Importers::Anyone"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::FdSource;
    use crate::kit::os;
    use crate::lease::LeaseTable;
    use std::os::fd::AsFd;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn exported_is_send_sync() {
        assert_send_sync::<Exported>();
    }

    #[test]
    fn merge_dedups_and_bounds() {
        assert_eq!(merge(&[1, 2], &[2, 3, 3]).unwrap(), vec![1, 2, 3]);
        assert!(merge(&[], &[0]).is_err());
        let many: Vec<u32> = (1..=MAX_PIDS as u32 + 1).collect();
        assert!(merge(&[], &many).is_err());
        assert_eq!(merge(&[], &many[..MAX_PIDS]).unwrap().len(), MAX_PIDS);
    }

    fn exported() -> Exported {
        Exported::new(
            exported_handle(),
            vec![os::memfd("export-test", 4096, None).unwrap()],
        )
        .unwrap()
    }

    fn exported_handle() -> Handle {
        crate::handle::sample()
    }

    #[test]
    fn set_device_renames_and_keeps_the_registration() {
        let mut ex = exported();
        let before = ex.handle().clone();
        ex.set_device(crate::BackendId::CudaUvm, 3, [5; 16]);
        let h = ex.handle();
        assert_eq!(
            (h.backend, h.device, h.device_uuid),
            (crate::BackendId::CudaUvm, 3, [5; 16])
        );
        assert_eq!((&h.fds, h.object_id), (&before.fds, before.object_id));
        // The text alone still reaches the broker's descriptors.
        let mut shared = SharedHandle::from(Handle::from_text(&ex.to_text()).unwrap());
        assert_eq!(crate::exchange::take_fds(&mut shared).unwrap().len(), 1);
    }

    #[test]
    fn a_guard_is_dropped_with_the_export_after_its_registration() {
        struct Flag(Arc<std::sync::atomic::AtomicBool>, String, [u8; 16]);
        impl Drop for Flag {
            fn drop(&mut self) {
                // The registration went first: the broker no longer has it.
                let mut shared = SharedHandle::from(Handle {
                    fds: FdSource::Broker {
                        count: 1,
                        name: self.1.clone(),
                    },
                    object_id: self.2,
                    ..exported_handle()
                });
                let gone = matches!(
                    crate::exchange::take_fds(&mut shared),
                    Err(Error::NotFound { .. })
                );
                self.0.store(gone, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ex = exported();
        let FdSource::Broker { name, .. } = ex.handle().fds.clone() else {
            panic!("a broker export")
        };
        let id = ex.handle().object_id;
        let ex = ex.with_guard(Flag(Arc::clone(&dropped), name, id));
        assert!(format!("{ex:?}").contains("Guard"));
        assert!(!dropped.load(std::sync::atomic::Ordering::SeqCst));
        drop(ex);
        assert!(dropped.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[test]
    fn set_importers_replaces_who_may_import() {
        let mut ex = exported();
        assert_eq!(ex.fds().len(), 1);
        ex.set_importers(&Importers::Anyone).unwrap();
        assert!(ex.handle().flags.contains(HandleFlags::ANY_IMPORTER));
        assert!(ex.handle().allows(77));
        ex.set_importers(&Importers::Pids(vec![5, 6, 5])).unwrap();
        assert!(!ex.handle().flags.contains(HandleFlags::ANY_IMPORTER));
        assert_eq!(ex.handle().allowed_pids, vec![5, 6]);
        assert!(!ex.handle().allows(77) && ex.handle().allows(6));
        assert!(ex.set_importers(&Importers::BackendDefault).is_err());
        assert!(ex.set_importers(&Importers::Pids(vec![0])).is_err());
        assert_eq!(
            ex.handle().allowed_pids,
            vec![5, 6],
            "unchanged by a refusal"
        );
        ex.add_importers(&[7]).unwrap();
        assert_eq!(ex.handle().allowed_pids, vec![5, 6, 7]);
        ex.set_importers(&Importers::SameUser).unwrap();
        let flags = ex.handle().flags;
        assert!(
            flags.contains(HandleFlags::SAME_USER) && !flags.contains(HandleFlags::ANY_IMPORTER)
        );
        assert!(ex.handle().allowed_pids.is_empty() && ex.handle().allows(77));
        assert!(ex.add_importers(&[8]).is_err(), "no pid list to add to");
        ex.set_importers(&Importers::Pids(vec![5])).unwrap();
        assert!(!ex.handle().flags.contains(HandleFlags::SAME_USER));
        ex.set_importers(&Importers::SameUser).unwrap();
        ex.set_importers(&Importers::Anyone).unwrap();
        assert!(!ex.handle().flags.contains(HandleFlags::SAME_USER));
        ex.set_importers(&Importers::Pids(vec![5, 6])).unwrap();
        ex.add_importers(&[7]).unwrap();
    }

    #[test]
    fn an_export_without_descriptors_that_counts_importers_serves_leases() {
        let table = LeaseTable::new(4).unwrap();
        let mut handle = exported_handle();
        handle.flags.insert(HandleFlags::ANY_IMPORTER);
        let ex = Exported::with_leases(handle, Vec::new(), Arc::clone(&table)).unwrap();
        assert!(
            matches!(ex.handle().fds, FdSource::Broker { count: 1, .. }),
            "the handle names the broker: {:?}",
            ex.handle().fds
        );
        assert_eq!(
            ex.fds().len(),
            1,
            "the lease token is the export's descriptor"
        );
        let token = &ex.fds()[0];
        assert_eq!(os::fstat(token.as_fd()).unwrap().st_size, 0);
        assert_ne!(os::seals(token.as_fd()).unwrap() & libc::F_SEAL_WRITE, 0);
        // From the text alone, as another process imports.
        let mut shared = SharedHandle::from(ex.handle().clone());
        let taken = crate::exchange::take_fds_leased(&mut shared).unwrap();
        assert_eq!(taken.fds.len(), 1);
        assert!(taken.lease.is_some(), "the import holds a lease");
        assert_eq!(table.count(), 1);
        drop(taken);
        assert_eq!(table.count(), 0, "the lease goes with the import");
        // Without a lease table nothing is registered, as before.
        let plain = Exported::new(exported_handle(), Vec::new()).unwrap();
        assert_eq!(plain.handle().fds, FdSource::None);
        assert!(plain.fds().is_empty());
    }
}
