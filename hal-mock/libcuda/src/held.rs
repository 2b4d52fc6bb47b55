//! The process's driver, held by a call that waits for the device.
//!
//! On driver 580 (an H200), `cuMemFree_v2`, `cuMemFreeHost`,
//! `cuCtxSynchronize` and `cuMemHostUnregister` waited for a stream that
//! waited for an unwritten host word, and all but `cuCtxSynchronize` held
//! meanwhile every other call tried from other threads (registration, event
//! creation, destruction and record, allocation, stream creation, stream
//! writes) but `cuStreamQuery` (measured, `hal-cuda/tests/driver_waits.rs`).
//! A `cuMemcpyAsync` between two host memories waited for its stream and
//! held the same way (the stacks of a conformance case that hung there).
//! The stand-in does the same unless [`FREE_SYNCS_VAR`](crate::FREE_SYNCS_VAR)
//! is 0: such a call holds this lock while it waits ([`hold`]), and the
//! entry points that [`takes`] names pass through it first.

use std::sync::{Mutex, MutexGuard};

static HELD: Mutex<()> = Mutex::new(());

/// Hold the driver until the guard drops: the entry points that [`takes`]
/// names wait.
pub(crate) fn hold() -> MutexGuard<'static, ()> {
    hal_core::kit::os::lock::lock(&HELD)
}

/// Wait while a call holds the driver.
pub(crate) fn pass() {
    drop(hold());
}

/// True for the entry points that wait while a call holds the driver:
/// every one that does work (`staged::lands`) but
/// `cuStreamQuery`.
pub(crate) fn takes(entry: &str) -> bool {
    crate::staged::lands(entry) && entry != "cuStreamQuery"
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

    #[test]
    fn work_waits_and_a_stream_query_does_not() {
        for entry in [
            "cuMemHostRegister_v2",
            "cuMemHostUnregister",
            "cuEventCreate",
            "cuEventDestroy_v2",
            "cuMemAlloc_v2",
            "cuStreamCreate",
            "cuStreamWriteValue32_v2",
            "cuEventRecord",
        ] {
            assert!(takes(entry), "{entry}");
        }
        for entry in ["cuStreamQuery", "cuCtxPushCurrent_v2", "cuGetErrorName"] {
            assert!(!takes(entry), "{entry}");
        }
    }
}
