//! The identity of the process at the other end of a socket.

/// The credentials of the process at the other end of a socket, as the
/// kernel reports them (translated into this process's pid and user
/// namespaces; a process this namespace cannot see has pid 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerCred {
    /// Process id.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}
