//! The bounds of handle exchange: descriptors per handle, how long an
//! importer waits for a broker, and the error for descriptors the kernel
//! dropped.

use std::time::Duration;

use crate::error::Error;

/// Most descriptors one handle may carry, on a socket or from a broker.
pub const MAX_FDS: usize = 16;

/// How long an importer waits for a broker to accept, take a request and
/// answer, each, before [`Error::Timeout`].
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(5);

/// The error for a reception the kernel truncated (`MSG_CTRUNC`).
pub(crate) fn dropped_descriptors(arrived: usize, expected: Option<usize>) -> Error {
    let expected = expected.map_or(String::new(), |n| format!(" of {n}"));
    Error::Io {
        context: format!(
            "receiving a handle's descriptors: the kernel dropped descriptors (MSG_CTRUNC; \
             {arrived}{expected} arrived and were closed). This process is probably at its \
             open-file limit (RLIMIT_NOFILE, `ulimit -n`): close descriptors or raise the \
             limit; otherwise the sender attached more than {MAX_FDS}"
        ),
        source: std::io::Error::other("descriptors dropped in transit"),
    }
}
