//! A function run when the test process exits (`atexit`: the test harness
//! ends the process with `exit` once every test has run), for the counts of
//! [`report`](crate::report).

/// Run `handler` when the process exits. It must not unwind (catch every
/// panic inside it).
pub(crate) fn at_exit(handler: extern "C" fn()) {
    // SAFETY: `handler` is an `extern "C"` function with no arguments that
    // lives as long as the program (a function item), and its caller
    // promises that it unwinds nothing: all `atexit` asks of it.
    let failed = unsafe { libc::atexit(handler) };
    if failed != 0 {
        log::warn!("atexit refused a handler: the conformance counts will not be printed");
    }
}
