//! A group across hosts: N processes on M hosts join a group by name at
//! one TCP address, learn their ranks, and exchange small payloads (remote
//! handles, most often) with [`RemoteGroup::all_gather`] and
//! [`RemoteGroup::broadcast`], or wait for each other with
//! [`RemoteGroup::barrier`] — the same calls, with the same meaning and
//! errors, as the group on one host (`hal_core::group::Group`).
//!
//! - **Who serves**: the member that binds the group's address first
//!   serves the rendezvous there and is rank 0 (start it first, or let the
//!   members of its host race for the address: the others connect). The
//!   others are ranks 1, 2, ... in the order they joined; a join returns
//!   once all `size` members joined.
//! - **On UCX**: every member has a [`Node`] of its own
//!   ([`RemoteGroup::node`]); the rendezvous travels as UCX active
//!   messages between each member's node and the server's, which listens
//!   on the group's address. [`RemoteGroup::members`] gives each member's
//!   node address, and the handles of what a member exports from its node
//!   name it: a job swaps its remote handles in one `all_gather`.
//! - **A shared secret**: every connection proves the 128-bit secret of
//!   the group ([`RemoteGroupOptions::secret`], or [`SECRET_ENV`]) in both
//!   directions before anything else is exchanged (HMAC-SHA-256 over fresh
//!   nonces; the secret never travels). A member whose secret differs is
//!   refused with [`Error::PermissionDenied`]. No secret at all is an
//!   [`Error::InvalidArgument`] that says how to set one.
//! - **Every wait has a timeout** ([`RemoteGroupOptions::timeout`], 60 s
//!   unless set): a join that finds no server, or not all members, fails
//!   with [`Error::Timeout`] naming what it waited for. A member that dies
//!   or leaves is named (its rank and its node's address) to the others
//!   as soon as its connection to the server fails — at once when its
//!   process dies, as its host closes its connections — with
//!   [`Error::Closed`]; after such a failure the group is broken, and its
//!   members drop their [`RemoteGroup`] and join again.
//! - **One group per address at a time**: while a group is served at an
//!   address, a joiner of another name there is refused with
//!   [`Error::Busy`] naming the group served, and so is a joiner past the
//!   group's size. The address is free again once its server's member
//!   drops its group (and its node).
//!
//! - **Fork**: a [`RemoteGroup`] belongs to the process that joined; in a
//!   forked child its rounds answer [`Error::Forked`], and its drop sends
//!   nothing and closes nothing of its parent's (the child joins a group
//!   of its own if it needs one).
//!
//! As with everything of hal-ucx, the network must be trusted: UCX's
//! connections are not encrypted; the secret keeps processes that do not
//! hold it out of the group, not eavesdroppers.
//!
//! Members on one host still talk through the server's node in this
//! group's rounds; for what is local, each member knows which others share
//! its host ([`RemoteGroup::local_members`], by [`HostId`]) and can form a
//! group on the host with them ([`RemoteGroup::local_group`]), whose rounds
//! go through shared memory, and share memory and notifies with them by
//! their local handles.

mod host;
mod joiner;
mod options;
mod secret;
mod server;
#[cfg(test)]
mod tests;
pub(crate) mod wire;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hal_core::kit::os::Origin;
use hal_core::{Error, Result};

use crate::ffi::bindings::{UCS_ERR_BUSY, UCS_ERR_IO_ERROR};
use crate::hub::{lock, Link};
use crate::node::{Node, NodeOptions};
use joiner::{Ask, Joined};
use server::Server;
use wire::Entry;

pub use host::HostId;
pub use options::{RemoteGroupOptions, RemoteMember};
pub use secret::{parse_secret, SECRET_ENV};
pub use wire::{MAX_MEMBERS, MAX_NAME, MAX_PAYLOAD};

/// How many times a member of the address's host tries to bind it when
/// its listen fails (another member bound it at the same moment).
const BIND_TRIES: u32 = 3;

/// This member's side of the rendezvous.
enum Side {
    /// It serves the group's address.
    Server(Arc<Server>),
    /// It joined through its connection to the server.
    Joiner(Joined),
    /// Nothing: the side was let go without a word (a forked child's copy
    /// of its parent's, at its drop).
    Forgotten,
}

/// This process's membership of a group across hosts; dropping it leaves
/// the group (and, for the member that serves it, ends it: the others'
/// calls then fail with [`Error::Closed`] naming rank 0).
///
/// ```no_run
/// use hal_ucx::{RemoteGroup, RemoteGroupOptions};
///
/// // In each of 8 processes, on any of the hosts (the secret is the same
/// // in all: here from HAL_GROUP_SECRET, 32 hex digits).
/// let at = "192.0.2.1:29500".parse().unwrap();
/// let mut group = RemoteGroup::join_at(at, "shards", 8, &RemoteGroupOptions::default())?;
/// // Each member exports its memory from the group's node, and all swap
/// // their handles in one round.
/// let mine = format!("the handle of rank {}", group.rank());
/// let handles = group.all_gather(mine.as_bytes())?;
/// assert_eq!(handles.len(), 8);
/// let plan = group.broadcast(0, b"layer 3 is ready")?;
/// group.barrier()?;
/// # let _ = plan;
/// # Ok::<(), hal_core::Error>(())
/// ```
#[must_use = "dropping a RemoteGroup leaves it at once"]
pub struct RemoteGroup {
    name: String,
    at: SocketAddr,
    rank: usize,
    members: Vec<RemoteMember>,
    /// Rounds this member completed.
    round: u32,
    timeout: Duration,
    max_payload: usize,
    side: Side,
    /// Why the group cannot go on, after a failed call.
    broken: Option<String>,
    /// The process that joined.
    origin: Origin,
    /// Last: the node goes after the side's connections are closed.
    node: Node,
}

impl std::fmt::Debug for RemoteGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteGroup")
            .field("name", &self.name)
            .field("at", &self.at)
            .field("rank", &self.rank)
            .field("size", &self.members.len())
            .finish()
    }
}

impl RemoteGroup {
    /// Join the group `name` of `size` members at `addr` (an address and
    /// port of one of the hosts, the same for every member), and wait
    /// until all joined. The process that binds `addr` serves the group
    /// and is rank 0; the others connect to it, trying again until it is
    /// there or the timeout passes.
    ///
    /// Errors: [`Error::InvalidArgument`] for a bad name, size, payload
    /// limit or address, no secret, or a group of that name with another
    /// size or payload limit; [`Error::PermissionDenied`] when the secrets
    /// differ; [`Error::Busy`] when `addr` serves another group, or all
    /// ranks are taken; [`Error::Closed`] when a member died before the
    /// group formed; [`Error::Timeout`] when no server answered or not all
    /// members came in time; [`Error::Unavailable`] without UCX.
    pub fn join_at(
        addr: SocketAddr,
        name: &str,
        size: usize,
        options: &RemoteGroupOptions,
    ) -> Result<RemoteGroup> {
        check(addr, name, size, options)?;
        let secret = secret::resolve(options.secret)?;
        let started = Instant::now();
        let deadline = started + options.timeout;
        let node_options = |listen| NodeOptions {
            timeout: options.timeout,
            ..NodeOptions::new(listen)
        };
        // Two processes of this host may race for the address: the one
        // that binds it second gets UCS_ERR_BUSY, or, where both bound it
        // before either listened, UCS_ERR_IO_ERROR from its listen; it tries
        // again, and then finds the address busy.
        let mut tries = if is_local(addr.ip()) && !is_served(addr) {
            BIND_TRIES
        } else {
            0
        };
        while tries > 0 {
            tries -= 1;
            let server = Arc::new(Server::new(
                name,
                size,
                options.max_payload,
                secret,
                options.timeout,
                std::process::id(),
                addr,
            ));
            let acceptor: Arc<dyn Link> = server.clone();
            match Node::make(node_options(addr), Some(acceptor)) {
                Ok(node) => {
                    let members = server.wait_formed(deadline, addr);
                    let mut group = RemoteGroup {
                        name: name.to_string(),
                        at: addr,
                        rank: 0,
                        members: Vec::new(),
                        round: 0,
                        timeout: options.timeout,
                        max_payload: options.max_payload,
                        side: Side::Server(server),
                        broken: None,
                        origin: Origin::here(),
                        node,
                    };
                    // On failure the group drops here, closing what joined.
                    group.members = ranked(members?);
                    return Ok(group);
                }
                Err(Error::Vendor(v)) if v.code == i64::from(UCS_ERR_BUSY) => break,
                Err(Error::Vendor(v)) if v.code == i64::from(UCS_ERR_IO_ERROR) && tries > 0 => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
        let ip = match options.listen {
            Some(ip) => ip,
            None => toward(addr)?,
        };
        let node = Node::with_options(node_options(SocketAddr::new(ip, 0)))?;
        let ask = Ask {
            name,
            size,
            max_payload: options.max_payload,
            secret,
            at: addr,
            deadline,
            started,
        };
        let (joined, rank, members) = Joined::join(node.owner(), node.address(), &ask)?;
        Ok(RemoteGroup {
            name: name.to_string(),
            at: addr,
            rank,
            members: ranked(members),
            round: 0,
            timeout: options.timeout,
            max_payload: options.max_payload,
            side: Side::Joiner(joined),
            broken: None,
            origin: Origin::here(),
            node,
        })
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The group's address.
    pub fn address(&self) -> SocketAddr {
        self.at
    }

    /// This member's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many members the group has.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Every member, by rank (this one included).
    pub fn members(&self) -> &[RemoteMember] {
        &self.members
    }

    /// The members that share this one's host ([`HostId`]: one kernel,
    /// one pid namespace, one `/dev/shm`, one user), by rank, this one
    /// included: with them, hal's local objects work without the network
    /// (a memory's local handle, a notify, [`RemoteGroup::local_group`]).
    pub fn local_members(&self) -> Vec<RemoteMember> {
        let here = self.members[self.rank].host;
        self.members
            .iter()
            .filter(|m| m.host == here)
            .copied()
            .collect()
    }

    /// The local fast path: a group on this host
    /// ([`hal_core::group::Group`], rounds through shared memory) of the
    /// members in [`RemoteGroup::local_members`]. Every one of them calls
    /// it; it returns once all joined (or fails as
    /// [`hal_core::group::Group::join`] does, within `options.timeout`).
    /// Its name is derived from this group's name, address and members, so
    /// it is the same for them and no other group's; its ranks are its own
    /// (the order of joining), and its [`members`] give each one's pid, the
    /// pid of [`RemoteMember::pid`].
    ///
    /// [`members`]: hal_core::group::Group::members
    pub fn local_group(
        &self,
        options: &hal_core::group::GroupOptions,
    ) -> Result<hal_core::group::Group> {
        self.origin.check(format_args!(
            "membership of group {:?} at {}",
            self.name, self.at
        ))?;
        let local = self.local_members();
        hal_core::group::Group::join(&self.local_name(), local.len(), options)
    }

    /// The name of [`RemoteGroup::local_group`]'s group on this host.
    fn local_name(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update(b"hal-ucx local group v1\0");
        h.update((self.name.len() as u64).to_le_bytes());
        h.update(self.name.as_bytes());
        h.update(self.at.to_string().as_bytes());
        h.update(b"\0");
        for m in &self.members {
            h.update(m.pid.to_le_bytes());
            h.update(m.address.to_string().as_bytes());
            h.update(b"\0");
            h.update(m.host.0);
        }
        let d = h.finalize();
        let hex: String = d[..12].iter().map(|b| format!("{b:02x}")).collect();
        format!("hal-rg-{hex}")
    }

    /// This member's node: what it exports from it, its handles name
    /// ([`RemoteMember::address`]); it connects to the others' exports.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// Post `data` and receive every member's, by rank (this one's
    /// included). Every member calls it; the payloads may differ in length,
    /// up to [`RemoteGroupOptions::max_payload`].
    pub fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut all = self.exchange(data)?;
        all[self.rank] = data.to_vec();
        Ok(all)
    }

    /// Receive what the member of rank `root` posts. Every member calls it;
    /// `data` is posted by `root` and ignored elsewhere (pass `&[]`).
    pub fn broadcast(&mut self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        if root >= self.size() {
            return Err(Error::InvalidArgument {
                what: format!("a broadcast from rank {root} in a group of {}", self.size()),
            });
        }
        let mine = if root == self.rank { data } else { &[] };
        let mut all = self.exchange(mine)?;
        if root == self.rank {
            return Ok(data.to_vec());
        }
        Ok(std::mem::take(&mut all[root]))
    }

    /// Wait until every member called `barrier`.
    pub fn barrier(&mut self) -> Result<()> {
        self.exchange(&[]).map(drop)
    }

    /// Post this member's next round and wait until every member posted
    /// it: every member's bytes of it, by rank.
    fn exchange(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.origin.check(format_args!(
            "membership of group {:?} at {}",
            self.name, self.at
        ))?;
        if let Some(why) = &self.broken {
            return Err(Error::Closed {
                what: format!(
                    "group {:?} at {} is broken ({why}): leave and join again",
                    self.name, self.at
                ),
            });
        }
        if data.len() > self.max_payload {
            return Err(Error::InvalidArgument {
                what: format!(
                    "a post of {} bytes to group {:?}, whose payload limit is {} \
                     (RemoteGroupOptions::max_payload)",
                    data.len(),
                    self.name,
                    self.max_payload
                ),
            });
        }
        let round = self
            .round
            .checked_add(1)
            .ok_or_else(|| Error::InvalidArgument {
                what: format!("group {:?} ran out of round numbers", self.name),
            })?;
        let what = format!("round {round} of group {:?} at {}", self.name, self.at);
        let deadline = Instant::now() + self.timeout;
        let got = match &self.side {
            Side::Server(s) => s.round(
                &self.node.owner().hub,
                round,
                data.to_vec(),
                deadline,
                &what,
            ),
            Side::Joiner(j) => j.round(round, data.to_vec(), self.size(), deadline, &what),
            Side::Forgotten => Err(Error::Closed {
                what: format!("{what}: this member let the group go"),
            }),
        };
        match got {
            Ok(all) => {
                self.round = round;
                Ok(all)
            }
            Err(e) => {
                self.broken = Some(e.to_string());
                Err(e)
            }
        }
    }
}

impl Drop for RemoteGroup {
    fn drop(&mut self) {
        if self.origin.forked() {
            // The parent's connections, listener and progress thread: a
            // forked child has no thread to run its node, and anything it
            // closed or sent would be on its parent's sockets. It lets go
            // of them without a word (the node's last holder stays).
            std::mem::forget(std::mem::replace(&mut self.side, Side::Forgotten));
            std::mem::forget(self.node.clone());
            return;
        }
        match &self.side {
            Side::Server(s) => {
                let hub = &self.node.owner().hub;
                *lock(&hub.acceptor) = None;
                let me = Arc::clone(s);
                if let Ok(closing) = hub.on_thread(move |h| me.close(h)) {
                    let until = Instant::now() + Duration::from_secs(2);
                    for c in closing {
                        c.wait_until(Some(until));
                        hub.unwaited(c);
                    }
                }
            }
            // Its drop closes its connection.
            Side::Joiner(_) | Side::Forgotten => {}
        }
    }
}

/// The members, by rank, as the server announced them.
fn ranked(entries: Vec<Entry>) -> Vec<RemoteMember> {
    entries
        .into_iter()
        .enumerate()
        .map(|(rank, e)| RemoteMember {
            rank,
            pid: e.pid,
            address: e.address,
            host: HostId(e.host),
        })
        .collect()
}

/// Refuse what no group can be.
fn check(addr: SocketAddr, name: &str, size: usize, options: &RemoteGroupOptions) -> Result<()> {
    let bad = |what: String| Err(Error::InvalidArgument { what });
    if name.is_empty() || name.len() > MAX_NAME {
        return bad(format!(
            "a group's name has 1 to {MAX_NAME} bytes; {name:?} has {}",
            name.len()
        ));
    }
    if size == 0 || size > MAX_MEMBERS {
        return bad(format!(
            "a group of {size} members: a group has 1 to {MAX_MEMBERS}"
        ));
    }
    if options.max_payload > MAX_PAYLOAD {
        return bad(format!(
            "a payload limit of {} bytes is over the most, {MAX_PAYLOAD}",
            options.max_payload
        ));
    }
    if addr.ip().is_unspecified() || addr.port() == 0 {
        return bad(format!(
            "group {name:?} at {addr}: a group's address names one address of one host and a \
             port, which every member passes"
        ));
    }
    Ok(())
}

/// True when `ip` is an address of this host (a socket can be bound to it).
fn is_local(ip: IpAddr) -> bool {
    UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// True when a listener of this host holds `addr` already: a bind of a
/// socket of the standard library's (which, as the group's server's, may
/// take an address that only ended connections hold) is refused as in
/// use. Nothing is sent; it spares a joiner UCX's error line about the
/// address in use.
fn is_served(addr: SocketAddr) -> bool {
    matches!(
        std::net::TcpListener::bind(addr),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse
    )
}

/// The address of this host that reaches `addr` (no packet is sent: the
/// kernel picks the route of an unconnected datagram socket).
fn toward(addr: SocketAddr) -> Result<IpAddr> {
    let any: IpAddr = match addr {
        SocketAddr::V4(_) => [0, 0, 0, 0].into(),
        SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    let found = UdpSocket::bind(SocketAddr::new(any, 0))
        .and_then(|s| s.connect(addr).and_then(|()| s.local_addr()));
    match found {
        Ok(a) => Ok(a.ip()),
        Err(e) => Err(Error::Io {
            context: format!(
                "finding the address of this host that reaches {addr} (set \
                 RemoteGroupOptions::listen to it)"
            ),
            source: e,
        }),
    }
}
