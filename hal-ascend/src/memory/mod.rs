//! Device memory: allocations ([`alloc`]), their host copies ([`copy`]),
//! memory keys and the bookkeeping of this process's exports ([`ipc`]),
//! imports ([`mapping`]) and the raw keys other libraries exchange
//! ([`raw`]).

pub(crate) mod alloc;
pub(crate) mod copy;
pub(crate) mod ipc;
pub(crate) mod mapping;
pub(crate) mod raw;
