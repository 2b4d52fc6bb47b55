//! Host memory registered with a device for as long as a value lives: the
//! caller's memory ([`Device::register_host`](hal_core::Device::register_host))
//! and the pages of notifies. The registration ends (`cuMemHostUnregister`)
//! only once no stream of the context waits for a notify (`sync/quiet.rs`).

use std::sync::Arc;

use hal_core::kit::os::HostRange;
use hal_core::kit::RegisteredHost;
use hal_core::Result;

use crate::context::Primary;
use crate::memory::host;

/// Register `range` with the device; the registration ends when the
/// returned value drops, on the thread that drops it.
///
/// `cuMemHostUnregister` waits for the work queued on the device and,
/// meanwhile, holds the process's other driver calls but `cuStreamQuery`
/// (driver 580, measured): it starts only once no stream
/// of the context waits for a notify (`sync/quiet.rs`), so the drop may wait
/// for such a wait to pass. Dropped by a thread that must still signal a
/// notify a stream waits for, it waits for ever, as a bare
/// `cuMemHostUnregister` would.
pub(crate) fn register(primary: &Arc<Primary>, range: HostRange) -> Result<RegisteredHost> {
    let dptr = registered(primary, &range)?;
    let owner = Arc::clone(primary);
    Ok(RegisteredHost::new(range, dptr, move |r| {
        unregister(&owner, r.addr())
    }))
}

/// Register `range`, mapped as long as `keep` lives; the registration ends
/// when the returned value drops, on a teardown worker
/// (`hal_core::kit::stream::teardown::after_work`), so that the drop returns even while
/// a stream waits for a notify the dropping thread has yet to signal
/// (`register`'s rule), and `keep` drops after it.
pub(crate) fn register_kept(
    primary: &Arc<Primary>,
    range: HostRange,
    keep: impl Send + Sync + 'static,
) -> Result<RegisteredHost> {
    let dptr = registered(primary, &range)?;
    let owner = Arc::clone(primary);
    Ok(RegisteredHost::new(range, dptr, move |r| {
        let at = r.addr();
        hal_core::kit::stream::teardown::after_work("hal-cuda-unregister", move || {
            unregister(&owner, at);
            drop(keep);
        });
    }))
}

/// `cuMemHostRegister` of `range` with `primary`'s context pushed: the
/// device address of its first byte.
fn registered(primary: &Primary, range: &HostRange) -> Result<u64> {
    let _ctx = primary.enter()?;
    host::register(&primary.driver, range)
}

/// End the registration of the host memory at `at`, once no stream waits
/// for a notify (`register`'s rule); a failure is logged (nothing is left
/// to undo).
fn unregister(owner: &Primary, at: u64) {
    let done = owner.enter().and_then(|_ctx| {
        let _quiet = owner.quiet.hold();
        host::unregister(&owner.driver, at)
    });
    if let Err(e) = done {
        log::warn!("unregistering host memory at {at:#x}: {e}");
    }
}
