//! Device memory: allocations ([`alloc`]), their host copies ([`copy`]),
//! memory keys ([`ipc`]) and the keys this process's exports took
//! ([`keys`]),
//! imports ([`mapping`]) and the raw keys other libraries exchange
//! ([`raw`]).

pub(crate) mod alloc;
pub(crate) mod copy;
pub(crate) mod ipc;
pub(crate) mod keys;
pub(crate) mod mapping;
pub(crate) mod raw;
