//! Host steps in stream order: work on home pages that the host does (a
//! copy between home pages and a staging buffer, a fill, a copy between
//! home pages), queued on a GPU stream like any other work, with GPU work
//! queued before and after it.
//!
//! The stream records an event, then waits on a notify; a thread of the
//! step waits for the event (the stream's earlier work has run), does the
//! step, and signals the notify, so the stream's later work runs after it.
//! A second event, recorded after the GPU work queued behind the wait,
//! tells the thread when the stream has passed it, and only then what
//! that work reaches (a staging buffer) goes. The call that
//! queues a step returns at once, as queued work does; a failed step's
//! error comes back from the next `synchronize` or `query_stream` of the
//! stream.

use hal_core::DeviceExt;
use std::sync::{Arc, Mutex};

use hal_core::{Error, Event, EventFlags, Notify, Result, WaitOptions};

use crate::gpu::GpuDevice;
use crate::stream::UvmStream;

/// Queue `step` on `stream` of `gpu`.
pub fn queue<D: GpuDevice>(
    gpu: &D,
    stream: &UvmStream<D::Stream>,
    step: impl FnOnce() -> Result<()> + Send + 'static,
) -> Result<()> {
    queue_around(gpu, stream, || Ok(()), step, || Ok(()), ())
}

/// Queue on `stream` of `gpu`: the GPU work `gpu_before` queues, then
/// `step`, then the GPU work `gpu_after` queues; `keep` (what that GPU work
/// reaches, such as a staging buffer) lives until the stream has run all
/// of it. The step's error waits for the stream's next synchronization.
pub fn queue_around<D: GpuDevice>(
    gpu: &D,
    stream: &UvmStream<D::Stream>,
    gpu_before: impl FnOnce() -> Result<()>,
    step: impl FnOnce() -> Result<()> + Send + 'static,
    gpu_after: impl FnOnce() -> Result<()>,
    keep: impl Send + 'static,
) -> Result<()> {
    let (errors, key) = (stream.errors(), stream.id());
    let stream = stream.inner();
    let before = gpu.create_event(EventFlags::default())?;
    let gate = gpu.create_notify()?;
    let after = gpu.create_event(EventFlags::default())?;
    gpu_before()?;
    gpu.record_event(stream, &before)?;
    gpu.stream_wait_notify(stream, &gate, None)?;
    // From here on the stream waits on the gate: every way out opens it.
    // The stream holds the gate itself (the contract of
    // `stream_wait_notify`), so it may be dropped here.
    if let Err(e) = gpu_after().and_then(|()| gpu.record_event(stream, &after)) {
        let _ = gate.signal();
        // Queued GPU work may still reach it: leaked, never freed under it.
        std::mem::forget(keep);
        return Err(e);
    }
    let thread_errors = Arc::clone(errors);
    let (gate, keep) = (Arc::new(gate), Arc::new(Mutex::new(keep)));
    let (thread_gate, thread_keep) = (Arc::clone(&gate), Arc::clone(&keep));
    let spawned = hal_core::kit::os::thread::spawn("hal-uvm-step", move || {
        let done = before.wait(WaitOptions::default()).and_then(|()| step());
        if let Err(e) = done {
            thread_errors.keep(key, e);
        }
        if let Err(e) = thread_gate.signal() {
            log::warn!("a host step could not release its stream: {e}");
            std::mem::forget(thread_keep);
            return;
        }
        // What the GPU work reaches lives until the stream passed it.
        if after.wait(WaitOptions::default()).is_err() {
            std::mem::forget(thread_keep);
        }
    });
    if let Err(e) = spawned {
        // The step cannot run: its stream learns so at its next
        // synchronization, and is let go on.
        let e = Error::io("starting a host step's thread", e);
        errors.keep(key, Error::invalid(format!("a host step did not run: {e}")));
        let _ = gate.signal();
        std::mem::forget(keep);
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use hal_core::{Backend, Device};

    use super::*;
    use crate::step_errors::StepErrors;

    const LONG: Duration = Duration::from_secs(30);

    fn gpu() -> hal_mock::MockDevice {
        hal_mock::MockBackend::cuda().open(0).unwrap()
    }

    fn stream(
        gpu: &hal_mock::MockDevice,
        errors: &Arc<StepErrors>,
    ) -> UvmStream<hal_mock::MockStream> {
        UvmStream::new(gpu.create_stream().unwrap(), Arc::clone(errors))
    }

    /// A step queued behind a closed gate runs once the gate opens, before
    /// the stream's synchronization returns.
    #[test]
    fn a_step_runs_in_stream_order() {
        let gpu = gpu();
        let errors = Arc::new(StepErrors::default());
        let stream = stream(&gpu, &errors);
        let gate = gpu.create_notify().unwrap();
        gpu.stream_wait_notify(stream.inner(), &gate, None).unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        queue(&gpu, &stream, move || {
            flag.store(true, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
        assert!(!ran.load(Ordering::SeqCst), "ran before the gate opened");
        gate.signal().unwrap();
        gpu.synchronize(stream.inner(), Some(LONG)).unwrap();
        assert!(ran.load(Ordering::SeqCst), "not run by the synchronization");
        errors.take(stream.id()).unwrap();
    }

    /// A failed step's error is kept for its own stream, the first of
    /// several, taken once, and still its stream's after the stream moved.
    #[test]
    fn the_first_error_is_its_streams_and_taken_once() {
        let gpu = gpu();
        let errors = Arc::new(StepErrors::default());
        let (failing, other) = (stream(&gpu, &errors), stream(&gpu, &errors));
        for what in ["first", "second"] {
            queue(&gpu, &failing, move || Err(Error::invalid(what))).unwrap();
        }
        queue(&gpu, &other, || Ok(())).unwrap();
        let moved = Box::new(failing);
        gpu.synchronize(moved.inner(), Some(LONG)).unwrap();
        gpu.synchronize(other.inner(), Some(LONG)).unwrap();
        errors
            .take(other.id())
            .expect("the other stream's steps did not fail");
        let e = errors.take(moved.id()).unwrap_err();
        assert!(e.to_string().contains("first"), "{e}");
        errors.take(moved.id()).expect("taken already");
    }

    /// A stream dropped with an error nobody took lets it go: the map keeps
    /// nothing of it, and a later stream starts clean.
    #[test]
    fn a_dropped_stream_takes_its_error_along() {
        let gpu = gpu();
        let errors = Arc::new(StepErrors::default());
        let failing = stream(&gpu, &errors);
        queue(&gpu, &failing, || Err(Error::invalid("unreported"))).unwrap();
        gpu.synchronize(failing.inner(), Some(LONG)).unwrap();
        drop(failing);
        errors.take_any().expect("dropped with its stream");
        let later = stream(&gpu, &errors);
        errors.take(later.id()).unwrap();
    }
}
