//! The counts of [`report`](crate::report) printed when the test process
//! exits (`atexit`: the test harness ends the process with `exit` once
//! every test has run).

use std::io::Write;

extern "C" fn print_totals() {
    // Nothing may unwind out of an `atexit` handler.
    let _ = std::panic::catch_unwind(|| {
        for line in crate::report::totals() {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    });
}

/// Print the counts when the process exits (once per process).
pub(crate) fn print_totals_at_exit() {
    // SAFETY: `print_totals` is an `extern "C"` function with no
    // arguments that lives as long as the program and unwinds nothing
    // (it catches every panic), which is all `atexit` asks of it.
    let failed = unsafe { libc::atexit(print_totals) };
    if failed != 0 {
        log::warn!("the conformance counts will not be printed: atexit refused the handler");
    }
}
