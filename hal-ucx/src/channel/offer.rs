//! The publisher's side: a channel offered on a node. Each remote
//! subscriber that proves the offer's secret gets a proxy here, a local
//! [`Subscriber`] of the channel on its own thread, which forwards each
//! sample it receives into the remote subscriber's slots and holds it
//! until the remote releases it. Back-pressure, queue shares and the
//! return of a dead subscriber's slots are then the channel's own.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hal_core::channel::{RemoteNote, SampleTicket, SubscribeOptions, Subscriber};
use hal_core::dynamic::DynDevice;
use hal_core::handle::remote::{RemoteHandle, RemoteKind, RemoteMemoryType};
use hal_core::kit::os::random_id;
use hal_core::{Error, Location, Result};

use super::options::RemoteChannelOptions;
use super::wire::{self, End, Message, Refusal};
use crate::auth::{self, Role};
use crate::completion::Completion;
use crate::ffi::bindings::*;
use crate::hub::{lock, Hub, Link};
use crate::owner::Owner;
use crate::payload::Payload;
use crate::protocol::AM_ID;

/// How long a proxy waits for a sample, or a free slot, before it looks
/// whether it is to stop.
const POLL: Duration = Duration::from_millis(50);

/// Most connections in their handshake at once: one more is refused.
const MAX_HANDSHAKES: usize = 256;

/// The most bytes of a sample in host memory that UCX may send eagerly
/// (its choice), rather than by rendezvous.
const EAGER: usize = 16 << 10;

/// A channel offered on a node.
struct Offered {
    name: String,
    secret: [u8; 16],
    device: Arc<dyn DynDevice>,
    /// The node: the proxies send through it.
    owner: Arc<Owner>,
    /// How long a handshake, and the wait for a subscriber's slots, may take.
    timeout: Duration,
    /// The offer was dropped: no new subscriber, and the proxies stop.
    withdrawn: AtomicBool,
    proxies: Mutex<Vec<JoinHandle<()>>>,
}

/// Where a connection to the offers stands.
enum Conn {
    /// Waiting for the hello, since then; from where.
    Hello(Instant, Option<SocketAddr>),
    /// Challenged: waiting for the proof.
    Proof {
        offer: Arc<Offered>,
        id: u64,
        slots: u32,
        theirs: [u8; 16],
        mine: [u8; 16],
        since: Instant,
        peer: Option<SocketAddr>,
    },
    /// A remote subscriber, and its proxy.
    Proxy(Arc<Proxy>),
}

/// The channels a node offers: the link of their connections.
#[derive(Default)]
pub(crate) struct Offers {
    offers: Mutex<HashMap<u64, Arc<Offered>>>,
    conns: Mutex<HashMap<usize, Conn>>,
    /// Where connections handed here came from, until their first message.
    peers: Mutex<HashMap<usize, SocketAddr>>,
    next: AtomicU64,
}

/// What a proxy and the progress thread share.
#[derive(Default)]
struct ProxyState {
    /// The remote subscriber's slots are allocated.
    ready: bool,
    /// Why the connection is gone, once it is.
    gone: Option<String>,
    /// The remote's free slots.
    free: Vec<u32>,
    /// The local sample each remote slot holds.
    held: Vec<Option<SampleTicket>>,
}

/// One remote subscriber's proxy.
struct Proxy {
    ep: usize,
    /// Where the remote's connection came from: recorded for listings
    /// ([`RemoteNote`]).
    peer: Option<SocketAddr>,
    /// Set on the progress thread when the endpoint is closed: nothing is
    /// sent on it after (UCX frees a closed endpoint).
    closed: Arc<AtomicBool>,
    state: Mutex<ProxyState>,
    cv: Condvar,
    subscriber: OnceLock<Arc<Subscriber>>,
    /// The offer, for a caller's pass that forwards ([`Offers::poll`]).
    offer: Weak<Offered>,
    /// What forwarding needs, once the remote's slots are there.
    route: OnceLock<Route>,
    /// Held by whoever forwards: the proxy's thread or a caller's pass.
    stepping: Mutex<()>,
    /// The sends issued that may still read the slots.
    sends: Mutex<Vec<Arc<Completion>>>,
    /// Set once the forwarding ended (by either).
    ended: AtomicBool,
}

/// Where a proxy forwards from: its subscriber's slots, as UCX sends them.
struct Route {
    sub: Arc<Subscriber>,
    base: u64,
    mem: ucs_memory_type_t,
}

/// What one forwarding step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Nothing to forward now.
    Idle,
    /// A sample went.
    Moved,
    /// The forwarding ended.
    Ended,
}

impl Proxy {
    fn gone(&self, why: String) {
        let mut s = lock(&self.state);
        if s.gone.is_none() {
            s.gone = Some(why);
        }
        drop(s);
        self.cv.notify_all();
    }

    /// The remote released `slot`: its local sample goes back.
    fn release(&self, slot: u32) -> bool {
        let mut s = lock(&self.state);
        let Some(ticket) = s.held.get_mut(slot as usize).and_then(Option::take) else {
            return false;
        };
        if let Some(sub) = self.subscriber.get() {
            if let Err(e) = sub.release_ticket(ticket) {
                log::warn!("hal-ucx: releasing a forwarded sample: {e}");
            }
        }
        s.free.push(slot);
        drop(s);
        self.cv.notify_all();
        true
    }
}

/// Send `m` on `ep` from the progress thread, without waiting.
fn send(hub: &Hub, ep: usize, m: &Message) {
    match hub
        .engine
        .send(ep as ucp_ep_h, AM_ID, m.encode(), None, false)
    {
        Ok(c) => hub.unwaited(c),
        Err(e) => log::warn!("hal-ucx: could not send to a remote subscriber: {e}"),
    }
}

impl Offers {
    /// The offers of the node `owner`, made and installed the first time.
    pub(crate) fn of(owner: &Arc<Owner>) -> Arc<Offers> {
        let mut slot = lock(&owner.hub.channels);
        if let Some((_, any)) = slot.as_ref() {
            if let Ok(o) = Arc::clone(any).downcast::<Offers>() {
                return o;
            }
        }
        let offers = Arc::new(Offers::default());
        let link: Arc<dyn Link> = offers.clone();
        *slot = Some((link, offers.clone()));
        offers
    }

    /// Refuse a connection in its handshake: say why, forget it, close it.
    fn refuse(&self, hub: &Hub, ep: usize, why: Refusal) {
        if let Some(Conn::Proxy(p)) = lock(&self.conns).remove(&ep) {
            p.closed.store(true, Ordering::Release);
        }
        send(hub, ep, &Message::Denied(why));
        lock(&hub.links).remove(&ep);
        hub.unwaited(hub.engine.close(ep as ucp_ep_h, false));
    }

    /// Refuse the handshakes that took longer than their offer's timeout.
    fn expire(&self, hub: &Hub) {
        let late: Vec<usize> = lock(&self.conns)
            .iter()
            .filter(|(_, c)| match c {
                Conn::Hello(since, _) => since.elapsed() >= hub.timeout,
                Conn::Proof { offer, since, .. } => since.elapsed() >= offer.timeout,
                Conn::Proxy(_) => false,
            })
            .map(|(ep, _)| *ep)
            .collect();
        for ep in late {
            log::warn!("hal-ucx: a remote subscriber did not finish its handshake in time");
            self.refuse(hub, ep, Refusal::Protocol);
        }
    }

    fn handshake(&self, hub: &Hub, ep: usize, m: Message) {
        let stage = lock(&self.conns).remove(&ep);
        match (stage, m) {
            (
                Some(Conn::Hello(since, peer)),
                Message::Hello {
                    offer,
                    slots,
                    nonce,
                },
            ) => {
                let found = lock(&self.offers).get(&offer).cloned();
                let Some(found) = found.filter(|o| !o.withdrawn.load(Ordering::Acquire)) else {
                    return self.refuse(hub, ep, Refusal::Gone);
                };
                let mine = random_id();
                let proof =
                    auth::prove(&found.secret, Role::ChannelPublisher, offer, &nonce, &mine);
                lock(&self.conns).insert(
                    ep,
                    Conn::Proof {
                        offer: found,
                        id: offer,
                        slots,
                        theirs: nonce,
                        mine,
                        since,
                        peer,
                    },
                );
                send(hub, ep, &Message::Challenge { nonce: mine, proof });
            }
            (
                Some(Conn::Proof {
                    offer,
                    id,
                    slots,
                    theirs,
                    mine,
                    peer,
                    ..
                }),
                Message::Proof { proof },
            ) => {
                if !auth::verify(
                    &offer.secret,
                    Role::ChannelSubscriber,
                    id,
                    &mine,
                    &theirs,
                    &proof,
                ) {
                    log::warn!(
                        "hal-ucx: a remote subscriber of channel {:?} did not prove the offer's \
                         secret; refused",
                        offer.name
                    );
                    return self.refuse(hub, ep, Refusal::Secret);
                }
                if offer.withdrawn.load(Ordering::Acquire) {
                    return self.refuse(hub, ep, Refusal::Gone);
                }
                let proxy = Arc::new(Proxy {
                    ep,
                    peer,
                    closed: Arc::new(AtomicBool::new(false)),
                    state: Mutex::new(ProxyState::default()),
                    cv: Condvar::new(),
                    subscriber: OnceLock::new(),
                    offer: Arc::downgrade(&offer),
                    route: OnceLock::new(),
                    stepping: Mutex::new(()),
                    sends: Mutex::new(Vec::new()),
                    ended: AtomicBool::new(false),
                });
                lock(&self.conns).insert(ep, Conn::Proxy(Arc::clone(&proxy)));
                let runner = Arc::clone(&offer);
                let started = std::thread::Builder::new()
                    .name("hal-ucx-channel".into())
                    .spawn(move || run(&runner, &proxy, slots));
                match started {
                    Ok(t) => {
                        let mut proxies = lock(&offer.proxies);
                        proxies.retain(|p| !p.is_finished());
                        proxies.push(t);
                    }
                    Err(e) => {
                        log::warn!("hal-ucx: could not start a channel's proxy: {e}");
                        self.refuse(hub, ep, Refusal::Busy);
                    }
                }
            }
            (Some(Conn::Proxy(p)), m) => {
                lock(&self.conns).insert(ep, Conn::Proxy(Arc::clone(&p)));
                match m {
                    Message::Ready => {
                        lock(&p.state).ready = true;
                        p.cv.notify_all();
                    }
                    Message::Release { slot } if p.release(slot) => {}
                    other => p.gone(format!("the remote subscriber sent {other:?} out of order")),
                }
            }
            (_, m) => {
                log::warn!("hal-ucx: a remote subscriber sent {m:?} out of order; refused");
                self.refuse(hub, ep, Refusal::Protocol);
            }
        }
    }
}

impl Link for Offers {
    /// Every pass expires late handshakes; a pass of a caller that drives
    /// the worker also forwards what the proxies' channels hold (host samples only: a stream-ordered one
    /// may have to wait for its device, which a pass must not), so that
    /// no proxy thread has to be woken for it ([`Hub::stay_back`]).
    fn poll(&self, hub: &Hub) -> bool {
        // A handshake left half-done ends at its timeout even when no
        // other message comes (the progress thread passes at least once
        // a second).
        self.expire(hub);
        // Without a spin no caller drives the worker: the proxies' threads
        // forward, as they always have.
        if hub.spin.is_zero() {
            return false;
        }
        let proxies: Vec<Arc<Proxy>> = lock(&self.conns)
            .values()
            .filter_map(|c| match c {
                Conn::Proxy(p) => Some(Arc::clone(p)),
                _ => None,
            })
            .collect();
        let mut moved = false;
        for p in proxies {
            let (Some(route), Some(offer)) = (p.route.get(), p.offer.upgrade()) else {
                continue;
            };
            if route.sub.stream_ordered() || p.ended.load(Ordering::Acquire) {
                continue;
            }
            let Ok(_stepping) = p.stepping.try_lock() else {
                continue;
            };
            for _ in 0..route.sub.slots() {
                match step(&offer, &p, route, None) {
                    Step::Moved => moved = true,
                    Step::Idle => break,
                    Step::Ended => {
                        p.ended.store(true, Ordering::Release);
                        p.cv.notify_all();
                        break;
                    }
                }
            }
        }
        moved
    }

    fn handed(&self, ep: usize, peer: Option<SocketAddr>) {
        if let Some(peer) = peer {
            lock(&self.peers).insert(ep, peer);
        }
    }

    fn message(&self, hub: &Hub, ep: usize, head: &[u8], payload: Payload) {
        // Nothing a subscriber sends carries data.
        let data = payload.len();
        payload.release(&hub.engine);
        self.expire(hub);
        // Handed over just before its first message: taken here at once.
        let peer = lock(&self.peers).remove(&ep);
        if !lock(&hub.links).contains_key(&ep) {
            return;
        }
        {
            let mut conns = lock(&self.conns);
            if !conns.contains_key(&ep) {
                let handshakes = conns
                    .values()
                    .filter(|c| !matches!(c, Conn::Proxy(_)))
                    .count();
                if handshakes >= MAX_HANDSHAKES {
                    drop(conns);
                    log::warn!(
                        "hal-ucx: {MAX_HANDSHAKES} remote subscribers are in their handshake \
                         already; one more is refused"
                    );
                    return self.refuse(hub, ep, Refusal::Busy);
                }
                conns.insert(ep, Conn::Hello(Instant::now(), peer));
            }
        }
        let m = match wire::decode(head) {
            Ok(m) if data == 0 => m,
            Ok(_) => {
                return self.misbehaved(hub, ep, "a message with data".into());
            }
            Err(why) => {
                return self.misbehaved(hub, ep, format!("a malformed message ({})", why.0));
            }
        };
        self.handshake(hub, ep, m);
    }

    fn failed(&self, hub: &Hub, ep: usize, status: ucs_status_t) {
        lock(&hub.links).remove(&ep);
        let conn = lock(&self.conns).remove(&ep);
        if let Some(Conn::Proxy(p)) = &conn {
            p.closed.store(true, Ordering::Release);
        }
        hub.unwaited(hub.engine.close(ep as ucp_ep_h, true));
        if let Some(Conn::Proxy(p)) = conn {
            p.gone(format!(
                "its connection failed ({})",
                crate::ffi::status::name(status)
            ));
        }
    }
}

impl Offers {
    fn misbehaved(&self, hub: &Hub, ep: usize, what: String) {
        let conn = lock(&self.conns).remove(&ep);
        match conn {
            Some(Conn::Proxy(p)) => {
                log::warn!("hal-ucx: a remote subscriber sent {what}; it is dropped");
                p.gone(format!("it sent {what}"));
                p.closed.store(true, Ordering::Release);
                lock(&hub.links).remove(&ep);
                hub.unwaited(hub.engine.close(ep as ucp_ep_h, true));
            }
            _ => {
                log::warn!("hal-ucx: a remote subscriber sent {what}; refused");
                self.refuse(hub, ep, Refusal::Protocol);
            }
        }
    }
}

/// Where the proxy's subscriber's slots are, for UCX: address and memory
/// type; `None` for memory UCX cannot send from here.
fn source(hub: &Hub, sub: &Subscriber) -> Option<(u64, ucs_memory_type_t)> {
    let m = sub.memory();
    match (m.host_ptr(), m.location()) {
        (Some(p), _) => Some((p as u64, UCS_MEMORY_TYPE_HOST)),
        (None, Location::Device(_)) if hub.engine.supports(RemoteMemoryType::Cuda) => {
            Some((m.addr(), UCS_MEMORY_TYPE_CUDA))
        }
        _ => None,
    }
}

/// On the progress thread: an error once the proxy's endpoint is closed.
fn live(closed: &AtomicBool) -> Result<()> {
    if closed.load(Ordering::Acquire) {
        return Err(Error::Closed {
            what: "the remote subscriber's connection is closed".into(),
        });
    }
    Ok(())
}

/// Call `f` on the progress thread of `owner`'s node.
fn on_thread<R: Send + 'static>(
    owner: &Owner,
    f: impl FnOnce(&Hub) -> R + Send + 'static,
) -> Result<R> {
    owner.hub.on_thread(f)
}

/// A proxy's life: subscribe here, welcome the remote, forward every
/// sample into its slots until the channel ends, the remote goes, or the
/// offer is dropped; then close the connection, and unsubscribe once UCX
/// no longer reads the slots.
fn run(offer: &Offered, proxy: &Proxy, asked: u32) {
    let ep = proxy.ep;
    let owner = &offer.owner;
    let sends = forward(offer, proxy, asked);
    let gone = lock(&proxy.state).gone.is_some();
    if !gone {
        // What was sent arrives before the connection closes.
        let until = Instant::now() + offer.timeout;
        for c in &sends {
            c.wait_until(Some(until));
        }
    }
    // Closed at once where it failed: the sends still on it end.
    let closed = Arc::clone(&proxy.closed);
    let closing = on_thread(owner, move |h| {
        if closed.swap(true, Ordering::AcqRel) {
            return None;
        }
        lock(&h.links).remove(&ep);
        let offers = lock(&h.channels).as_ref().map(|(_, any)| Arc::clone(any));
        if let Some(Ok(offers)) = offers.map(|a| a.downcast::<Offers>()) {
            lock(&offers.conns).remove(&ep);
        }
        Some(h.engine.close(ep as ucp_ep_h, gone))
    });
    let until = Instant::now() + Duration::from_secs(2);
    if let Ok(Some(c)) = closing {
        c.wait_until(Some(until));
        owner.hub.unwaited(c);
    }
    let unfinished = sends.iter().any(|c| {
        c.wait_until(Some(until.max(Instant::now() + POLL)))
            .is_none()
    });
    if unfinished {
        // UCX may still read the slots: the subscriber (and its mapping)
        // stays, and with it its samples.
        log::warn!(
            "hal-ucx: channel {:?}: sends to a remote subscriber did not end; its proxy's \
             samples stay held",
            offer.name
        );
        if let Some(sub) = proxy.subscriber.get() {
            std::mem::forget(Arc::clone(sub));
        }
    }
}

/// Subscribe, welcome the remote, and forward samples; the sends issued.
fn forward(offer: &Offered, proxy: &Proxy, asked: u32) -> Vec<Arc<Completion>> {
    let owner = &offer.owner;
    let say = |m: Message| say(owner, proxy, m);
    let mut sends = Vec::new();
    let options = SubscribeOptions::default().timeout(Some(offer.timeout));
    let sub = match Subscriber::open(&*offer.device, &offer.name, &options) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            log::warn!(
                "hal-ucx: a remote subscriber of channel {:?} refused: {e}",
                offer.name
            );
            let why = match e {
                Error::NotFound { .. } | Error::Closed { .. } => Refusal::Closed,
                _ => Refusal::Busy,
            };
            say(Message::Denied(why));
            return sends;
        }
    };
    let Some((base, mem)) = source(&owner.hub, &sub) else {
        log::warn!(
            "hal-ucx: channel {:?}'s slots are in memory {} cannot send from",
            offer.name,
            owner.hub.engine.describe()
        );
        say(Message::Denied(Refusal::Busy));
        return sends;
    };
    let slots = match asked {
        0 => sub.slots(),
        n => (n as usize).min(sub.slots()),
    };
    {
        let mut s = lock(&proxy.state);
        s.free = (0..slots as u32).rev().collect();
        s.held = (0..slots).map(|_| None).collect();
    }
    let _ = proxy.subscriber.set(Arc::clone(&sub));
    // For `halctl channel ls`: this subscriber is the remote's, at `peer`;
    // the note is cleared when the forwarding ends.
    let _note = proxy.peer.and_then(|peer| {
        RemoteNote::record(&sub, &peer.to_string())
            .map_err(|e| {
                log::warn!(
                    "hal-ucx: channel {:?}: could not record the remote subscriber at {peer}: {e}",
                    offer.name
                )
            })
            .ok()
    });
    say(Message::Welcome {
        slots: slots as u32,
        slot_size: sub.slot_size(),
        mode: sub.mode(),
    });
    // The remote allocates its slots.
    let deadline = Instant::now() + offer.timeout;
    {
        let mut s = lock(&proxy.state);
        while !s.ready && s.gone.is_none() && !offer.withdrawn.load(Ordering::Acquire) {
            let now = Instant::now();
            if now >= deadline {
                s.gone = Some("it did not allocate its slots in time".into());
                break;
            }
            s = proxy
                .cv
                .wait_timeout(s, (deadline - now).min(POLL))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
    if !lock(&proxy.state).ready {
        // Withdrawn, or gone, before its slots were there.
        say(Message::End(End::Withdrawn));
        return sends;
    }
    let route = proxy.route.get_or_init(|| Route { sub, base, mem });
    let hub = &owner.hub;
    loop {
        // While callers drive the worker, their passes forward
        // ([`Offers::poll`]): this thread is not woken for each sample.
        if !route.sub.stream_ordered() {
            if let Some(back) = hub.stay_back() {
                if proxy.ended.load(Ordering::Acquire) {
                    break;
                }
                std::thread::sleep(back);
                continue;
            }
        }
        let _stepping = lock(&proxy.stepping);
        if proxy.ended.load(Ordering::Acquire) {
            break;
        }
        if step(offer, proxy, route, Some(POLL)) == Step::Ended {
            proxy.ended.store(true, Ordering::Release);
            break;
        }
    }
    sends.append(&mut lock(&proxy.sends));
    sends
}

/// Send `m` to the proxy's remote, not waiting for it.
fn say(owner: &Owner, proxy: &Proxy, m: Message) {
    let (ep, head) = (proxy.ep, m.encode());
    let closed = Arc::clone(&proxy.closed);
    let sent = on_thread(owner, move |h| {
        live(&closed)?;
        h.engine
            .send(ep as ucp_ep_h, AM_ID, head, None, false)
            .map(|c| h.unwaited(c))
    });
    if let Ok(Err(e)) | Err(e) = sent.map(|r| r.map(|_| ())) {
        log::warn!("hal-ucx: could not send to a remote subscriber: {e}");
    }
}

/// Forward the next sample into a free slot of the remote's, if there are
/// both: waiting up to `wait` for either (the proxy's thread), or not at
/// all (a caller's pass). The caller holds `proxy.stepping`.
fn step(offer: &Offered, proxy: &Proxy, route: &Route, wait: Option<Duration>) -> Step {
    let owner = &offer.owner;
    let (ep, sub) = (proxy.ep, &route.sub);
    if lock(&proxy.state).gone.is_some() {
        return Step::Ended;
    }
    // Withdrawn: what the channel holds for this subscriber now is
    // still forwarded (as far as its free slots take it), then the end.
    let withdrawn = offer.withdrawn.load(Ordering::Acquire);
    // A free slot of the remote's first: a sample is claimed only
    // for a slot to put it in (a queue's share stays with the others).
    let slot = {
        let mut s = lock(&proxy.state);
        match s.free.pop() {
            Some(slot) => slot,
            None if withdrawn => {
                drop(s);
                say(owner, proxy, Message::End(End::Withdrawn));
                return Step::Ended;
            }
            None => {
                if let Some(w) = wait {
                    drop(
                        proxy
                            .cv
                            .wait_timeout(s, w)
                            .unwrap_or_else(|p| p.into_inner()),
                    );
                }
                return Step::Idle;
            }
        }
    };
    let received = match (withdrawn, wait) {
        (false, Some(w)) => sub.receive_timeout(Some(w)).map(Some),
        _ => sub.try_receive(),
    };
    let received = match received {
        Ok(Some(sample)) => Ok(sample),
        Ok(None) if withdrawn => Err(Error::Timeout {
            after: Duration::ZERO,
            what: "nothing more to forward".into(),
        }),
        Ok(None) => {
            lock(&proxy.state).free.push(slot);
            return Step::Idle;
        }
        Err(e) => Err(e),
    };
    let ticket = match received {
        // A stream-ordered sample's bytes are there once its event
        // passed; one that never comes ends the forwarding.
        Ok(sample) => match sample.wait() {
            Ok(()) => sample.detach(),
            Err(e) => {
                log::warn!(
                    "hal-ucx: channel {:?}: sample {} was never written ({e}); its remote \
                     subscriber is dropped",
                    offer.name,
                    sample.sequence()
                );
                proxy.gone(format!("sample {} was never written", sample.sequence()));
                return Step::Ended;
            }
        },
        Err(e) => {
            lock(&proxy.state).free.push(slot);
            match e {
                Error::Timeout { .. } if withdrawn => {
                    say(owner, proxy, Message::End(End::Withdrawn));
                }
                Error::Timeout { .. } => return Step::Idle,
                Error::Closed { what } => {
                    // hal-core's words: "… its publisher (pid N) died"
                    // or "… its publisher closed it".
                    let how = if what.ends_with("died") {
                        End::Died
                    } else {
                        End::Closed
                    };
                    say(owner, proxy, Message::End(how));
                }
                other => {
                    log::warn!("hal-ucx: channel {:?}'s proxy stops: {other}", offer.name);
                    say(owner, proxy, Message::End(End::Died));
                }
            }
            return Step::Ended;
        }
    };
    let head = Message::Sample {
        seq: ticket.sequence(),
        slot,
        len: ticket.len(),
    }
    .encode();
    let (at, len, mem) = (
        route.base + ticket.offset(),
        ticket.len() as usize,
        route.mem,
    );
    lock(&proxy.state).held[slot as usize] = Some(ticket);
    let closed = Arc::clone(&proxy.closed);
    let sent = on_thread(owner, move |h| {
        live(&closed)?;
        let data = (len > 0).then_some((at as *const std::ffi::c_void, len, mem));
        // Host bytes up to EAGER go as UCX picks (eagerly, copied into
        // the slot on arrival); more, or device bytes, by rendezvous,
        // straight into it.
        let rndv = len > EAGER || mem != UCS_MEMORY_TYPE_HOST;
        h.engine.send(ep as ucp_ep_h, AM_ID, head, data, rndv)
    });
    match sent {
        Ok(Ok(c)) => {
            let mut sends = lock(&proxy.sends);
            sends.retain(|c: &Arc<Completion>| c.status().is_none());
            sends.push(c);
            Step::Moved
        }
        Ok(Err(e)) | Err(e) => {
            proxy.gone(format!("a send failed: {e}"));
            Step::Ended
        }
    }
}

/// A channel offered to subscribers on other hosts
/// ([`Node::offer_channel`](crate::Node::offer_channel)); dropping it
/// withdraws the offer: its remote subscribers receive what the channel
/// held for them (as far as their free slots take it), then
/// [`Error::Closed`]; the drop returns once their proxies ended.
#[must_use = "dropping a ChannelOffer withdraws it"]
pub struct ChannelOffer {
    offers: Arc<Offers>,
    offer: Arc<Offered>,
    id: u64,
    text: String,
}

impl std::fmt::Debug for ChannelOffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelOffer")
            .field("channel", &self.offer.name)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl ChannelOffer {
    /// Offer the channel `name` of this host on `owner`'s node.
    pub(crate) fn new(
        owner: &Arc<Owner>,
        address: std::net::SocketAddr,
        device: Arc<dyn DynDevice>,
        name: &str,
        options: &RemoteChannelOptions,
    ) -> Result<ChannelOffer> {
        if name.is_empty() {
            return Err(Error::InvalidArgument {
                what: "a channel's name is not empty".into(),
            });
        }
        let offers = Offers::of(owner);
        let secret = options.secret.unwrap_or_else(random_id);
        let id = offers.next.fetch_add(1, Ordering::Relaxed) + 1;
        let offer = Arc::new(Offered {
            name: name.to_string(),
            secret,
            device,
            owner: Arc::clone(owner),
            timeout: options.timeout,
            withdrawn: AtomicBool::new(false),
            proxies: Mutex::new(Vec::new()),
        });
        lock(&offers.offers).insert(id, Arc::clone(&offer));
        let text = RemoteHandle {
            kind: RemoteKind::Channel,
            listener: address,
            export_id: id,
            base: 0,
            size: 0,
            read_only: false,
            memory_type: RemoteMemoryType::Host,
            secret,
        }
        .to_text();
        Ok(ChannelOffer {
            offers,
            offer,
            id,
            text,
        })
    }

    /// The handle text (`hal1r.…`) a remote subscriber passes to
    /// [`RemoteSubscriber::connect`](crate::RemoteSubscriber::connect).
    /// It holds the offer's secret: give it only to the subscribers meant.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The channel's name.
    pub fn name(&self) -> &str {
        &self.offer.name
    }

    /// How many remote subscribers are connected now.
    pub fn subscribers(&self) -> usize {
        lock(&self.offers.conns)
            .values()
            .filter(|c| matches!(c, Conn::Proxy(p) if lock(&p.state).gone.is_none()))
            .count()
    }
}

impl Drop for ChannelOffer {
    fn drop(&mut self) {
        self.offer.withdrawn.store(true, Ordering::Release);
        lock(&self.offers.offers).remove(&self.id);
        // Handshakes with this offer end here (they hold the node).
        let (offers, offer) = (Arc::clone(&self.offers), Arc::clone(&self.offer));
        let _ = self.offer.owner.hub.on_thread(move |h| {
            let eps: Vec<usize> = lock(&offers.conns)
                .iter()
                .filter(
                    |(_, c)| matches!(c, Conn::Proof { offer: o, .. } if Arc::ptr_eq(o, &offer)),
                )
                .map(|(ep, _)| *ep)
                .collect();
            for ep in eps {
                offers.refuse(h, ep, Refusal::Gone);
            }
        });
        let proxies = std::mem::take(&mut *lock(&self.offer.proxies));
        for p in proxies {
            let _ = p.join();
        }
    }
}
