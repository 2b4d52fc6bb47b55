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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hal_core::{Error, Event, EventFlags, Notify, Result, WaitOptions};

use crate::gpu::GpuDevice;

/// Errors of host steps, by stream, until the stream's next
/// synchronization reports them.
#[derive(Debug, Default)]
pub struct StepErrors(Mutex<HashMap<usize, Error>>);

impl StepErrors {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Error>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first error of a step on the stream `key`, taken.
    pub fn take(&self, key: usize) -> Result<()> {
        match self.lock().remove(&key) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The first error of a step on any stream, taken.
    pub fn take_any(&self) -> Result<()> {
        let mut errors = self.lock();
        let first = errors.keys().next().copied();
        match first.and_then(|k| errors.remove(&k)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn keep(&self, key: usize, e: Error) {
        self.lock().entry(key).or_insert(e);
    }
}

/// The key of a stream in [`StepErrors`].
pub fn key<S>(stream: &S) -> usize {
    stream as *const S as usize
}

/// Queue `step` on `stream` of `gpu`.
pub fn queue<D: GpuDevice>(
    gpu: &D,
    stream: &D::Stream,
    errors: &Arc<StepErrors>,
    step: impl FnOnce() -> Result<()> + Send + 'static,
) -> Result<()> {
    queue_around(gpu, stream, errors, || Ok(()), step, || Ok(()), ())
}

/// Queue on `stream` of `gpu`: the GPU work `gpu_before` queues, then
/// `step`, then the GPU work `gpu_after` queues; `keep` (what that GPU work
/// reaches, such as a staging buffer) lives until the stream has run all
/// of it.
pub fn queue_around<D: GpuDevice>(
    gpu: &D,
    stream: &D::Stream,
    errors: &Arc<StepErrors>,
    gpu_before: impl FnOnce() -> Result<()>,
    step: impl FnOnce() -> Result<()> + Send + 'static,
    gpu_after: impl FnOnce() -> Result<()>,
    keep: impl Send + 'static,
) -> Result<()> {
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
    let key = key(stream);
    let (gate, keep) = (Arc::new(gate), Arc::new(Mutex::new(keep)));
    let (thread_gate, thread_keep) = (Arc::clone(&gate), Arc::clone(&keep));
    let spawned = std::thread::Builder::new()
        .name("hal-uvm-step".into())
        .spawn(move || {
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
