//! An export registered with this process's descriptor broker: the
//! constructors of [`Exported`] that make the handle's text alone enough
//! for another process to import.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use super::broker::{self, Policy, Registration};
use super::MAX_FDS;
use crate::error::{Error, Result};
use crate::exported::{Exported, Serving};
use crate::handle::{FdSource, Handle};
use crate::kit::os;
use crate::lease::LeaseTable;

impl Serving for Registration {
    fn set_policy_of(&self, handle: &Handle) {
        Registration::set_policy_of(self, handle);
    }
}

impl Exported {
    /// Registers `fds` with this process's descriptor broker (an abstract Unix
    /// socket, nothing on the file system) so that the handle text alone is
    /// enough to import from another process; sets `handle.fds` to
    /// [`FdSource::Broker`] with their count and the broker's name. With no
    /// fds: [`FdSource::None`].
    ///
    /// The broker's allow-list starts as the handle's (`allowed_pids`, or
    /// anyone with [`HandleFlags::ANY_IMPORTER`](crate::HandleFlags::ANY_IMPORTER)). At most
    /// [`MAX_FDS`](crate::exchange::MAX_FDS) descriptors. Where the broker
    /// cannot be started (sockets forbidden by a sandbox), a warning is logged
    /// and the handle says [`FdSource::Attached`]: its descriptors then travel
    /// only beside it (a Unix socket, [`Exported::share`]).
    pub fn new(handle: Handle, fds: Vec<OwnedFd>) -> Result<Exported> {
        Exported::register(handle, fds, None)
    }

    /// As [`Exported::new`], for a resource whose importers the exporter
    /// counts in `leases`: the broker registers a lease for every process
    /// it serves (see [`lease`](crate::lease)). Without a broker (the
    /// warning case of [`Exported::new`]) importers are not counted.
    ///
    /// A resource that needs no descriptors (memory the vendor shares by a
    /// key of its own, as CUDA's legacy IPC does) is still registered, so
    /// that importers take their leases from the broker: the export then
    /// carries one descriptor of its own, an empty sealed memfd (the lease
    /// token), because a handle names a broker only together with at least
    /// one descriptor ([`wire`](crate::handle::wire)). Importers receive it
    /// and may close it at once.
    pub fn with_leases(
        handle: Handle,
        fds: Vec<OwnedFd>,
        leases: Arc<LeaseTable>,
    ) -> Result<Exported> {
        Exported::register(handle, fds, Some(leases))
    }

    fn register(
        mut handle: Handle,
        fds: Vec<OwnedFd>,
        leases: Option<Arc<LeaseTable>>,
    ) -> Result<Exported> {
        if fds.len() > MAX_FDS {
            return Err(Error::invalid(format!(
                "{} descriptors for one export, over the bound of {MAX_FDS}",
                fds.len()
            )));
        }
        let fds = if fds.is_empty() && leases.is_some() {
            vec![lease_token()?]
        } else {
            fds
        };
        let fds: Arc<[OwnedFd]> = fds.into();
        let count = fds.len() as u8;
        if fds.is_empty() {
            handle.fds = FdSource::None;
            return Ok(Exported::assemble(handle, fds, None));
        }
        let registration = match broker::register(
            handle.object_id,
            Arc::clone(&fds),
            Policy::of(&handle, None),
            leases,
        ) {
            Ok(reg) => {
                handle.fds = FdSource::Broker {
                    count,
                    name: reg.name().to_owned(),
                };
                Some(Box::new(reg) as Box<dyn Serving>)
            }
            Err(e) => {
                log::warn!(
                    "the descriptor broker is unavailable ({e}); the descriptors of export {} \
                         travel only beside its handle (a Unix socket, Exported::share), not with \
                         its text alone",
                    os::hex(&handle.object_id)
                );
                handle.fds = FdSource::Attached { count };
                None
            }
        };
        Ok(Exported::assemble(handle, fds, registration))
    }
}

/// The one descriptor of an export that counts its importers and needs no
/// descriptors: an empty memfd sealed against every change.
fn lease_token() -> Result<OwnedFd> {
    let fd = os::memfd("hal-lease-token", 0, None)?;
    os::add_seals(
        fd.as_fd(),
        libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE,
    )?;
    Ok(fd)
}
