//! A vendor call that waits for the device and cannot time out (a device
//! synchronize), bounded all the same: it runs on a thread of its own, and
//! a caller whose timeout passes returns [`Error::Timeout`] and leaves it
//! to finish there.
//!
//! ```
//! use std::time::Duration;
//! use hal_core::kit::stream::off_thread;
//!
//! let done = off_thread::wait("example-sync", "the example to finish", None, || Ok(()));
//! assert!(done.is_ok());
//! let late = off_thread::wait(
//!     "example-sync",
//!     "the example to finish",
//!     Some(Duration::from_millis(10)),
//!     || {
//!         std::thread::sleep(Duration::from_millis(200));
//!         Ok(())
//!     },
//! );
//! assert!(matches!(late, Err(hal_core::Error::Timeout { .. })));
//! ```

use std::sync::mpsc;
use std::time::Duration;

use crate::error::{Error, Result};

/// Run `call` on a new thread named `thread` and wait for its answer, at
/// most `timeout` (`None`: until it answers). Past the timeout the answer
/// is [`Error::Timeout`] of `what` (what was waited for: "the device to
/// finish its work"), and `call` runs on to its end unobserved.
pub fn wait(
    thread: &str,
    what: &str,
    timeout: Option<Duration>,
    call: impl FnOnce() -> Result<()> + Send + 'static,
) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    crate::kit::os::thread::spawn(thread, move || {
        let _ = tx.send(call());
    })
    .map_err(|e| Error::io(format!("spawning the {thread} thread"), e))?;
    match timeout {
        None => rx
            .recv()
            .unwrap_or_else(|_| Err(Error::invalid(format!("the {thread} thread was lost")))),
        Some(t) => rx.recv_timeout(t).unwrap_or_else(|_| {
            Err(Error::Timeout {
                what: what.into(),
                after: t,
            })
        }),
    }
}
