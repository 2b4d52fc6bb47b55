//! A new handle for an export: who made it, who may import it, what it is.

use crate::error::Result;
use crate::exported::check_pid_count;
use crate::handle::{FdSource, Handle, HandleFlags, HandleKind, PidKind};
use crate::kit::os;
use crate::types::{BackendId, ExportOptions, Importers, Location};

/// What the backend says of a new handle: the kind, the device it belongs to
/// and where its memory lives, and what [`Importers::BackendDefault`] means
/// for it. [`new_handle`] adds the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandleSpec {
    /// What the handle exports.
    pub kind: HandleKind,
    /// The exporting backend.
    pub backend: BackendId,
    /// The exporter's device ordinal.
    pub device: u32,
    /// The exporter's device UUID (importers find the device by it).
    pub device_uuid: [u8; 16],
    /// Where the exported memory lives.
    pub location: Location,
    /// What [`Importers::BackendDefault`] means: `false`, anyone (CPU shared
    /// memory, CUDA); `true`, an allow-list that starts empty, so nobody
    /// imports until the exporter adds pids (Ascend, whose devices have
    /// [`Capabilities::PID_ALLOW_LIST_DEFAULT_ON`](crate::Capabilities::PID_ALLOW_LIST_DEFAULT_ON)).
    pub default_allow_list: bool,
}

/// A fresh handle described by `spec`, for an export with `opts`:
///
/// - who may import, from [`ExportOptions::importers`]:
///   [`HandleFlags::ANY_IMPORTER`], or the allow-list of pids (at most
///   [`MAX_PIDS`](crate::handle::wire::MAX_PIDS), else
///   [`Error::InvalidArgument`](crate::Error::InvalidArgument));
/// - [`HandleFlags::READ_ONLY`] for [`ExportOptions::read_only`];
/// - this process as the creator (pid, start time, pid namespace), OS pids
///   ([`PidKind::Os`]) and a random object id.
///
/// Size, offset, address and payload are zero or empty and the descriptors
/// [`FdSource::None`]: the backend sets what its export needs, adds its own
/// flags, and passes the handle to [`Exported`](crate::Exported), which
/// fills in the descriptors. Rules of the backend's own (a vendor without
/// allow-lists for some kinds refusing [`Importers::Pids`]) are checked
/// before.
///
/// ```
/// use hal_core::kit::export::{new_handle, HandleSpec};
/// use hal_core::{BackendId, ExportOptions, HandleFlags, HandleKind, Importers, Location};
///
/// let spec = HandleSpec {
///     kind: HandleKind::Notify,
///     backend: BackendId::CpuShm,
///     device: 0,
///     device_uuid: [7; 16],
///     location: Location::Host,
///     default_allow_list: false,
/// };
/// let opts = ExportOptions { importers: Importers::Pids(vec![42]), ..Default::default() };
/// let handle = new_handle(&spec, &opts)?;
/// assert!(handle.allows(42) && !handle.allows(43));
/// assert!(!handle.flags.contains(HandleFlags::ANY_IMPORTER));
/// # Ok::<(), hal_core::Error>(())
/// ```
pub fn new_handle(spec: &HandleSpec, opts: &ExportOptions) -> Result<Handle> {
    let mut flags = HandleFlags::default();
    let mut allowed_pids = Vec::new();
    match &opts.importers {
        Importers::Anyone => flags.insert(HandleFlags::ANY_IMPORTER),
        Importers::BackendDefault if !spec.default_allow_list => {
            flags.insert(HandleFlags::ANY_IMPORTER)
        }
        Importers::BackendDefault => {}
        Importers::Pids(pids) => {
            check_pid_count(pids.len())?;
            allowed_pids = pids.clone();
        }
        Importers::SameUser => flags.insert(HandleFlags::SAME_USER),
    }
    if opts.read_only {
        flags.insert(HandleFlags::READ_ONLY);
    }
    let (creator_pid, creator_start) = os::self_identity();
    Ok(Handle {
        kind: spec.kind,
        backend: spec.backend,
        device: spec.device,
        device_uuid: spec.device_uuid,
        location: spec.location,
        size: 0,
        offset: 0,
        address: 0,
        creator_pid,
        creator_start,
        creator_pid_ns: os::pid_namespace(),
        object_id: os::unique_id(),
        flags,
        pid_kind: PidKind::Os,
        allowed_pids,
        fds: FdSource::None,
        payload: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::handle::wire::MAX_PIDS;

    fn spec(default_allow_list: bool) -> HandleSpec {
        HandleSpec {
            kind: HandleKind::Memory,
            backend: BackendId::CpuShm,
            device: 3,
            device_uuid: [9; 16],
            location: Location::Device(3),
            default_allow_list,
        }
    }

    fn opts(importers: Importers, read_only: bool) -> ExportOptions {
        ExportOptions {
            range: None,
            importers,
            read_only,
        }
    }

    #[test]
    fn the_spec_and_this_process_make_the_handle() {
        let h = new_handle(&spec(false), &opts(Importers::Anyone, false)).unwrap();
        assert_eq!(h.kind, HandleKind::Memory);
        assert_eq!(h.backend, BackendId::CpuShm);
        assert_eq!((h.device, h.device_uuid), (3, [9; 16]));
        assert_eq!(h.location, Location::Device(3));
        assert_eq!((h.creator_pid, h.creator_start), os::self_identity());
        assert_eq!(h.creator_pid_ns, os::pid_namespace());
        assert_eq!(h.pid_kind, PidKind::Os);
        assert_eq!(h.fds, FdSource::None);
        assert_eq!((h.size, h.offset, h.address), (0, 0, 0));
        assert!(h.payload.is_empty());
        let other = new_handle(&spec(false), &opts(Importers::Anyone, false)).unwrap();
        assert_ne!(h.object_id, other.object_id, "a fresh object id each time");
    }

    #[test]
    fn importers_and_read_only_set_the_flags() {
        let anyone = new_handle(&spec(false), &opts(Importers::Anyone, true)).unwrap();
        assert!(anyone.flags.contains(HandleFlags::ANY_IMPORTER));
        assert!(anyone.flags.contains(HandleFlags::READ_ONLY));
        assert!(anyone.allowed_pids.is_empty());

        let listed = new_handle(&spec(false), &opts(Importers::Pids(vec![5, 6]), false)).unwrap();
        assert!(!listed.flags.contains(HandleFlags::ANY_IMPORTER));
        assert!(!listed.flags.contains(HandleFlags::READ_ONLY));
        assert_eq!(listed.allowed_pids, vec![5, 6]);

        let open = new_handle(&spec(false), &opts(Importers::BackendDefault, false)).unwrap();
        assert!(open.flags.contains(HandleFlags::ANY_IMPORTER));
        let closed = new_handle(&spec(true), &opts(Importers::BackendDefault, false)).unwrap();
        assert!(!closed.flags.contains(HandleFlags::ANY_IMPORTER));
        assert!(
            closed.allowed_pids.is_empty(),
            "nobody until pids are added"
        );
    }

    #[test]
    fn more_pids_than_a_handle_carries_are_refused() {
        let fit: Vec<u32> = (1..=MAX_PIDS as u32).collect();
        let h = new_handle(&spec(false), &opts(Importers::Pids(fit), false)).unwrap();
        assert_eq!(h.allowed_pids.len(), MAX_PIDS);
        let over: Vec<u32> = (1..=MAX_PIDS as u32 + 1).collect();
        let e = new_handle(&spec(false), &opts(Importers::Pids(over), false)).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
        assert!(e.to_string().contains("Importers::Anyone"), "{e}");
    }
}
