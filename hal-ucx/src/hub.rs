//! What a node's worker and its progress thread share: the tables of
//! exports and connections, the queue the worker's callbacks fill, and the
//! baton of the thread that drives the worker and handles what the queue
//! holds (the progress thread, or a caller: [`crate::baton`]).
//!
//! The callbacks UCX calls (a connection request, an active message, a
//! failed peer, a finished request) only queue or finish: they take no
//! lock but the queue's and a completion's, so that no thread that holds
//! the tables while calling UCX can wait on a callback. Everything else
//! happens on the baton's holder, outside UCX's calls.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hal_core::Notify;

use crate::baton::{Baton, Held};
use crate::completion::Completion;
use crate::engine::{Callbacks, Engine};
use crate::ffi::bindings::*;
use crate::payload::Payload;
use crate::served::Serving;

/// What a callback queued for the progress thread.
pub(crate) enum Event {
    /// A connection request on the listener.
    Connect(usize),
    /// A message on an endpoint: its header, and its data.
    Message(usize, Vec<u8>, Payload),
    /// An endpoint's peer failed or closed, with the status.
    Failed(usize, ucs_status_t),
}

/// A connection that a part of hal above the hub handles itself (a
/// group's rendezvous): its messages and its failure go to it, on the
/// progress thread.
pub(crate) trait Link: Send + Sync {
    /// A message on `ep`, with its data (which it releases).
    fn message(&self, hub: &Hub, ep: usize, head: &[u8], payload: Payload);
    /// `ep`'s peer failed or closed.
    fn failed(&self, hub: &Hub, ep: usize, status: ucs_status_t);
    /// `ep`, a served connection from `peer`, is handed to this link
    /// (before its first message).
    fn handed(&self, _ep: usize, _peer: Option<std::net::SocketAddr>) {}
    /// Work of its own in each pass over the worker (with the baton held,
    /// not blocking); true when it did any.
    fn poll(&self, _hub: &Hub) -> bool {
        false
    }
}

/// One export, as the exporter keeps it.
pub(crate) struct ExportEntry {
    pub(crate) kind: hal_core::handle::remote::RemoteKind,
    pub(crate) secret: [u8; 16],
    /// The exported range's address in this process, and its size.
    pub(crate) base: u64,
    pub(crate) size: u64,
    /// Writes are refused.
    pub(crate) read_only: bool,
    /// UCX's memory type of the range.
    pub(crate) mem: ucs_memory_type_t,
    /// Importers that proved the secret and are still connected.
    pub(crate) importers: usize,
    /// Signals received.
    pub(crate) signals: u64,
    /// The notify a signal signals.
    pub(crate) notify: Option<Arc<dyn Notify>>,
}

/// The tables.
#[derive(Default)]
pub(crate) struct Tables {
    pub(crate) exports: HashMap<u64, ExportEntry>,
    /// The exporter's side of each connection, by endpoint.
    pub(crate) serving: HashMap<usize, Serving>,
    /// The importer's side of each connection, by endpoint.
    pub(crate) clients: HashMap<usize, Arc<crate::client::Client>>,
    pub(crate) next_export: u64,
    /// Writes the exporter receives by rendezvous: endpoint, request, and
    /// the reception's completion.
    pub(crate) receiving: Vec<(usize, u64, Arc<crate::completion::Completion>)>,
}

/// A link that takes the listener's connections of a kind, and the same
/// object as its owner finds it again.
pub(crate) type Extension = (Arc<dyn Link>, Arc<dyn std::any::Any + Send + Sync>);

/// Work for the progress thread.
type Command = Box<dyn FnOnce(&Hub) + Send>;

/// Everything a node's objects and its progress thread share.
pub(crate) struct Hub {
    pub(crate) engine: Engine,
    /// The listener (null until made).
    pub(crate) listener: Mutex<usize>,
    /// The address the handles name.
    pub(crate) address: Mutex<Option<SocketAddr>>,
    /// How long one operation or handshake may take.
    pub(crate) timeout: Duration,
    events: Mutex<VecDeque<Event>>,
    pub(crate) tables: Mutex<Tables>,
    /// Notified when an export's importers or signals change
    /// ([`Hub::tell_changed`]).
    pub(crate) changed: Condvar,
    /// Threads waiting on `changed` (or about to): a change wakes the
    /// condition variable only when there is one, which saves a system
    /// call per signal taken by a caller that drives the worker.
    pub(crate) watchers: AtomicUsize,
    stop: AtomicBool,
    /// Requests issued from the progress thread that nobody waits for (a
    /// refusal sent, a served connection closed): the worker must not be
    /// destroyed before they end, as UCX requires.
    unwaited: Mutex<Vec<Arc<Completion>>>,
    /// Calls into UCX that other threads left for the baton's holder.
    commands: Mutex<VecDeque<Command>>,
    /// The right to call into the worker.
    pub(crate) baton: Baton,
    /// Set when the progress thread has returned.
    has_exited: AtomicBool,
    /// How long the progress thread polls after its last work, and a
    /// caller waiting for an answer drives the worker, before they sleep.
    pub(crate) spin: Duration,
    /// One pass over the worker ([`crate::progress::pass`]), for callers
    /// that drive it ([`crate::drive`]).
    pub(crate) pass: fn(&Hub, bool) -> (bool, Option<Instant>),
    /// Callers driving the worker while they wait ([`Hub::driving`]).
    drivers: AtomicUsize,
    /// When the last of them stopped (nanoseconds since `epoch`, plus
    /// one; zero: never).
    driven: AtomicU64,
    epoch: Instant,
    /// Set while the progress thread sleeps, or is about to, on the
    /// worker's event descriptor: only then does a new call need to wake
    /// it ([`Hub::on_thread`]).
    sleeping: AtomicBool,
    /// Connections handled by a [`Link`], by endpoint.
    pub(crate) links: Mutex<HashMap<usize, Arc<dyn Link>>>,
    /// The link that takes the listener's connections whose first message
    /// is not an export's (a group served on this node's address).
    pub(crate) acceptor: Mutex<Option<Arc<dyn Link>>>,
    /// The link that takes the listener's connections whose first message
    /// is a channel's (the channels this node offers), and the same object
    /// for its owner to find again.
    pub(crate) channels: Mutex<Option<Extension>>,
}

/// The longest the progress thread stays back at a time while callers
/// drive the worker, and its grace after the last of them.
const STAY_BACK: Duration = Duration::from_millis(1);

/// A caller counted among those driving the worker ([`Hub::driving`]).
pub(crate) struct Driving<'a>(&'a Hub);

impl Drop for Driving<'_> {
    fn drop(&mut self) {
        let h = self.0;
        let now = h.epoch.elapsed().as_nanos() as u64;
        h.driven.store(now.saturating_add(1), Ordering::Release);
        h.drivers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A lock, whatever a panicking holder left.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The hub of a callback's argument.
///
/// # Safety
///
/// `arg` is the pointer [`Hub::callbacks`] gave, of a hub still alive:
/// the worker that calls back is destroyed before the hub is freed.
unsafe fn hub<'a>(arg: *mut c_void) -> &'a Hub {
    // SAFETY: the caller's promise.
    unsafe { &*(arg as *const Hub) }
}

unsafe extern "C" fn on_connect(req: ucp_conn_request_h, arg: *mut c_void) {
    // SAFETY: UCX passes the argument given with the listener: the hub.
    let h = unsafe { hub(arg) };
    h.queue(Event::Connect(req as usize));
}

unsafe extern "C" fn on_message(
    arg: *mut c_void,
    header: *const c_void,
    header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const ucp_am_recv_param_t,
) -> ucs_status_t {
    // SAFETY: UCX passes the argument given with the handler: the hub.
    let h = unsafe { hub(arg) };
    // SAFETY: UCX passes a valid parameter block for the call's duration.
    let p = unsafe { &*param };
    let ep = if p.recv_attr & u64::from(UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0 {
        p.reply_ep as usize
    } else {
        0
    };
    let rndv = p.recv_attr & u64::from(UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    let held = p.recv_attr & u64::from(UCP_AM_RECV_ATTR_FLAG_DATA) != 0;
    // A message without its sender is not one of hal's: answering OK lets
    // UCX drop it, data and all.
    if ep == 0 || header.is_null() {
        return UCS_OK;
    }
    // SAFETY: UCX gives `header_length` readable bytes at `header` for the
    // call.
    let head = unsafe { std::slice::from_raw_parts(header as *const u8, header_length) }.to_vec();
    let (payload, status) = if length == 0 || data.is_null() {
        (Payload::None, UCS_OK)
    } else if rndv {
        (Payload::Rndv(data as usize, length), UCS_INPROGRESS)
    } else if held {
        (Payload::Held(data as usize, length), UCS_INPROGRESS)
    } else {
        // SAFETY: UCX gives `length` readable bytes at `data` for the call.
        let v = unsafe { std::slice::from_raw_parts(data as *const u8, length) }.to_vec();
        (Payload::Copied(v), UCS_OK)
    };
    h.queue(Event::Message(ep, head, payload));
    status
}

unsafe extern "C" fn on_failure(arg: *mut c_void, ep: ucp_ep_h, status: ucs_status_t) {
    // SAFETY: UCX passes the argument given with the endpoint: the hub.
    let h = unsafe { hub(arg) };
    h.queue(Event::Failed(ep as usize, status));
}

impl Hub {
    pub(crate) fn new(
        engine: Engine,
        timeout: Duration,
        spin: Duration,
        pass: fn(&Hub, bool) -> (bool, Option<Instant>),
    ) -> Hub {
        Hub {
            engine,
            listener: Mutex::new(0),
            address: Mutex::new(None),
            timeout,
            events: Mutex::new(VecDeque::new()),
            tables: Mutex::new(Tables::default()),
            changed: Condvar::new(),
            watchers: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            commands: Mutex::new(VecDeque::new()),
            baton: Baton::default(),
            has_exited: AtomicBool::new(false),
            spin,
            pass,
            drivers: AtomicUsize::new(0),
            driven: AtomicU64::new(0),
            epoch: Instant::now(),
            sleeping: AtomicBool::new(false),
            unwaited: Mutex::new(Vec::new()),
            links: Mutex::new(HashMap::new()),
            acceptor: Mutex::new(None),
            channels: Mutex::new(None),
        }
    }

    /// The callbacks, with this hub as their argument.
    pub(crate) fn callbacks(&self) -> Callbacks {
        Callbacks {
            conn: Some(on_connect),
            am: Some(on_message),
            err: Some(on_failure),
            arg: self as *const Hub as *mut c_void,
        }
    }

    /// Keep `c`, a request nobody waits for, until it ends: [`Hub::shut`]
    /// waits for it before the worker goes.
    pub(crate) fn unwaited(&self, c: Arc<Completion>) {
        let mut kept = lock(&self.unwaited);
        kept.retain(|k| k.status().is_none());
        if c.status().is_none() {
            kept.push(c);
        }
    }

    fn queue(&self, e: Event) {
        lock(&self.events).push_back(e);
    }

    /// Ask the progress thread to stop.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.engine.signal();
    }

    /// The next event a callback queued.
    pub(crate) fn next_event(&self) -> Option<Event> {
        lock(&self.events).pop_front()
    }

    /// Run `f` with the baton and answer what it returns: here, when this
    /// thread holds it or finds it free, else on its holder's thread (the
    /// progress thread, or a caller driving the worker), which this waits
    /// for. See [`crate::baton`] for why UCX is called by one thread at a
    /// time.
    pub(crate) fn on_thread<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Hub) -> R + Send + 'static,
    ) -> hal_core::Result<R> {
        if self.baton.held_here() {
            return Ok(f(self));
        }
        // Without a spin the progress thread makes every call (as it
        // always has: the default keeps the order of calls and messages
        // that the tests of churning connections rely on); with one, a
        // caller that finds the baton free makes its own.
        let held = match self.inline() {
            Some(held) => Some(held),
            None if self.has_exited.load(Ordering::Acquire) => Some(self.baton.take()),
            None => None,
        };
        if let Some(held) = held {
            // What this thread posted earlier goes first.
            self.run_commands();
            let r = f(self);
            self.let_go(held);
            return Ok(r);
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        lock(&self.commands).push_back(Box::new(move |h: &Hub| {
            let _ = tx.send(f(h));
        }));
        // The progress thread marks itself sleeping before it looks at the
        // calls a last time (both sequentially consistent): either it sees
        // this call, or this sees it sleeping and wakes it.
        if self.sleeping.load(Ordering::SeqCst) {
            self.engine.signal();
        }
        let closed = || hal_core::Error::Closed {
            what: "the node's progress thread ended before it ran a call".into(),
        };
        // A holder that is awake answers within microseconds: poll for
        // that long (running the calls itself if the baton comes free)
        // before sleeping on the answer.
        let began = Instant::now();
        loop {
            match rx.try_recv() {
                Ok(r) => return Ok(r),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return Err(closed()),
                Err(std::sync::mpsc::TryRecvError::Empty) => {}
            }
            if let Some(held) = self.inline() {
                self.run_commands();
                self.let_go(held);
                continue;
            }
            if began.elapsed() >= self.spin {
                return rx.recv().map_err(|_| closed());
            }
            std::hint::spin_loop();
        }
    }

    /// The baton, for a call made here: taken when it is free and the
    /// node spins ([`crate::NodeOptions::spin`]); `None` otherwise.
    fn inline(&self) -> Option<Held<'_>> {
        if self.spin.is_zero() {
            return None;
        }
        self.baton.try_take()
    }

    /// Let go of the baton after calls made here. When the progress
    /// thread sleeps on the worker's event descriptor (it marked itself
    /// sleeping while it held the baton, so the mark is seen here), the
    /// worker is left as it would leave it: drained, then armed, as UCX
    /// asks before anyone waits on the descriptor; what the drain queued,
    /// or a worker that cannot be armed, wakes it.
    pub(crate) fn let_go(&self, held: Held<'_>) {
        if self.sleeping.load(Ordering::SeqCst) {
            while self.engine.progress() != 0 {}
            let queued = !lock(&self.events).is_empty() || !lock(&self.commands).is_empty();
            if queued || !self.engine.arm() {
                self.engine.signal();
            }
        }
        drop(held);
    }

    /// Wake the threads waiting for a change of the tables (the change
    /// made under the tables' lock before): a watcher counts itself
    /// before it looks at the tables under the same lock, so it either
    /// sees the change or is counted here.
    pub(crate) fn tell_changed(&self) {
        if self.watchers.load(Ordering::SeqCst) > 0 {
            self.changed.notify_all();
        }
    }

    /// Count this caller among those driving the worker while it waits,
    /// until the guard is dropped.
    pub(crate) fn driving(&self) -> Driving<'_> {
        self.drivers.fetch_add(1, Ordering::AcqRel);
        Driving(self)
    }

    /// How long the progress thread should stay back because callers
    /// drive the worker: while any does, and for a short grace after the
    /// last one stopped (one that waits again soon, as in a ping-pong,
    /// finds the worker free); `None` otherwise. Never more than
    /// [`STAY_BACK`] at a time, so that the thread sees a stop.
    pub(crate) fn stay_back(&self) -> Option<Duration> {
        if self.spin.is_zero() {
            return None;
        }
        if self.drivers.load(Ordering::Acquire) > 0 {
            return Some(STAY_BACK);
        }
        let driven = self.driven.load(Ordering::Acquire);
        if driven == 0 {
            return None;
        }
        let since = Duration::from_nanos(
            (self.epoch.elapsed().as_nanos() as u64).saturating_sub(driven - 1),
        );
        self.spin
            .min(STAY_BACK)
            .checked_sub(since)
            .filter(|d| !d.is_zero())
    }

    /// Mark the progress thread as about to sleep (`true`) or awake; true
    /// when a call came meanwhile, which it must run first.
    pub(crate) fn set_sleeping(&self, sleeping: bool) -> bool {
        self.sleeping.store(sleeping, Ordering::SeqCst);
        sleeping && !lock(&self.commands).is_empty()
    }

    /// Run `f` with the baton without waiting for it (as
    /// [`Hub::on_thread`] runs it, in the order asked).
    pub(crate) fn post(&self, f: impl FnOnce(&Hub) + Send + 'static) {
        if self.baton.held_here() {
            return f(self);
        }
        lock(&self.commands).push_back(Box::new(f));
        let held = match self.inline() {
            Some(held) => Some(held),
            None if self.has_exited.load(Ordering::Acquire) => Some(self.baton.take()),
            None => None,
        };
        match held {
            Some(held) => {
                self.run_commands();
                self.let_go(held);
            }
            None => self.engine.signal(),
        }
    }

    /// As [`Hub::post`], for a call that may wait for the next pass (a
    /// sample's release): with a spin, the pass of a caller driving the
    /// worker, or of the progress thread once it stops staying back (within
    /// [`STAY_BACK`]), runs it, after the samples that pass forwards, so
    /// that it is not in the way of an answer; only a progress thread
    /// asleep on the worker's descriptor is woken for it. Without a spin,
    /// [`Hub::post`].
    pub(crate) fn post_lazy(&self, f: impl FnOnce(&Hub) + Send + 'static) {
        if self.spin.is_zero() || self.has_exited.load(Ordering::Acquire) {
            return self.post(f);
        }
        if self.baton.held_here() {
            return f(self);
        }
        lock(&self.commands).push_back(Box::new(f));
        // The progress thread marks itself sleeping before it looks at the
        // calls a last time (as in `on_thread`); one that returned meanwhile
        // runs nothing more.
        if self.has_exited.load(Ordering::Acquire) {
            let held = self.baton.take();
            self.run_commands();
            return self.let_go(held);
        }
        if self.sleeping.load(Ordering::SeqCst) {
            self.engine.signal();
        }
    }

    /// Mark the progress thread as returned, and run what was left for it.
    pub(crate) fn exited(&self) {
        self.has_exited.store(true, Ordering::Release);
        let held = self.baton.take();
        self.run_commands();
        drop(held);
    }

    /// Run the calls other threads asked for; true when there was one.
    pub(crate) fn run_commands(&self) -> bool {
        let mut any = false;
        loop {
            let Some(c) = lock(&self.commands).pop_front() else {
                return any;
            };
            any = true;
            c(self);
        }
    }

    /// True once asked to stop.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The link of `ep`, if a link handles it.
    pub(crate) fn link(&self, ep: usize) -> Option<Arc<dyn Link>> {
        lock(&self.links).get(&ep).cloned()
    }

    /// Hand `ep`, a served connection that has sent nothing of an
    /// export's yet, to the acceptor: the link that handles it now, or
    /// `None` when there is no acceptor or the connection is not fresh.
    pub(crate) fn hand_to_acceptor(&self, ep: usize) -> Option<Arc<dyn Link>> {
        let acceptor = lock(&self.acceptor).clone()?;
        self.hand_to(ep, acceptor)
    }

    /// The link of the channels this node offers, if it offers any.
    pub(crate) fn channels_link(&self) -> Option<Arc<dyn Link>> {
        lock(&self.channels).as_ref().map(|(l, _)| Arc::clone(l))
    }

    /// Hand `ep`, a served connection that has sent nothing of an
    /// export's yet, to the channels this node offers, as
    /// [`Hub::hand_to_acceptor`] does.
    pub(crate) fn hand_to_channels(&self, ep: usize) -> Option<Arc<dyn Link>> {
        let channels = lock(&self.channels).as_ref().map(|(l, _)| Arc::clone(l))?;
        self.hand_to(ep, channels)
    }

    fn hand_to(&self, ep: usize, acceptor: Arc<dyn Link>) -> Option<Arc<dyn Link>> {
        let peer = {
            let mut t = lock(&self.tables);
            let fresh = matches!(
                t.serving.get(&ep).map(|s| s.stage),
                Some(crate::served::Stage::Hello)
            );
            if !fresh {
                return None;
            }
            t.serving.remove(&ep).and_then(|s| s.peer)
        };
        acceptor.handed(ep, peer);
        lock(&self.links).insert(ep, Arc::clone(&acceptor));
        Some(acceptor)
    }

    /// Close every endpoint, destroy the listener; the thread is stopped.
    pub(crate) fn shut(&self) {
        let listener = std::mem::take(&mut *lock(&self.listener));
        if listener != 0 {
            self.engine.destroy_listener(listener as ucp_listener_h);
        }
        let eps: Vec<usize> = {
            let mut t = lock(&self.tables);
            // Importers' connections belong to their remote objects, which
            // keep the node alive: only served ones are left here.
            let mut eps: Vec<usize> = t.serving.drain().map(|(ep, _)| ep).collect();
            eps.extend(lock(&self.links).drain().map(|(ep, _)| ep));
            eps
        };
        *lock(&self.acceptor) = None;
        *lock(&self.channels) = None;
        let mut closing: Vec<_> = eps
            .into_iter()
            .map(|ep| self.engine.close(ep as ucp_ep_h, true))
            .collect();
        closing.append(&mut lock(&self.unwaited));
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && closing.iter().any(|c| c.status().is_none()) {
            self.engine.progress();
        }
    }
}
