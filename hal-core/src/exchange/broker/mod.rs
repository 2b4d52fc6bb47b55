//! The descriptor broker: one per process, serving the descriptors of this
//! process's exports to importers that present only the handle text.
//!
//! The protocol is described in the [module documentation](super) of
//! `exchange`; this file holds the server (a thread accepting on an abstract
//! `SOCK_SEQPACKET` socket) and the client ([`fetch`]).

mod client;
mod policy;
mod protocol;
mod registry;
mod server;

pub(crate) use client::{fetch, lease, release};
pub(crate) use policy::Policy;
pub(crate) use registry::Registration;
pub(crate) use server::{register, registered_here};
