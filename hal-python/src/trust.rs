//! Which users' brokers this process takes descriptors from.

use pyo3::prelude::*;

/// Take descriptors from the brokers of user `uid` too, from now on in
/// this process: an import of another user's export to anyone. By default
/// a process takes them only from its own user's brokers and root's (the
/// environment variable `HAL_TRUST_EXPORTER_UIDS`, a comma-separated list
/// of uids, does the same). Trusting a user means accepting the
/// descriptors its brokers send, which the kernel installs before anything
/// can look at them.
#[pyfunction]
pub(crate) fn trust_exporter_uid(uid: u32) {
    hal::exchange::trust_exporter_uid(uid);
}
