//! The side of a member that joins a group served elsewhere: it connects
//! to the group's address (again and again until the server is there, or
//! the join's deadline), checks that the server proves the group's
//! secret, proves it in turn, takes its rank and the member list, and then
//! posts each round and receives every member's bytes of it. The progress
//! thread delivers the server's messages into the connection's inbox; the
//! member's thread waits on it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hal_core::kit::os::random_id;
use hal_core::{Error, Result};

use super::wire::{self, Entry, Message, Refusal};
use crate::auth::{self, Role};
use crate::ffi::bindings::*;
use crate::ffi::status;
use crate::hub::{lock, Hub, Link};
use crate::owner::Owner;
use crate::payload::Payload;
use crate::protocol::AM_ID;

/// How long a joiner waits between two tries to reach a server that is
/// not there yet.
const RETRY: Duration = Duration::from_millis(100);

/// What reached a joiner's connection.
#[derive(Default)]
struct Inbox {
    messages: VecDeque<Message>,
    /// Why the connection is gone, once it is.
    gone: Option<String>,
    /// The peer answered something that is not a group's message: a node
    /// that serves exports only.
    foreign: bool,
}

/// A joiner's connection, as the progress thread fills it.
#[derive(Default)]
struct Mailbox {
    inbox: Mutex<Inbox>,
    cv: Condvar,
}

impl Link for Mailbox {
    fn message(&self, hub: &Hub, _ep: usize, head: &[u8], payload: Payload) {
        let body = super::server::body(hub, payload);
        let mut inbox = lock(&self.inbox);
        if !wire::is_group(head) {
            inbox.foreign = true;
            inbox.gone = Some("it answered with a message that is not a group's".into());
        } else {
            match body.map(|b| wire::decode(head, &b)) {
                Some(Ok(m)) => inbox.messages.push_back(m),
                Some(Err(why)) => {
                    inbox.gone = Some(format!("it sent a malformed message ({})", why.0))
                }
                None => inbox.gone = Some("it sent data by rendezvous".into()),
            }
        }
        drop(inbox);
        self.cv.notify_all();
    }

    fn failed(&self, _hub: &Hub, _ep: usize, st: ucs_status_t) {
        let mut inbox = lock(&self.inbox);
        if inbox.gone.is_none() {
            inbox.gone = Some(format!("the connection failed ({})", status::name(st)));
        }
        drop(inbox);
        self.cv.notify_all();
    }
}

/// A member's connection to its group's server.
pub(crate) struct Joined {
    owner: Arc<Owner>,
    ep: usize,
    mailbox: Arc<Mailbox>,
    /// The group's address.
    pub(crate) at: SocketAddr,
}

/// What a join asks for.
pub(crate) struct Ask<'a> {
    pub(crate) name: &'a str,
    pub(crate) size: usize,
    pub(crate) max_payload: usize,
    pub(crate) secret: [u8; 16],
    pub(crate) at: SocketAddr,
    pub(crate) deadline: Instant,
    pub(crate) started: Instant,
}

impl Joined {
    /// Join the group `ask` names from the node `owner`, whose address is
    /// `address`: this member's rank, and every member.
    pub(crate) fn join(
        owner: &Arc<Owner>,
        address: SocketAddr,
        ask: &Ask<'_>,
    ) -> Result<(Joined, usize, Vec<Entry>)> {
        let mine = random_id();
        let hello = Message::Hello {
            size: ask.size as u32,
            max_payload: ask.max_payload as u32,
            nonce: mine,
            name: ask.name.to_string(),
        };
        // Until the server is there: a connection that fails before its
        // first answer is tried again.
        let (joined, first) = loop {
            // Dropped on every way out but the break: its connection closes.
            let joined = Joined::connect(owner, ask.at)?;
            joined.send(&hello)?;
            match joined.receive(ask.deadline) {
                Ok(m) => break (joined, m),
                Err(Error::Closed { .. }) if !joined.foreign() => {
                    let why = joined.gone().unwrap_or_default();
                    drop(joined);
                    if Instant::now() + RETRY >= ask.deadline {
                        return Err(nobody(ask, &why));
                    }
                    std::thread::sleep(RETRY);
                }
                Err(Error::Closed { .. }) => {
                    return Err(Error::NotFound {
                        what: format!(
                            "group {:?} at {}: the node there serves exports, not a group (its \
                             address is not a group's)",
                            ask.name, ask.at
                        ),
                    });
                }
                Err(Error::Timeout { .. }) => return Err(nobody(ask, "no answer")),
                Err(e) => return Err(e),
            }
        };
        let (rank, members) = joined.handshake(ask, address, mine, first)?;
        Ok((joined, rank, members))
    }

    fn handshake(
        &self,
        ask: &Ask<'_>,
        address: SocketAddr,
        mine: [u8; 16],
        first: Message,
    ) -> Result<(usize, Vec<Entry>)> {
        let theirs = match first {
            Message::Challenge { nonce, proof } => {
                if !auth::verify(&ask.secret, Role::GroupServer, 0, &mine, &nonce, &proof) {
                    return Err(Error::PermissionDenied {
                        pid: None,
                        reason: format!(
                            "the server of group {:?} at {} could not prove it holds the \
                             group's secret: the members' secrets differ (HAL_GROUP_SECRET or \
                             RemoteGroupOptions::secret), or another program serves that address",
                            ask.name, ask.at
                        ),
                    });
                }
                nonce
            }
            other => return Err(self.refusal(ask, other)),
        };
        let proof = auth::prove(&ask.secret, Role::GroupMember, 0, &theirs, &mine);
        let host = super::HostId::here().0;
        self.send(&Message::Proof {
            proof,
            pid: std::process::id(),
            address,
            host,
        })?;
        let rank = match self.receive(ask.deadline)? {
            Message::Welcome { rank } if (rank as usize) < ask.size && rank != 0 => rank as usize,
            other => return Err(self.refusal(ask, other)),
        };
        let what = format!("group {:?} at {} to form", ask.name, ask.at);
        let members = match self.receive(ask.deadline).map_err(|e| {
            self.explain(
                e,
                &what,
                ask.deadline.saturating_duration_since(ask.started),
            )
        })? {
            Message::Formed { members }
                if members.len() == ask.size
                    && members[rank]
                        == (Entry {
                            pid: std::process::id(),
                            address,
                            host,
                        }) =>
            {
                members
            }
            Message::Gone { rank: r, address } => {
                return Err(Error::Closed {
                    what: format!("{what}: member {r} (at {address}) is gone: it died or left"),
                })
            }
            other => return Err(self.refusal(ask, other)),
        };
        Ok((rank, members))
    }

    /// Post this member's bytes of `round` and wait for every member's,
    /// until `deadline`.
    pub(crate) fn round(
        &self,
        round: u32,
        data: Vec<u8>,
        size: usize,
        deadline: Instant,
        what: &str,
    ) -> Result<Vec<Vec<u8>>> {
        let started = Instant::now();
        self.send(&Message::Post { round, data })?;
        let m = self
            .receive(deadline)
            .map_err(|e| self.explain(e, what, deadline.saturating_duration_since(started)))?;
        match m {
            Message::Round { round: r, data } if r == round && data.len() == size => Ok(data),
            Message::Gone { rank, address } => Err(Error::Closed {
                what: format!("{what}: member {rank} (at {address}) is gone: it died or left"),
            }),
            other => Err(Error::Closed {
                what: format!(
                    "{what}: the group's server at {} answered {other:?} out of order",
                    self.at
                ),
            }),
        }
    }

    /// The error of a wait on the server: a connection gone is its
    /// member's (rank 0) departure; a timeout says who is waited for.
    fn explain(&self, e: Error, what: &str, after: Duration) -> Error {
        match e {
            Error::Closed { .. } => Error::Closed {
                what: format!(
                    "{what}: member 0 (the group's server, at {}) is gone: it died or left ({})",
                    self.at,
                    self.gone().unwrap_or_default()
                ),
            },
            Error::Timeout { .. } => Error::Timeout {
                after,
                what: format!(
                    "{what}: the group's server (member 0, at {}) did not answer: a member has \
                     not called it yet, or stopped",
                    self.at
                ),
            },
            other => other,
        }
    }

    /// The error of a server's answer other than the one expected.
    fn refusal(&self, ask: &Ask<'_>, m: Message) -> Error {
        let (name, at) = (ask.name, ask.at);
        match m {
            Message::Denied {
                why: Refusal::Secret,
                ..
            } => Error::PermissionDenied {
                pid: None,
                reason: format!(
                    "the server of group {name:?} at {at} refused this member's proof: the \
                     members' secrets differ (HAL_GROUP_SECRET or RemoteGroupOptions::secret)"
                ),
            },
            Message::Denied {
                why: Refusal::OtherGroup,
                joined,
                served,
            } => Error::Busy {
                what: format!(
                    "group {served:?}, which {at} serves rather than {name:?} (one group per \
                     address at a time: join {name:?} once {served:?} ends, or serve it at \
                     another address)"
                ),
                holders: joined as usize,
            },
            Message::Denied {
                why: Refusal::Full,
                joined,
                ..
            } => Error::Busy {
                what: format!(
                    "group {name:?} at {at}, which has all its members (or has ended, or is \
                     broken: join once it ends)"
                ),
                holders: joined as usize,
            },
            Message::Denied {
                why: Refusal::Shape,
                ..
            } => Error::InvalidArgument {
                what: format!(
                    "group {name:?} at {at} has another size or payload limit than {} members \
                     of {} bytes: every member passes the same",
                    ask.size, ask.max_payload
                ),
            },
            other => Error::Closed {
                what: format!(
                    "joining group {name:?} at {at}: the server answered {other:?}, which \
                     does not follow the group's protocol"
                ),
            },
        }
    }

    /// A connection to `at`, its messages delivered to a mailbox.
    pub(super) fn connect(owner: &Arc<Owner>, at: SocketAddr) -> Result<Joined> {
        let mailbox = Arc::new(Mailbox::default());
        let link: Arc<dyn Link> = mailbox.clone();
        let ep = owner.hub.on_thread(move |h| {
            let ep = h.engine.endpoint(None, Some(at), &h.callbacks())? as usize;
            lock(&h.links).insert(ep, link);
            Ok::<_, Error>(ep)
        })??;
        Ok(Joined {
            owner: Arc::clone(owner),
            ep,
            mailbox,
            at,
        })
    }

    /// Send `m` (the send goes on by itself; its answer is waited for).
    pub(super) fn send(&self, m: &Message) -> Result<()> {
        let (head, body) = m.encode();
        let ep = self.ep;
        self.owner.hub.on_thread(move |h| {
            h.engine
                .send_eager(ep as ucp_ep_h, AM_ID, head, &body)
                .map(|c| h.unwaited(c))
        })?
    }

    /// The next message from the server, until `deadline`.
    pub(super) fn receive(&self, deadline: Instant) -> Result<Message> {
        let started = Instant::now();
        let mut inbox = lock(&self.mailbox.inbox);
        loop {
            if let Some(m) = inbox.messages.pop_front() {
                return Ok(m);
            }
            if let Some(why) = &inbox.gone {
                return Err(Error::Closed {
                    what: format!("the group's server at {}: {why}", self.at),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    after: now - started,
                    what: format!("the group's server at {} to answer", self.at),
                });
            }
            inbox = self
                .mailbox
                .cv
                .wait_timeout(inbox, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn gone(&self) -> Option<String> {
        lock(&self.mailbox.inbox).gone.clone()
    }

    fn foreign(&self) -> bool {
        lock(&self.mailbox.inbox).foreign
    }

    /// Forget and close the connection (flushed: what was sent arrives
    /// first; at once where it failed), waiting for the close a bounded time.
    fn close(&self) {
        let ep = self.ep;
        let force = self.gone().is_some();
        let closing = self.owner.hub.on_thread(move |h| {
            lock(&h.links).remove(&ep);
            h.engine.close(ep as ucp_ep_h, force)
        });
        if let Ok(c) = closing {
            c.wait_until(Some(Instant::now() + Duration::from_secs(2)));
            self.owner.hub.unwaited(c);
        }
    }
}

impl Drop for Joined {
    fn drop(&mut self) {
        self.close();
    }
}

/// The error of a join that found no server.
fn nobody(ask: &Ask<'_>, why: &str) -> Error {
    Error::Timeout {
        after: ask.deadline.saturating_duration_since(ask.started),
        what: format!(
            "a server of group {:?} at {} (last try: {why}): start the group's first member \
             there (the member that binds the address serves it), or check the address and \
             that this host reaches it",
            ask.name, ask.at
        ),
    }
}
