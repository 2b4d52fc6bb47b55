//! Streams: ordered queues of work, each run by its own worker thread.
//!
//! Work runs strictly in the order it was queued; a queued wait (on an event
//! or a notify) holds back everything queued after it until it is satisfied,
//! exactly as a device stream does. `synchronize` waits until every piece of
//! work queued before the call has run, and reports the first error of the
//! queued work (a device lost meanwhile, a notify wait that timed out).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hal_core::kit::os::lock::{wait, wait_timeout};
use hal_core::{Error, Result};

use crate::memory::sealed::Span;
use crate::state::{lock, DevRef, StreamWork};
use crate::sync::SyncWords;

/// One piece of queued work.
pub(crate) enum Op {
    /// Copy host bytes into device memory.
    Write {
        dst: Span,
        offset: u64,
        data: Vec<u8>,
    },
    /// Set bytes of device memory to a value.
    Memset {
        dst: Span,
        offset: u64,
        len: u64,
        value: u8,
    },
    /// Copy between two device memories.
    Copy {
        dst: Span,
        dst_offset: u64,
        src: Span,
        src_offset: u64,
        len: u64,
    },
    /// Complete record `seq` of an event.
    Record { sync: Arc<SyncWords>, seq: u32 },
    /// Hold the stream until record `target` of an event completed.
    WaitEvent { sync: Arc<SyncWords>, target: u32 },
    /// Signal a notify.
    Signal { sync: Arc<SyncWords> },
    /// Hold the stream until a notify is signalled, then reset it.
    WaitNotify {
        sync: Arc<SyncWords>,
        timeout: Option<Duration>,
    },
    /// Store a value into a word of registered host memory
    /// (`cuStreamWriteValue32`).
    WriteWord { word: HostWord, value: u32 },
    /// Hold the stream until a word of registered host memory holds a value
    /// (`cuStreamWaitValue32`), looking at it as a device does: by polling.
    WaitWord { word: HostWord, value: u32 },
    /// Keep a value until the stream reaches this point, then drop it
    /// (`Device::hold_until_done`).
    Hold {
        value: Box<dyn std::any::Any + Send>,
    },
    /// Call a host function (`cuLaunchHostFunc`).
    Host { run: Box<dyn FnOnce() + Send> },
}

/// A 32-bit word of host memory registered with the device, which stream
/// operations read and write.
pub(crate) struct HostWord(*const std::sync::atomic::AtomicU32);

// SAFETY: the word is shared memory accessed only atomically; `HostWord::new`'s
// caller keeps it mapped until the stream ran the operation.
unsafe impl Send for HostWord {}

impl HostWord {
    /// # Safety
    ///
    /// `addr` is a 4-byte aligned word of memory mapped in this process
    /// that stays mapped until the operation holding it ran.
    pub(crate) unsafe fn new(addr: u64) -> HostWord {
        HostWord(addr as usize as *const std::sync::atomic::AtomicU32)
    }

    fn get(&self) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: aligned and mapped while the operation exists (`new`'s contract).
        unsafe { &*self.0 }
    }
}

#[derive(Default)]
struct Queue {
    ops: VecDeque<Op>,
    submitted: u64,
    completed: u64,
    error: Option<Error>,
}

struct Inner {
    queue: Mutex<Queue>,
    changed: Condvar,
    closing: AtomicBool,
}

/// An ordered queue of work on one device.
///
/// Dropping a stream lets the work already queued run, except waits that
/// would block: those (and what follows them) are abandoned, with a warning
/// in the log, so that no thread outlives the stream.
pub struct MockStream {
    pub(crate) dev: DevRef,
    inner: Arc<Inner>,
    worker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MockStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = lock(&self.inner.queue);
        f.debug_struct("MockStream")
            .field("backend", &self.dev.name())
            .field("device", &self.dev.ordinal)
            .field("queued", &(q.submitted - q.completed))
            .finish()
    }
}

impl MockStream {
    pub(crate) fn create(dev: &DevRef) -> Result<MockStream> {
        let inner = Arc::new(Inner {
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
            closing: AtomicBool::new(false),
        });
        let worker_inner = Arc::clone(&inner);
        let worker_dev = dev.clone();
        let worker = hal_core::kit::os::thread::spawn(
            &format!("hal-mock-stream-{}", dev.ordinal),
            move || run(&worker_dev, &worker_inner),
        )
        .map_err(|e| Error::io("starting a stream worker thread", e))?;
        {
            let mut streams = lock(&dev.state().streams);
            streams.retain(|w| w.strong_count() > 0);
            let work: Arc<dyn StreamWork> = Arc::clone(&inner) as Arc<dyn StreamWork>;
            streams.push(Arc::downgrade(&work));
        }
        Ok(MockStream {
            dev: dev.clone(),
            inner,
            worker: Some(worker),
        })
    }

    /// True when the work queued so far has run; the first error of that
    /// work, if any, is returned (and cleared) as `synchronize` does.
    pub(crate) fn query(&self) -> Result<bool> {
        let mut q = lock(&self.inner.queue);
        if let Some(e) = q.error.take() {
            return Err(e);
        }
        Ok(q.completed == q.submitted)
    }

    /// The device of the stream.
    pub fn device(&self) -> u32 {
        self.dev.ordinal
    }

    /// Queue `op`.
    pub(crate) fn push(&self, op: Op) {
        let mut q = lock(&self.inner.queue);
        q.ops.push_back(op);
        q.submitted += 1;
        self.inner.changed.notify_all();
    }

    /// Wait until the work queued before the call has run; the first error
    /// of the stream's work, if any, is returned (and cleared).
    pub(crate) fn synchronize(&self, timeout: Option<Duration>) -> Result<()> {
        match self.inner.wait_ran(timeout)?.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Inner {
    /// Wait until the work queued before the call has run: the queue, still
    /// locked, so that its error is read for the same work.
    fn wait_ran(&self, timeout: Option<Duration>) -> Result<MutexGuard<'_, Queue>> {
        let start = Instant::now();
        let mut q = lock(&self.queue);
        let target = q.submitted;
        while q.completed < target {
            match timeout {
                None => {
                    q = wait(&self.changed, q);
                }
                Some(t) => {
                    let Some(left) = t.checked_sub(start.elapsed()).filter(|d| !d.is_zero()) else {
                        return Err(Error::Timeout {
                            after: t,
                            what: format!(
                                "{} queued operation(s) of the stream to run",
                                target - q.completed
                            ),
                        });
                    };
                    q = wait_timeout(&self.changed, q, left).0;
                }
            }
        }
        Ok(q)
    }
}

impl StreamWork for Inner {
    fn wait_idle(&self, timeout: Option<Duration>) -> Result<()> {
        self.wait_ran(timeout).map(drop)
    }
}

impl Drop for MockStream {
    fn drop(&mut self) {
        self.inner.closing.store(true, Ordering::Release);
        {
            let _q = lock(&self.inner.queue);
            self.inner.changed.notify_all();
        }
        if let Some(worker) = self.worker.take() {
            if self.dev.shared.faults.is_forked() {
                // A forked child: the worker is its parent's and did not
                // come along; joining it would wait for ever.
                std::mem::forget(worker);
                return;
            }
            let _ = worker.join();
        }
    }
}

fn run(dev: &DevRef, inner: &Inner) {
    loop {
        let op = {
            let mut q = lock(&inner.queue);
            loop {
                if let Some(op) = q.ops.pop_front() {
                    break op;
                }
                if inner.closing.load(Ordering::Acquire) {
                    return;
                }
                q = wait(&inner.changed, q);
            }
        };
        let result = dev.alive().and_then(|()| execute(dev, op, &inner.closing));
        let mut q = lock(&inner.queue);
        q.completed += 1;
        if let Err(e) = result {
            if inner.closing.load(Ordering::Acquire) {
                log::warn!(
                    "{}: a stream of device {} was dropped while its work waited; the wait and \
                     {} later operation(s) were abandoned",
                    dev.name(),
                    dev.ordinal,
                    q.ops.len()
                );
                q.ops.clear();
            }
            if q.error.is_none() {
                q.error = Some(e);
            }
        }
        inner.changed.notify_all();
    }
}

fn abandoned() -> Error {
    Error::Closed {
        what: "the stream was dropped while its work waited".into(),
    }
}

fn execute(dev: &DevRef, op: Op, closing: &AtomicBool) -> Result<()> {
    match op {
        Op::Write { dst, offset, data } => dst.holder.write(dst.base + offset, &data),
        Op::Memset {
            dst,
            offset,
            len,
            value,
        } => {
            let len = usize::try_from(len)
                .map_err(|_| Error::invalid("a memset larger than the address space"))?;
            dst.holder.write(dst.base + offset, &vec![value; len])
        }
        Op::Copy {
            dst,
            dst_offset,
            src,
            src_offset,
            len,
        } => {
            let mut buf = vec![0u8; len as usize];
            src.holder.read(src.base + src_offset, &mut buf)?;
            dst.holder.write(dst.base + dst_offset, &buf)
        }
        Op::Record { sync, seq } => sync.complete(seq),
        Op::WaitEvent { sync, target } => loop {
            if sync.reached(target)? {
                return Ok(());
            }
            if closing.load(Ordering::Acquire) {
                return Err(abandoned());
            }
            dev.alive()?;
            sync.sleep_until_reached(target, None)?;
        },
        Op::Signal { sync } => sync.signal(),
        Op::WriteWord { word, value } => {
            word.get().store(value, Ordering::Release);
            Ok(())
        }
        Op::WaitWord { word, value } => loop {
            if word.get().load(Ordering::Acquire) == value {
                return Ok(());
            }
            if closing.load(Ordering::Acquire) {
                return Err(abandoned());
            }
            dev.alive()?;
            std::thread::sleep(Duration::from_micros(50));
        },
        Op::Hold { value } => {
            drop(value);
            Ok(())
        }
        Op::Host { run } => {
            run();
            Ok(())
        }
        Op::WaitNotify { sync, timeout } => {
            let start = Instant::now();
            loop {
                if sync.take_signal()? {
                    return Ok(());
                }
                if closing.load(Ordering::Acquire) {
                    return Err(abandoned());
                }
                dev.alive()?;
                let nap = match timeout {
                    None => None,
                    Some(t) => match t.checked_sub(start.elapsed()).filter(|d| !d.is_zero()) {
                        Some(left) => Some(left),
                        None => {
                            return Err(Error::Timeout {
                                after: t,
                                what: format!(
                                    "the notify waited on by a stream ({})",
                                    crate::vendor::Api::NotifyWait.symbol(dev.vendor())
                                ),
                            })
                        }
                    },
                };
                sync.sleep_unsignalled(nap)?;
            }
        }
    }
}
