//! The side of the member that serves a group's address (rank 0): it
//! takes the joiners' connections from its node's listener, checks that
//! each proves the group's secret, gives ranks in join order, announces
//! the members once all joined, and runs every round: it collects each
//! member's post and sends every member the round's bytes. A member whose
//! connection fails is named to the others at once, and the group is
//! broken. Its handlers run on the progress thread; its own member waits
//! on [`Server::wait`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hal_core::kit::os::random_id;
use hal_core::{Error, Result};

use super::wire::{self, Entry, Message, Refusal};
use crate::auth::{self, Role};
use crate::completion::Completion;
use crate::ffi::bindings::*;
use crate::hub::{lock, Hub, Link};
use crate::payload::Payload;
use crate::protocol::AM_ID;

/// Most connections in their handshake at once: a joiner past them is
/// refused (the group's members come well within it).
fn max_handshakes(size: usize) -> usize {
    2 * size + 64
}

/// Where a connection to the server stands.
#[derive(Debug, Clone, Copy)]
enum Stage {
    /// Waiting for the hello.
    Hello,
    /// Challenged: waiting for the proof.
    Proof { joiner: [u8; 16], server: [u8; 16] },
    /// A member of this rank.
    Member(usize),
}

/// A member, as the server keeps it.
#[derive(Debug, Clone, Copy)]
struct Slot {
    pid: u32,
    address: SocketAddr,
    host: [u8; 16],
    /// Its endpoint (0: the server's own member, or one whose connection
    /// failed and is closed).
    ep: usize,
}

/// What the server's handlers and its member share.
struct State {
    conns: HashMap<usize, Stage>,
    /// When each connection still in its handshake sent its first message.
    opened: HashMap<usize, Instant>,
    /// The members, by rank; rank 0 is the server's.
    slots: Vec<Option<Slot>>,
    formed: bool,
    /// The round being collected, and the posts of it so far.
    collecting: u32,
    posts: Vec<Option<Vec<u8>>>,
    /// The last round every member posted, and its bytes by rank.
    completed: u32,
    result: Vec<Vec<u8>>,
    /// Why the group cannot go on.
    broken: Option<String>,
    /// The server's member left: connections are refused.
    closed: bool,
}

/// A group served on this node's address.
pub(crate) struct Server {
    name: String,
    size: usize,
    max_payload: usize,
    secret: [u8; 16],
    /// How long a joiner's handshake may take.
    timeout: Duration,
    state: Mutex<State>,
    cv: Condvar,
}

impl Server {
    /// A server of group `name`, whose own member (rank 0) is process
    /// `pid` with its node at `address`.
    pub(crate) fn new(
        name: &str,
        size: usize,
        max_payload: usize,
        secret: [u8; 16],
        timeout: Duration,
        pid: u32,
        address: SocketAddr,
    ) -> Server {
        let mut slots = vec![None; size];
        slots[0] = Some(Slot {
            pid,
            address,
            host: super::HostId::here().0,
            ep: 0,
        });
        Server {
            name: name.to_string(),
            size,
            max_payload,
            secret,
            timeout,
            state: Mutex::new(State {
                conns: HashMap::new(),
                opened: HashMap::new(),
                slots,
                formed: size == 1,
                collecting: 1,
                posts: vec![None; size],
                completed: 0,
                result: Vec::new(),
                broken: None,
                closed: false,
            }),
            cv: Condvar::new(),
        }
    }

    /// Wait until the group formed, or `deadline`: every member then.
    pub(crate) fn wait_formed(&self, deadline: Instant, at: SocketAddr) -> Result<Vec<Entry>> {
        let what = format!("group {:?} at {at} to form", self.name);
        let s = self.wait(
            deadline,
            &what,
            |s| s.formed,
            |s| missing(&s.slots, "joined"),
        )?;
        Ok(s.slots
            .iter()
            .flatten()
            .map(|m| Entry {
                pid: m.pid,
                address: m.address,
                host: m.host,
            })
            .collect())
    }

    /// Post the server's member's bytes of `round` (on the progress
    /// thread), then wait until every member posted it, or `deadline`:
    /// every member's bytes of it, by rank.
    pub(crate) fn round(
        self: &Arc<Self>,
        hub: &Hub,
        round: u32,
        data: Vec<u8>,
        deadline: Instant,
        what: &str,
    ) -> Result<Vec<Vec<u8>>> {
        let me = Arc::clone(self);
        hub.on_thread(move |h| me.post(h, 0, round, data))?;
        let s = self.wait(
            deadline,
            what,
            |s| s.completed >= round,
            |s| {
                let pending: Vec<Option<()>> =
                    s.posts.iter().map(|p| p.as_ref().map(|_| ())).collect();
                missing(&pending, "posted")
            },
        )?;
        Ok(s.result.clone())
    }

    /// Wait until `done` holds, the group breaks, or `deadline`.
    fn wait(
        &self,
        deadline: Instant,
        what: &str,
        done: impl Fn(&State) -> bool,
        late: impl Fn(&State) -> String,
    ) -> Result<std::sync::MutexGuard<'_, State>> {
        let start = Instant::now();
        let mut s = lock(&self.state);
        loop {
            if done(&s) {
                return Ok(s);
            }
            if let Some(why) = &s.broken {
                return Err(Error::Closed {
                    what: format!("{what}: {why}"),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    after: deadline.saturating_duration_since(start),
                    what: format!("{what}: {}", late(&s)),
                });
            }
            s = self
                .cv
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Member `rank`'s post of `round` (on the progress thread).
    fn post(&self, hub: &Hub, rank: usize, round: u32, data: Vec<u8>) {
        let mut s = lock(&self.state);
        if s.broken.is_some() {
            return;
        }
        if round != s.collecting || s.posts[rank].is_some() || data.len() > self.max_payload {
            let why = format!(
                "member {rank} posted {} bytes for round {round} while round {} was collected \
                 (at most {} bytes, once): it does not follow the group's protocol",
                data.len(),
                s.collecting,
                self.max_payload
            );
            drop(s);
            return self.misbehaved(hub, rank, why);
        }
        s.posts[rank] = Some(data);
        if !s.formed || s.posts.iter().any(Option::is_none) {
            return;
        }
        let result: Vec<Vec<u8>> = s
            .posts
            .iter_mut()
            .map(|p| p.take().unwrap_or_default())
            .collect();
        let round = s.collecting;
        s.completed = round;
        s.collecting = round.saturating_add(1);
        let eps: Vec<usize> = s
            .slots
            .iter()
            .flatten()
            .map(|m| m.ep)
            .filter(|e| *e != 0)
            .collect();
        let (head, body) = Message::Round {
            round,
            data: result.clone(),
        }
        .encode();
        s.result = result;
        drop(s);
        self.cv.notify_all();
        for ep in eps {
            send_parts(hub, ep, head.clone(), &body);
        }
    }

    /// Member `rank` broke the protocol: said, and the group is broken.
    fn misbehaved(&self, hub: &Hub, rank: usize, why: String) {
        log::warn!("hal-ucx: group {:?}: {why}", self.name);
        self.break_group(hub, rank, why);
    }

    /// The group is broken because of member `rank`: every other member is
    /// told, and the server's member's waits end.
    fn break_group(&self, hub: &Hub, rank: usize, why: String) {
        let (eps, address) = {
            let mut s = lock(&self.state);
            if s.broken.is_some() {
                return;
            }
            // A member that leaves at the group's end fails its connection
            // as one that dies does: no warning of its own.
            log::debug!("hal-ucx: group {:?}: {why}", self.name);
            s.broken = Some(why);
            let address = s.slots[rank].map(|m| m.address);
            let eps: Vec<usize> = s
                .slots
                .iter()
                .flatten()
                .map(|m| m.ep)
                .filter(|e| *e != 0)
                .collect();
            (eps, address)
        };
        self.cv.notify_all();
        let gone = Message::Gone {
            rank: rank as u32,
            address: address.unwrap_or_else(|| ([0, 0, 0, 0], 0).into()),
        };
        for ep in eps {
            send(hub, ep, &gone);
        }
    }

    /// Refuse a joiner: say why, forget it, close its connection.
    fn refuse(&self, hub: &Hub, ep: usize, why: Refusal) {
        let joined = {
            let mut s = lock(&self.state);
            s.conns.remove(&ep);
            s.opened.remove(&ep);
            s.slots.iter().flatten().count() as u32
        };
        send(
            hub,
            ep,
            &Message::Denied {
                why,
                joined,
                served: self.name.clone(),
            },
        );
        lock(&hub.links).remove(&ep);
        hub.unwaited(hub.engine.close(ep as ucp_ep_h, false));
    }

    /// A message of a joiner's handshake.
    fn handshake(&self, hub: &Hub, ep: usize, stage: Stage, m: Message) {
        match (stage, m) {
            (
                Stage::Hello,
                Message::Hello {
                    size,
                    max_payload,
                    nonce,
                    name,
                },
            ) => {
                if name != self.name {
                    return self.refuse(hub, ep, Refusal::OtherGroup);
                }
                if size as usize != self.size || max_payload as usize != self.max_payload {
                    return self.refuse(hub, ep, Refusal::Shape);
                }
                let full = {
                    let s = lock(&self.state);
                    s.formed || s.closed || s.broken.is_some()
                };
                if full {
                    return self.refuse(hub, ep, Refusal::Full);
                }
                let mine = random_id();
                let proof = auth::prove(&self.secret, Role::GroupServer, 0, &nonce, &mine);
                if let Some(c) = lock(&self.state).conns.get_mut(&ep) {
                    *c = Stage::Proof {
                        joiner: nonce,
                        server: mine,
                    };
                }
                send(hub, ep, &Message::Challenge { nonce: mine, proof });
            }
            (
                Stage::Proof { joiner, server },
                Message::Proof {
                    proof,
                    pid,
                    address,
                    host,
                },
            ) => {
                if !auth::verify(&self.secret, Role::GroupMember, 0, &server, &joiner, &proof) {
                    log::warn!(
                        "hal-ucx: a joiner of group {:?} did not prove the group's secret; \
                         refused",
                        self.name
                    );
                    return self.refuse(hub, ep, Refusal::Secret);
                }
                let mut s = lock(&self.state);
                let Some(rank) = s.slots.iter().position(Option::is_none) else {
                    drop(s);
                    return self.refuse(hub, ep, Refusal::Full);
                };
                if s.formed || s.broken.is_some() {
                    drop(s);
                    return self.refuse(hub, ep, Refusal::Full);
                }
                s.slots[rank] = Some(Slot {
                    pid,
                    address,
                    host,
                    ep,
                });
                s.opened.remove(&ep);
                if let Some(c) = s.conns.get_mut(&ep) {
                    *c = Stage::Member(rank);
                }
                send(hub, ep, &Message::Welcome { rank: rank as u32 });
                if s.slots.iter().all(Option::is_some) {
                    s.formed = true;
                    let members: Vec<Entry> = s
                        .slots
                        .iter()
                        .flatten()
                        .map(|m| Entry {
                            pid: m.pid,
                            address: m.address,
                            host: m.host,
                        })
                        .collect();
                    let eps: Vec<usize> = s
                        .slots
                        .iter()
                        .flatten()
                        .map(|m| m.ep)
                        .filter(|e| *e != 0)
                        .collect();
                    drop(s);
                    self.cv.notify_all();
                    let formed = Message::Formed { members };
                    for ep in eps {
                        send(hub, ep, &formed);
                    }
                }
            }
            (Stage::Member(rank), m) => self.misbehaved(
                hub,
                rank,
                format!("member {rank} sent {} out of order", kind(&m)),
            ),
            (_, m) => {
                log::warn!(
                    "hal-ucx: a joiner of group {:?} sent {} out of order; refused",
                    self.name,
                    kind(&m)
                );
                self.refuse(hub, ep, Refusal::Protocol)
            }
        }
    }

    /// Refuse the connections whose handshake took longer than the
    /// group's timeout (looked at whenever a message comes: their count is
    /// bounded meanwhile).
    fn expire(&self, hub: &Hub) {
        let late: Vec<usize> = {
            let s = lock(&self.state);
            s.opened
                .iter()
                .filter(|(_, t)| t.elapsed() >= self.timeout)
                .map(|(ep, _)| *ep)
                .collect()
        };
        for ep in late {
            log::warn!(
                "hal-ucx: a joiner of group {:?} did not finish its handshake in time; refused",
                self.name
            );
            self.refuse(hub, ep, Refusal::Protocol);
        }
    }

    /// The server's member leaves: every connection is closed (flushed:
    /// what was sent arrives first). The closes to wait for.
    pub(crate) fn close(&self, hub: &Hub) -> Vec<Arc<Completion>> {
        let eps: Vec<usize> = {
            let mut s = lock(&self.state);
            s.closed = true;
            s.opened.clear();
            s.conns.drain().map(|(ep, _)| ep).collect()
        };
        let mut links = lock(&hub.links);
        for ep in &eps {
            links.remove(ep);
        }
        drop(links);
        eps.into_iter()
            .map(|ep| hub.engine.close(ep as ucp_ep_h, false))
            .collect()
    }
}

/// The ranks in `slots` that are not there yet, for a timeout's message.
fn missing<T>(slots: &[Option<T>], did: &str) -> String {
    let late: Vec<String> = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_none())
        .map(|(i, _)| i.to_string())
        .collect();
    format!(
        "{} of {} members {did}; rank(s) {} did not (a member that never started, stopped, \
         or cannot reach this address)",
        slots.len() - late.len(),
        slots.len(),
        late.join(", ")
    )
}

/// A message's name, for logs and errors.
fn kind(m: &Message) -> &'static str {
    match m {
        Message::Hello { .. } => "a hello",
        Message::Challenge { .. } => "a challenge",
        Message::Proof { .. } => "a proof",
        Message::Welcome { .. } => "a welcome",
        Message::Denied { .. } => "a refusal",
        Message::Formed { .. } => "a member list",
        Message::Post { .. } => "a post",
        Message::Round { .. } => "a round",
        Message::Gone { .. } => "a departure",
    }
}

/// Send `m` on `ep` without waiting (the progress thread never waits).
pub(crate) fn send(hub: &Hub, ep: usize, m: &Message) {
    let (head, body) = m.encode();
    send_parts(hub, ep, head, &body);
}

fn send_parts(hub: &Hub, ep: usize, head: Vec<u8>, body: &[u8]) {
    match hub.engine.send_eager(ep as ucp_ep_h, AM_ID, head, body) {
        Ok(c) => hub.unwaited(c),
        Err(e) => log::warn!("hal-ucx: could not send to a group's member: {e}"),
    }
}

/// The bytes of a message's data, copied, and the data released; `None`
/// for data left with UCX (a rendezvous, which no member sends).
pub(crate) fn body(hub: &Hub, payload: Payload) -> Option<Vec<u8>> {
    let bytes = payload.bytes().map(<[u8]>::to_vec);
    payload.release(&hub.engine);
    bytes
}

impl Link for Server {
    fn message(&self, hub: &Hub, ep: usize, head: &[u8], payload: Payload) {
        self.expire(hub);
        if !lock(&hub.links).contains_key(&ep) {
            // This very connection was refused (closed) just now.
            return payload.release(&hub.engine);
        }
        let stage = {
            let mut s = lock(&self.state);
            if s.closed {
                None
            } else {
                match s.conns.get(&ep) {
                    Some(stage) => Some(*stage),
                    None if s.opened.len() >= max_handshakes(self.size) => None,
                    None => {
                        s.opened.insert(ep, Instant::now());
                        s.conns.insert(ep, Stage::Hello);
                        Some(Stage::Hello)
                    }
                }
            }
        };
        let body = body(hub, payload);
        let Some(stage) = stage else {
            return self.refuse(hub, ep, Refusal::Full);
        };
        let decoded = match body {
            Some(b) => wire::decode(head, &b).map_err(|m| m.0),
            None => Err("its data came by rendezvous".to_string()),
        };
        let m = match decoded {
            Ok(m) => m,
            Err(why) => {
                return match stage {
                    Stage::Member(rank) => self.misbehaved(
                        hub,
                        rank,
                        format!("member {rank} sent a malformed message ({why})"),
                    ),
                    _ => {
                        log::warn!("hal-ucx: a joiner sent a malformed message ({why}); refused");
                        self.refuse(hub, ep, Refusal::Protocol)
                    }
                };
            }
        };
        match (stage, m) {
            (Stage::Member(rank), Message::Post { round, data }) => {
                self.post(hub, rank, round, data)
            }
            (stage, m) => self.handshake(hub, ep, stage, m),
        }
    }

    fn failed(&self, hub: &Hub, ep: usize, status: ucs_status_t) {
        lock(&hub.links).remove(&ep);
        let stage = {
            let mut s = lock(&self.state);
            s.opened.remove(&ep);
            s.conns.remove(&ep)
        };
        hub.unwaited(hub.engine.close(ep as ucp_ep_h, true));
        if let Some(Stage::Member(rank)) = stage {
            let (pid, address) = {
                let mut s = lock(&self.state);
                // Nothing is sent on the closed endpoint again.
                if let Some(m) = s.slots[rank].as_mut() {
                    m.ep = 0;
                }
                s.slots[rank]
                    .map(|m| (m.pid, m.address))
                    .unwrap_or((0, ([0, 0, 0, 0], 0).into()))
            };
            self.break_group(
                hub,
                rank,
                format!(
                    "member {rank} (pid {pid} at {address}) is gone: it died or left ({})",
                    crate::ffi::status::name(status)
                ),
            );
        }
    }
}
