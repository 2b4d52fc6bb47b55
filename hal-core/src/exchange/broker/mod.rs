//! The descriptor broker: one per process, serving the descriptors of this
//! process's exports to importers that present only the handle text.
//!
//! The protocol is described in the [module documentation](super) of
//! `exchange`: the server ([`server`]: the socket and its registrations,
//! each an [`entry`]; [`serve`]: the workers; [`decide`]: the answers) and
//! the client ([`fetch`](mod@fetch): the way each import takes; [`client`], over the
//! connections kept in [`pool`], closed in a forked child by
//! [`inherited`]; [`locate`] and [`getfd`]: the optional `pidfd_getfd`
//! path, on the wire as [`located`]; [`direct`]: its imports that ask no
//! one, from the exporter's [`board`], kept as a [`view`]).

mod batch;
pub(crate) mod board;
#[allow(unsafe_code)]
mod client;
mod decide;
mod direct;
mod entry;
mod fetch;
mod getfd;
#[allow(unsafe_code)]
mod inherited;
#[allow(unsafe_code)]
mod locate;
pub(crate) mod located;
mod policy;
mod pool;
mod protocol;
mod registry;
#[allow(unsafe_code)]
mod serve;
#[allow(unsafe_code)]
mod server;
mod trust;
mod view;

pub(crate) use batch::fetch_batch;
#[cfg(feature = "testing")]
pub(crate) use board::name as board_name;
pub(crate) use client::{lease, release, Served};
pub(crate) use fetch::fetch;
pub use getfd::ENV as GETFD_ENV;
pub(crate) use getfd::{counts as getfd_counts, direct_count, set_enabled as set_getfd};
pub(crate) use policy::Policy;
pub(crate) use pool::{close_all, kept};
pub(crate) use registry::Registration;
pub(crate) use server::{register, registered_here};
pub use trust::{trust_exporter_uid, TRUST_ENV};
pub(crate) use view::BoardLease;
