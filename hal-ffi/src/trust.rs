//! Which users' brokers this process takes descriptors from.

use crate::last_error::call;
use crate::status::hal_status;

/// Take descriptors from the brokers of user `uid` too, from now on in
/// this process: an import of another user's export to anyone
/// (`HAL_IMPORTERS_ANYONE`). By default a process takes them only from its
/// own user's brokers and root's (`HAL_TRUST_EXPORTER_UIDS`, a
/// comma-separated list of uids in the environment, does the same).
/// Trusting a user means accepting the descriptors its brokers send, which
/// the kernel installs before anything can look at them.
#[no_mangle]
pub extern "C" fn hal_trust_exporter_uid(uid: u32) -> hal_status {
    call("hal_trust_exporter_uid", || {
        hal_facade::exchange::trust_exporter_uid(uid);
        Ok(())
    })
}
