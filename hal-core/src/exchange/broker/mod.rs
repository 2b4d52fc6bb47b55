//! The descriptor broker: one per process, serving the descriptors of this
//! process's exports to importers that present only the handle text.
//!
//! The protocol is described in the [module documentation](super) of
//! `exchange`: the server ([`server`]: the socket and its registrations;
//! [`serve`]: the workers; [`decide`]: the answers) and the client
//! ([`client`], over the connections kept in [`pool`]).

mod batch;
mod client;
mod decide;
mod policy;
mod pool;
mod protocol;
mod registry;
mod serve;
mod server;

pub(crate) use batch::fetch_batch;
pub(crate) use client::{fetch, lease, release};
pub(crate) use policy::Policy;
pub(crate) use pool::{close_all, kept};
pub(crate) use registry::Registration;
pub(crate) use server::{register, registered_here};
