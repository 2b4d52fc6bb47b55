//! A subscriber on another host than its channel's publisher: it proves
//! the offer's secret, allocates slots of its own, and receives each
//! sample into one of them (UCX's rendezvous, straight into the slot),
//! where it is read in place; releasing it tells the publisher's side,
//! which only then gives the channel's slot back.

use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hal_core::channel::{Mode, MAX_SLOTS};
use hal_core::dynamic::{DynAllocation, DynDevice};
use hal_core::handle::remote::{RemoteHandle, RemoteKind, RemoteMemoryType};
use hal_core::kit::os::random_id;
use hal_core::{AllocDesc, Error, Location, Memory, Result};

use super::options::RemoteSubscribeOptions;
use super::ticket::RemoteSampleTicket;
use super::wire::{self, End, Message, Refusal};
use crate::auth::{self, Role};
use crate::completion::Completion;
use crate::ffi::bindings::*;
use crate::hub::{lock, Hub, Link};
use crate::node::Node;
use crate::owner::Owner;
use crate::payload::Payload;
use crate::protocol::AM_ID;

/// How long a wait for a sample's bytes looks at once before it looks
/// whether the connection is gone.
const POLL: Duration = Duration::from_millis(50);

/// The subscriber's slots, as the progress thread writes into them.
#[derive(Clone, Copy)]
struct Ring {
    base: u64,
    mem: ucs_memory_type_t,
    slots: u32,
    slot_size: u64,
}

/// A sample on its way into a slot, or there.
struct Pending {
    seq: u64,
    slot: u32,
    len: u64,
    done: Arc<Completion>,
}

#[derive(Default)]
struct State {
    /// Messages of the handshake.
    handshake: VecDeque<Message>,
    ring: Option<Ring>,
    /// The slots a sample holds (on its way, or received and not released).
    busy: Vec<bool>,
    /// Samples in the order they came.
    pending: VecDeque<Pending>,
    /// How the channel ended, once the publisher's side said so.
    ended: Option<End>,
    /// Why the connection is gone, once it is.
    gone: Option<String>,
    /// Threads asleep on the inbox's condition variable ([`Inbox::wake`]).
    sleepers: usize,
}

/// The connection's side the progress thread fills.
#[derive(Default)]
struct Inbox {
    state: Mutex<State>,
    cv: Condvar,
}

impl Inbox {
    /// Let go of the state, changed, and wake its sleepers if there are
    /// any (a system call saved per sample a polling receiver takes).
    fn wake(&self, s: std::sync::MutexGuard<'_, State>) {
        let sleepers = s.sleepers;
        drop(s);
        if sleepers > 0 {
            self.cv.notify_all();
        }
    }

    /// Sleep on the inbox until woken or `d` from now (`None`: until woken).
    fn sleep<'a>(
        &self,
        mut s: std::sync::MutexGuard<'a, State>,
        d: Option<Duration>,
    ) -> std::sync::MutexGuard<'a, State> {
        s.sleepers += 1;
        let mut s = match d {
            Some(d) => {
                self.cv
                    .wait_timeout(s, d)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => self.cv.wait(s).unwrap_or_else(|p| p.into_inner()),
        };
        s.sleepers -= 1;
        s
    }

    fn broken(&self, why: String) {
        let mut s = lock(&self.state);
        if s.gone.is_none() {
            s.gone = Some(why);
        }
        self.wake(s);
    }

    /// A sample's message: its bytes into its slot.
    fn sample(&self, hub: &Hub, seq: u64, slot: u32, len: u64, payload: Payload) {
        let mut s = lock(&self.state);
        let fits = match s.ring {
            Some(r) => {
                slot < r.slots
                    && !s.busy[slot as usize]
                    && len <= r.slot_size
                    && payload.len() as u64 == len
            }
            None => false,
        };
        let Some(ring) = s.ring.filter(|_| fits) else {
            drop(s);
            payload.release(&hub.engine);
            return self.broken(format!(
                "the publisher's side sent sample {seq} of {len} bytes into slot {slot}, which \
                 does not follow the channel's protocol"
            ));
        };
        let target = ring.base + u64::from(slot) * ring.slot_size;
        let done = Arc::new(Completion::default());
        match payload {
            Payload::Rndv(desc, n) => {
                if let Err(e) = hub.engine.receive(
                    desc as *mut std::ffi::c_void,
                    target as *mut std::ffi::c_void,
                    n,
                    ring.mem,
                    Arc::clone(&done),
                ) {
                    drop(s);
                    return self.broken(format!("receiving sample {seq} failed: {e}"));
                }
            }
            other => {
                let copied = match other.bytes() {
                    Some([]) => true,
                    Some(b) if ring.mem == UCS_MEMORY_TYPE_HOST => {
                        // SAFETY: `target .. target + len` is slot `slot` of
                        // the ring (checked above), host memory this
                        // subscriber allocated and keeps until its drop,
                        // which waits for every reception; no sample of
                        // that slot is read meanwhile (it is busy, and not
                        // handed out yet); `b` is the message's data, which
                        // does not overlap it.
                        unsafe {
                            std::ptr::copy_nonoverlapping(b.as_ptr(), target as *mut u8, b.len())
                        };
                        true
                    }
                    _ => false,
                };
                other.release(&hub.engine);
                if !copied {
                    drop(s);
                    return self.broken(format!(
                        "sample {seq} came in a way it cannot be put in device memory"
                    ));
                }
                done.finish(UCS_OK);
            }
        }
        s.busy[slot as usize] = true;
        s.pending.push_back(Pending {
            seq,
            slot,
            len,
            done,
        });
        self.wake(s);
    }
}

impl Link for Inbox {
    fn message(&self, hub: &Hub, _ep: usize, head: &[u8], payload: Payload) {
        match wire::decode(head) {
            Ok(Message::Sample { seq, slot, len }) => self.sample(hub, seq, slot, len, payload),
            Ok(m) => {
                let data = payload.len();
                payload.release(&hub.engine);
                if data != 0 {
                    return self.broken(format!("{m:?} came with data"));
                }
                let mut s = lock(&self.state);
                match m {
                    Message::End(how) => s.ended = Some(how),
                    other => s.handshake.push_back(other),
                }
                self.wake(s);
            }
            Err(why) => {
                payload.release(&hub.engine);
                self.broken(format!(
                    "the publisher's side sent a malformed message ({})",
                    why.0
                ));
            }
        }
    }

    fn failed(&self, _hub: &Hub, _ep: usize, status: ucs_status_t) {
        self.broken(format!(
            "the connection failed ({})",
            crate::ffi::status::name(status)
        ));
    }
}

/// The receiving end of a channel whose publisher is on another host
/// (offered there with [`Node::offer_channel`]): the same receive and
/// release as a [`Subscriber`](hal_core::channel::Subscriber)'s, with the
/// same back-pressure: the publisher's slot is free again only once this
/// subscriber released its sample. Dropping it unsubscribes.
///
/// ```no_run
/// use std::sync::Arc;
/// use hal_core::channel::{ChannelOptions, Publisher};
/// use hal_cpu_shm::CpuShm;
/// use hal_ucx::{Node, RemoteChannelOptions, RemoteSubscribeOptions, RemoteSubscriber};
/// # fn main() -> hal_core::Result<()> {
/// // The publisher's host: a channel, offered on a node.
/// let device = Arc::new(CpuShm::new().host());
/// let mut publisher = Publisher::create(&*device, "frames", &ChannelOptions::default())?;
/// let node = Node::bind("192.0.2.1:0".parse().unwrap())?;
/// let offer = node.offer_channel(device.clone(), "frames", &RemoteChannelOptions::default())?;
/// println!("{}", offer.text()); // hal1r.… : give it to the subscribers' hosts
///
/// // Another host: subscribe with the text, receive in place, release.
/// # let text = offer.text().to_string();
/// let node = Node::bind("192.0.2.2:0".parse().unwrap())?;
/// let device = CpuShm::new().host();
/// let subscriber =
///     RemoteSubscriber::connect(&node, &device, &text, &RemoteSubscribeOptions::default())?;
/// let sample = subscriber.receive()?;
/// let bytes = sample.to_vec()?;
/// drop(sample); // the publisher's slot is free again
/// # let _ = (bytes, &mut publisher);
/// # Ok(()) }
/// ```
#[must_use = "dropping a RemoteSubscriber unsubscribes"]
pub struct RemoteSubscriber {
    conn: Connection,
    ring: Ring,
    mode: Mode,
    options: RemoteSubscribeOptions,
    /// The slots: freed by the drop once no reception writes into them.
    memory: ManuallyDrop<Box<dyn DynAllocation>>,
}

/// The connection to the publisher's side; dropping it closes it.
struct Connection {
    owner: Arc<Owner>,
    ep: usize,
    inbox: Arc<Inbox>,
    at: SocketAddr,
    closed: bool,
}

impl std::fmt::Debug for RemoteSubscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSubscriber")
            .field("at", &self.conn.at)
            .field("slots", &self.ring.slots)
            .field("slot_size", &self.ring.slot_size)
            .finish_non_exhaustive()
    }
}

impl RemoteSubscriber {
    /// Subscribe from `node` to the channel offer `text` names (a `hal1r.`
    /// text of [`ChannelOffer::text`](crate::ChannelOffer::text)); the
    /// slots are allocated on `device` (host memory). In broadcast mode it
    /// receives the samples published from now on.
    ///
    /// Errors: [`Error::PermissionDenied`] when the secrets differ;
    /// [`Error::NotFound`] when the offer is gone; [`Error::Closed`] when
    /// the channel's publisher is gone, or the publisher's node cannot be
    /// reached; [`Error::Busy`] when the channel has all the subscribers
    /// it can take; [`Error::Timeout`] past the node's timeout.
    pub fn connect(
        node: &Node,
        device: &dyn DynDevice,
        text: &str,
        options: &RemoteSubscribeOptions,
    ) -> Result<RemoteSubscriber> {
        let handle = RemoteHandle::from_text(text)?;
        if handle.kind != RemoteKind::Channel {
            return Err(Error::InvalidArgument {
                what: format!(
                    "a remote handle of a {:?}: a remote subscriber takes a channel offer's \
                     (Node::offer_channel)",
                    handle.kind
                ),
            });
        }
        if options.slots > MAX_SLOTS {
            return Err(Error::InvalidArgument {
                what: format!(
                    "{} slots: a subscriber holds at most {MAX_SLOTS}",
                    options.slots
                ),
            });
        }
        let owner = Arc::clone(node.owner());
        let inbox = Arc::new(Inbox::default());
        let link: Arc<dyn Link> = inbox.clone();
        let at = handle.listener;
        let ep = owner.hub.on_thread(move |h| {
            let ep = h.engine.endpoint(None, Some(at), &h.callbacks())? as usize;
            lock(&h.links).insert(ep, link);
            Ok::<_, Error>(ep)
        })??;
        // On failure, its drop closes the connection.
        let conn = Connection {
            owner,
            ep,
            inbox,
            at,
            closed: false,
        };
        conn.handshake(&handle, device, options)
    }

    /// The channel's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// How many slots this subscriber has: the most samples it holds.
    pub fn slots(&self) -> usize {
        self.ring.slots as usize
    }

    /// The size of a slot: the most bytes a sample has.
    pub fn slot_size(&self) -> u64 {
        self.ring.slot_size
    }

    /// The memory of this subscriber's slots (a sample is at
    /// [`RemoteSample::offset`] in it).
    pub fn memory(&self) -> &dyn DynAllocation {
        &**self.memory
    }

    /// The next sample, waiting at most [`RemoteSubscribeOptions::timeout`].
    /// [`Error::Closed`] once the channel ended (its publisher closed or
    /// died, its offer was withdrawn, or the connection to its node
    /// failed) and every sample that reached this subscriber was received.
    pub fn receive(&self) -> Result<RemoteSample<'_>> {
        self.receive_timeout(self.options.timeout)
    }

    /// The next sample, waiting at most `timeout` (`None`: until there is
    /// one or the channel ended).
    pub fn receive_timeout(&self, timeout: Option<Duration>) -> Result<RemoteSample<'_>> {
        let started = Instant::now();
        let deadline = timeout.map(|t| started + t);
        // With a spin ([`crate::NodeOptions::spin`]) this thread drives the
        // worker until a sample (or the end) is there.
        crate::drive::spin_until(&self.conn.owner.hub, || {
            let s = lock(&self.conn.inbox.state);
            s.ended.is_some()
                || s.gone.is_some()
                || s.pending.front().is_some_and(|p| p.done.status().is_some())
        });
        let mut s = lock(&self.conn.inbox.state);
        loop {
            if let Some(front) = s.pending.front() {
                match front.done.status() {
                    Some(UCS_OK) => {
                        let Some(p) = s.pending.pop_front() else {
                            continue;
                        };
                        return Ok(RemoteSample {
                            subscriber: self,
                            seq: p.seq,
                            slot: p.slot,
                            len: p.len,
                        });
                    }
                    Some(st) => {
                        let seq = front.seq;
                        s.pending.pop_front();
                        if s.gone.is_none() {
                            s.gone = Some(format!(
                                "sample {seq} did not arrive ({})",
                                crate::ffi::status::name(st)
                            ));
                        }
                        continue;
                    }
                    None => {
                        let done = Arc::clone(&front.done);
                        drop(s);
                        let mut until = Instant::now() + POLL;
                        if let Some(d) = deadline {
                            until = until.min(d);
                        }
                        done.wait_until(Some(until));
                        if deadline.is_some_and(|d| Instant::now() >= d) && done.status().is_none()
                        {
                            return Err(self.late(started));
                        }
                        s = lock(&self.conn.inbox.state);
                        continue;
                    }
                }
            }
            if let Some(how) = s.ended {
                return Err(Error::Closed {
                    what: format!(
                        "the channel offered at {}: {}",
                        self.conn.at,
                        match how {
                            End::Closed => "its publisher closed it",
                            End::Died => "its publisher died",
                            End::Withdrawn => "its offer was withdrawn",
                        }
                    ),
                });
            }
            if let Some(why) = &s.gone {
                return Err(Error::Closed {
                    what: format!(
                        "the channel offered at {}: {why} (its publisher's process died, or \
                         the network between the hosts failed)",
                        self.conn.at
                    ),
                });
            }
            let now = Instant::now();
            s = match deadline {
                Some(d) if now >= d => return Err(self.late(started)),
                Some(d) => self.conn.inbox.sleep(s, Some(d - now)),
                None => self.conn.inbox.sleep(s, None),
            };
        }
    }

    fn late(&self, started: Instant) -> Error {
        Error::Timeout {
            after: started.elapsed(),
            what: format!("a sample of the channel offered at {}", self.conn.at),
        }
    }

    /// Release a sample [`RemoteSample::detach`] detached: its slot is
    /// free again, and the publisher's side is told.
    pub fn release_ticket(&self, ticket: RemoteSampleTicket) -> Result<()> {
        if ticket.slot >= self.ring.slots {
            return Err(Error::invalid(format!(
                "a remote sample ticket of slot {} on a subscriber of {} slots",
                ticket.slot, self.ring.slots
            )));
        }
        self.release(ticket.slot);
        Ok(())
    }

    /// The sample in `slot` is released: the publisher's side is told.
    fn release(&self, slot: u32) {
        let gone = {
            let mut s = lock(&self.conn.inbox.state);
            if let Some(b) = s.busy.get_mut(slot as usize) {
                *b = false;
            }
            s.gone.is_some()
        };
        if !gone {
            // Not waited for: the receiving thread goes on at once (and
            // with a spin, the release goes with the next pass, after what
            // that pass forwards).
            let head = Message::Release { slot }.encode();
            let ep = self.conn.ep;
            self.conn.owner.hub.post_lazy(move |h| {
                match h.engine.send(ep as ucp_ep_h, AM_ID, head, None, false) {
                    Ok(c) => h.unwaited(c),
                    Err(e) => log::debug!("hal-ucx: releasing a remote sample: {e}"),
                }
            });
        }
    }
}

impl Connection {
    fn handshake(
        self,
        handle: &RemoteHandle,
        device: &dyn DynDevice,
        options: &RemoteSubscribeOptions,
    ) -> Result<RemoteSubscriber> {
        let deadline = Instant::now() + self.owner.hub.timeout;
        let offer = handle.export_id;
        let mine = random_id();
        self.send(Message::Hello {
            offer,
            slots: options.slots as u32,
            nonce: mine,
        })?;
        let theirs = match self.next(deadline)? {
            Message::Challenge { nonce, proof } => {
                if !auth::verify(
                    &handle.secret,
                    Role::ChannelPublisher,
                    offer,
                    &mine,
                    &nonce,
                    &proof,
                ) {
                    return Err(Error::PermissionDenied {
                        pid: None,
                        reason: format!(
                            "the node at {} could not prove it holds the channel offer's \
                             secret: another program serves that address",
                            self.at
                        ),
                    });
                }
                nonce
            }
            other => return Err(self.refusal(other)),
        };
        let proof = auth::prove(
            &handle.secret,
            Role::ChannelSubscriber,
            offer,
            &theirs,
            &mine,
        );
        self.send(Message::Proof { proof })?;
        let (slots, slot_size, mode) = match self.next(deadline)? {
            Message::Welcome {
                slots,
                slot_size,
                mode,
            } if options.slots == 0 || slots as usize <= options.slots => (slots, slot_size, mode),
            other => return Err(self.refusal(other)),
        };
        let bytes = u64::from(slots) * slot_size;
        let memory = device.allocate(&AllocDesc::host(bytes.max(1)))?;
        let (base, mem) = match (memory.host_ptr(), memory.location()) {
            (Some(p), _) => (p as u64, UCS_MEMORY_TYPE_HOST),
            (None, Location::Device(_))
                if self.owner.hub.engine.supports(RemoteMemoryType::Cuda) =>
            {
                (memory.addr(), UCS_MEMORY_TYPE_CUDA)
            }
            (None, other) => {
                return Err(Error::unsupported(
                    crate::ffi::sys::ucx_id(),
                    "remote subscriber",
                    format!("slots at {other:?} that UCX cannot receive into here"),
                ))
            }
        };
        let ring = Ring {
            base,
            mem,
            slots,
            slot_size,
        };
        {
            let mut s = lock(&self.inbox.state);
            s.ring = Some(ring);
            s.busy = vec![false; slots as usize];
        }
        // From here the subscriber's drop waits for receptions into the
        // slots before it frees them.
        let sub = RemoteSubscriber {
            conn: self,
            ring,
            mode,
            options: options.clone(),
            memory: ManuallyDrop::new(memory),
        };
        sub.conn.send(Message::Ready)?;
        Ok(sub)
    }

    /// The next message of the handshake, until `deadline`.
    fn next(&self, deadline: Instant) -> Result<Message> {
        let started = Instant::now();
        let mut s = lock(&self.inbox.state);
        loop {
            if let Some(m) = s.handshake.pop_front() {
                return Ok(m);
            }
            if let Some(why) = &s.gone {
                return Err(Error::Closed {
                    what: format!(
                        "subscribing to the channel offered at {}: {why} (is the offer's node \
                         there, and does this host reach it?)",
                        self.at
                    ),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    after: now - started,
                    what: format!("the channel offered at {} to answer", self.at),
                });
            }
            s = self.inbox.sleep(s, Some(deadline - now));
        }
    }

    /// The error of an answer other than the one expected.
    fn refusal(&self, m: Message) -> Error {
        let at = self.at;
        match m {
            Message::Denied(Refusal::Secret) => Error::PermissionDenied {
                pid: None,
                reason: format!(
                    "the channel offered at {at} refused this subscriber's proof: its text's \
                     secret is not the offer's (pass the offer's text as it is)"
                ),
            },
            Message::Denied(Refusal::Gone) => Error::NotFound {
                what: format!(
                    "the channel offer the text names at {at}: it was withdrawn, or its node \
                     started again (ask for its text again)"
                ),
            },
            Message::Denied(Refusal::Busy) => Error::Busy {
                what: format!(
                    "the channel offered at {at}, which takes no more subscribers (or whose \
                     slots UCX cannot send from)"
                ),
                holders: 0,
            },
            Message::Denied(Refusal::Closed) => Error::Closed {
                what: format!("the channel offered at {at}: its publisher is gone"),
            },
            other => Error::Closed {
                what: format!(
                    "subscribing to the channel offered at {at}: it answered {other:?}, which \
                     does not follow the channel's protocol"
                ),
            },
        }
    }

    /// Send `m` to the publisher's side (the send goes on by itself).
    fn send(&self, m: Message) -> Result<()> {
        let head = m.encode();
        let ep = self.ep;
        self.owner.hub.on_thread(move |h| {
            h.engine
                .send(ep as ucp_ep_h, AM_ID, head, None, false)
                .map(|c| h.unwaited(c))
        })?
    }

    /// Close the connection (at once: the publisher's side then releases
    /// what it forwarded here), waiting for the close a bounded time.
    fn close(&mut self) {
        if std::mem::replace(&mut self.closed, true) {
            return;
        }
        let ep = self.ep;
        let closing = self.owner.hub.on_thread(move |h| {
            lock(&h.links).remove(&ep);
            h.engine.close(ep as ucp_ep_h, true)
        });
        if let Ok(c) = closing {
            c.wait_until(Some(Instant::now() + Duration::from_secs(2)));
            self.owner.hub.unwaited(c);
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close();
    }
}

impl Drop for RemoteSubscriber {
    /// Unsubscribes: the connection closes (the publisher's side then
    /// releases every sample it forwarded here), and the slots are freed
    /// once no reception writes into them.
    fn drop(&mut self) {
        self.conn.close();
        let pending: Vec<Arc<Completion>> = lock(&self.conn.inbox.state)
            .pending
            .drain(..)
            .map(|p| p.done)
            .collect();
        let until = Instant::now() + Duration::from_secs(2);
        let unfinished = pending.iter().any(|c| c.wait_until(Some(until)).is_none());
        if unfinished {
            log::warn!(
                "hal-ucx: receptions into a remote subscriber's slots did not end; the slots \
                 are left allocated"
            );
            return;
        }
        // SAFETY: the slots are dropped once, here, and never used after:
        // the connection is closed and no reception writes into them.
        unsafe { ManuallyDrop::drop(&mut self.memory) };
    }
}

/// A received sample, in a slot of its [`RemoteSubscriber`]: its bytes
/// stay as they are until it is dropped, which releases it (and with it,
/// the publisher's slot).
#[must_use = "dropping a RemoteSample releases it"]
pub struct RemoteSample<'a> {
    subscriber: &'a RemoteSubscriber,
    seq: u64,
    slot: u32,
    len: u64,
}

impl RemoteSample<'_> {
    /// The sample's sequence number (the publisher's count, from 0).
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty sample.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where it starts in [`RemoteSubscriber::memory`].
    pub fn offset(&self) -> u64 {
        u64::from(self.slot) * self.subscriber.ring.slot_size
    }

    /// The memory it is part of (for device work on it).
    pub fn memory(&self) -> &dyn DynAllocation {
        self.subscriber.memory()
    }

    /// Copy bytes `offset ..` of the sample into `dst`.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let end = offset.checked_add(dst.len() as u64);
        if end.is_none_or(|e| e > self.len) {
            return Err(Error::invalid(format!(
                "{} bytes at {offset} of a sample of {}",
                dst.len(),
                self.len
            )));
        }
        self.memory().read(self.offset() + offset, dst)
    }

    /// The sample's bytes, copied.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.len as usize];
        self.read(0, &mut v)?;
        Ok(v)
    }

    /// Detach the sample from its borrow of the subscriber: the ticket
    /// holds its slot until
    /// [`RemoteSubscriber::release_ticket`] (or the subscriber's drop).
    pub fn detach(self) -> RemoteSampleTicket {
        let ticket = RemoteSampleTicket {
            slot: self.slot,
            seq: self.seq,
            offset: self.offset(),
            len: self.len,
        };
        // Not released: the ticket holds the slot now.
        std::mem::forget(self);
        ticket
    }
}

impl Drop for RemoteSample<'_> {
    fn drop(&mut self) {
        self.subscriber.release(self.slot);
    }
}

impl std::fmt::Debug for RemoteSample<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSample")
            .field("sequence", &self.seq)
            .field("slot", &self.slot)
            .field("len", &self.len)
            .finish()
    }
}
