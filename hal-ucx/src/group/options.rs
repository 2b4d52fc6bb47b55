//! How a process joins a group across hosts, and what it learns of each
//! member.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// How a process joins a group across hosts
/// ([`RemoteGroup::join_at`](crate::RemoteGroup::join_at)).
#[derive(Clone)]
#[non_exhaustive]
pub struct RemoteGroupOptions {
    /// How long any call waits for the other members: the join, each
    /// round, each connection (60 s unless set).
    pub timeout: Duration,
    /// The most bytes a member may post in one round (4096 unless set, at
    /// most [`MAX_PAYLOAD`](crate::group::MAX_PAYLOAD)); every member
    /// passes the same value.
    pub max_payload: usize,
    /// The secret every member proves on every connection; `None` takes
    /// it from [`SECRET_ENV`](crate::group::SECRET_ENV).
    pub secret: Option<[u8; 16]>,
    /// The address of this host that this member's node listens on when
    /// it does not serve the group (port 0 takes a free one); `None`
    /// takes the address this host reaches the group's address from.
    pub listen: Option<IpAddr>,
}

impl std::fmt::Debug for RemoteGroupOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteGroupOptions")
            .field("timeout", &self.timeout)
            .field("max_payload", &self.max_payload)
            .field("secret", &self.secret.map(|_| "(set)"))
            .field("listen", &self.listen)
            .finish()
    }
}

impl Default for RemoteGroupOptions {
    fn default() -> Self {
        RemoteGroupOptions {
            timeout: Duration::from_secs(60),
            max_payload: 4096,
            secret: None,
            listen: None,
        }
    }
}

impl RemoteGroupOptions {
    /// Set [`RemoteGroupOptions::timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Set [`RemoteGroupOptions::max_payload`].
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// Set [`RemoteGroupOptions::secret`].
    pub fn secret(mut self, secret: [u8; 16]) -> Self {
        self.secret = Some(secret);
        self
    }

    /// Set [`RemoteGroupOptions::listen`].
    pub fn listen(mut self, ip: IpAddr) -> Self {
        self.listen = Some(ip);
        self
    }
}

/// A member of a group across hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteMember {
    /// Its rank: 0 for the member that serves the group, then the order
    /// in which the others joined.
    pub rank: usize,
    /// Its process id, on its host.
    pub pid: u32,
    /// Its node's address: where its exports' handles point.
    pub address: SocketAddr,
    /// Where it runs, as far as hal's local objects reach: members with
    /// this one's [`HostId`](super::HostId) can share memory, notifies and a local group
    /// without the network ([`crate::RemoteGroup::local_members`]).
    pub host: super::HostId,
}
