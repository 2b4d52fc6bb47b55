//! The process's driver, held by a call that waits for the device.
//!
//! On driver 580 (an H200), `cuMemFree_v2` waited for the work queued on
//! the device before it freed (measured), and four conformance cases whose
//! streams waited on unsignalled notifies hung together beside such a
//! free: what happens when the other driver calls of the process wait
//! behind it (inferred, not yet measured: `hal-cuda/tests/driver_waits.rs`
//! asks the driver). The stand-in does the same unless
//! [`FREE_SYNCS_VAR`](crate::FREE_SYNCS_VAR) is 0: a waiting free holds
//! this lock, and every entry point that does work passes through it first
//! (the same entry points that land staged copies, `staged::lands`).

use std::sync::{Mutex, MutexGuard};

static HELD: Mutex<()> = Mutex::new(());

/// Hold the driver until the guard drops: entry points that do work wait.
pub(crate) fn hold() -> MutexGuard<'static, ()> {
    hal_core::lock::lock(&HELD)
}

/// Wait while a call holds the driver.
pub(crate) fn pass() {
    drop(hold());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_caller_passes_only_once_the_holder_let_go() {
        let held = hold();
        let passed = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&passed);
        let passer = std::thread::spawn(move || {
            pass();
            flag.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!passed.load(Ordering::SeqCst), "passed a held driver");
        drop(held);
        passer.join().unwrap();
        assert!(passed.load(Ordering::SeqCst));
        // Not held: passing returns at once, and again.
        pass();
        pass();
    }
}
