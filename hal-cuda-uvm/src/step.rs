//! Host steps in stream order: work on home pages that the host does (a
//! copy between the registered pages and the GPU's memory, a fill, a copy
//! between home pages), queued on a GPU stream like any other work.
//!
//! The stream records an event, then waits on a notify; a thread of the
//! step waits for the event (the stream's earlier work has run), does the
//! step, and signals the notify, so the stream's later work runs after it.
//! A second event, recorded after the wait, tells the thread when the
//! stream has passed it, and only then the notify goes. The call that
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
    let before = gpu.create_event(EventFlags::default())?;
    let gate = gpu.create_notify()?;
    let after = gpu.create_event(EventFlags::default())?;
    gpu.record_event(stream, &before)?;
    gpu.stream_wait_notify(stream, &gate, None)?;
    if let Err(e) = gpu.record_event(stream, &after) {
        // The stream already waits on the gate: open it, and keep the
        // notify for the stream to read (it is never released).
        let _ = gate.signal();
        std::mem::forget(gate);
        return Err(e);
    }
    let errors = Arc::clone(errors);
    let key = key(stream);
    std::thread::Builder::new()
        .name("hal-uvm-step".into())
        .spawn(move || {
            let done = before.wait(WaitOptions::default()).and_then(|()| step());
            if let Err(e) = done {
                errors.keep(key, e);
            }
            if let Err(e) = gate.signal() {
                log::warn!("a host step could not release its stream: {e}");
                return;
            }
            // The notify lives until the stream has passed its wait.
            let _ = after.wait(WaitOptions::default());
            drop(gate);
        })
        .map_err(|e| Error::io("starting a host step's thread", e))?;
    Ok(())
}
