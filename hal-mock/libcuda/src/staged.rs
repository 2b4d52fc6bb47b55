//! Host-to-device copies that have returned but not landed.
//!
//! `cuMemcpyHtoD_v2` from pageable memory returns once the bytes are staged
//! for the DMA, before they are in device memory: later driver work of the
//! same process is ordered after them, another process is not (measured on
//! an H200, driver 580: a process that wrote imported memory this way and
//! then rang a notify left its peer reading the old bytes). The stand-in
//! keeps such a copy here and lands it at the next entry point this
//! process calls that does work ([`lands`]: not the context stack, the
//! error strings or the device queries); a process that hands memory over
//! through anything but such a call (a notify's host store, a pipe) hands
//! over the old bytes, as on the GPU.

use std::sync::Mutex;

/// A staged copy: what lands it.
type Landing = Box<dyn FnOnce() + Send>;

static STAGED: Mutex<Vec<Landing>> = Mutex::new(Vec::new());

/// True when entry point `entry` lands the staged copies: every one but
/// those that queue and wait for nothing.
pub(crate) fn lands(entry: &str) -> bool {
    !(entry.starts_with("cuCtxPushCurrent")
        || entry.starts_with("cuCtxPopCurrent")
        || entry.starts_with("cuCtxGetCurrent")
        || entry.starts_with("cuCtxSetCurrent")
        || entry.starts_with("cuGetError")
        || entry.starts_with("cuDeviceGet")
        || entry.starts_with("cuDriverGetVersion")
        || entry.starts_with("cuPointerGetAttribute"))
}

/// Keep `land` until the next entry point of this process.
pub(crate) fn stage(land: Landing) {
    hal_core::kit::os::lock::lock(&STAGED).push(land);
}

/// Land every staged copy, in the order they were made. The copies land
/// under the lock: a caller that finds none left to land returns only once
/// those another thread took have landed too.
pub(crate) fn land_all() {
    let mut staged = hal_core::kit::os::lock::lock(&STAGED);
    for land in staged.drain(..) {
        land();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn staged_copies_land_in_order_at_an_entry_point_that_does_work() {
        let order = Arc::new(Mutex::new(Vec::new()));
        for i in 0..3 {
            let order = order.clone();
            stage(Box::new(move || order.lock().unwrap().push(i)));
        }
        land_all();
        assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
        let landed = Arc::new(AtomicUsize::new(0));
        land_all();
        let count = landed.clone();
        stage(Box::new(move || {
            count.fetch_add(1, Ordering::SeqCst);
        }));
        land_all();
        land_all();
        assert_eq!(landed.load(Ordering::SeqCst), 1, "a copy lands once");
        // A second caller returns only after the copies a first caller is
        // landing have landed.
        let (started, done) = (
            Arc::new(std::sync::Barrier::new(2)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (s, d) = (started.clone(), done.clone());
        stage(Box::new(move || {
            s.wait();
            std::thread::sleep(std::time::Duration::from_millis(100));
            d.store(1, Ordering::SeqCst);
        }));
        let first = std::thread::spawn(land_all);
        started.wait();
        land_all();
        assert_eq!(done.load(Ordering::SeqCst), 1, "landed before the return");
        first.join().unwrap();
        for quiet in [
            "cuCtxPushCurrent_v2",
            "cuCtxPopCurrent_v2",
            "cuCtxGetCurrent",
            "cuCtxSetCurrent",
            "cuGetErrorName",
            "cuDeviceGetAttribute",
            "cuDriverGetVersion",
            "cuPointerGetAttribute",
        ] {
            assert!(!lands(quiet), "{quiet} does no work");
        }
        for work in [
            "cuMemcpyDtoH_v2",
            "cuMemcpyHtoD_v2",
            "cuStreamSynchronize",
            "cuCtxSynchronize",
            "cuMemFree_v2",
            "cuIpcGetMemHandle",
            "cuStreamWriteValue32_v2",
        ] {
            assert!(lands(work), "{work} lands the staged copies");
        }
    }
}
