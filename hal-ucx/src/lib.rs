//! hal across machines, on UCX: memory and notifies of any backend read,
//! written and signalled from other hosts, with the model hal has on one
//! machine (an export, a handle text, an import, a count of importers, a
//! notify).
//!
//! UCX's `libucp.so.0` is loaded at run time ([`ffi::loader`]): a program
//! built with hal-ucx starts on machines without UCX, and [`Node::bind`]
//! says why UCX is unavailable ([`hal_core::Error::Unavailable`], naming
//! every path tried).
//!
//! - A [`Node`] is this process on the network: one UCX context and
//!   worker, a listener on a TCP address, a progress thread.
//! - [`Node::export`] registers memory with UCX and gives a
//!   [`RemoteExported`], whose text (`hal1r.…`,
//!   [`hal_core::handle::remote`]) another host passes to
//!   [`Node::connect`] for a [`RemoteMemory`]: `read`, `write`,
//!   `read_into`/`write_from` local hal memory, batches, `flush`, async
//!   forms.
//! - [`RemoteGroup::join_at`] gathers N processes on M hosts at one
//!   address ([`group`]): ranks, `all_gather`, `broadcast`, `barrier`,
//!   with a shared secret, timeouts, and dead members named.
//! - [`Node::offer_channel`] offers a channel of this host
//!   (`hal_core::channel`) to [`RemoteSubscriber`]s on other hosts
//!   ([`channel`]): samples move once, into the subscriber's own slots,
//!   with the channel's back-pressure.
//! - [`Node::export_notify`] and [`Node::connect_notify`] carry a notify;
//!   [`RemoteMemory::write_signal`] writes and then signals, in order.
//!
//! # What is checked, and what is not
//!
//! An importer proves it holds the handle's 128-bit secret before the
//! exporter grants it the export (a challenge with fresh nonces on both
//! sides, HMAC-SHA-256; the secret never travels), and the exporter proves
//! it too. Every read and write is then a message the exporter serves
//! itself, checked against the export it granted on that connection: its
//! range, and whether it is read-only. The UCX context has no RMA feature,
//! so UCX serves no one-sided access of its own: UCX 1.13's software RMA
//! over TCP answers any connected peer at any address it names, and aborts
//! the process that answers a read whose peer failed meanwhile
//! (`ucp_get_req_handler`: "Fatal: unexpected error"), both of which rule
//! it out here. The data itself moves zero-copy: small reads and writes
//! eagerly in one message, large ones by UCX's rendezvous, straight from
//! and into the registered memory on both ends.
//!
//! It is not network security: UCX's connections are neither encrypted
//! nor authenticated, so a host on the path can read what travels,
//! secret proofs aside. A node must listen only on a network whose hosts
//! are trusted (a cluster's fabric), as UCX, MPI and NCCL require.

#![deny(missing_docs)]
// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]

mod auth;
mod baton;
pub mod channel;
mod client;
#[allow(unsafe_code)]
mod completion;
#[allow(unsafe_code)]
mod dial;
mod drive;
#[allow(unsafe_code)]
mod engine;
mod export;
pub mod ffi;
pub mod group;
#[allow(unsafe_code)]
mod hub;
#[allow(unsafe_code)]
mod memory;
mod node;
mod notify;
mod owner;
#[allow(unsafe_code)]
mod payload;
#[allow(unsafe_code)]
mod progress;
mod protocol;
#[allow(unsafe_code)]
mod serve;
mod served;

pub use channel::{
    ChannelOffer, RemoteChannelOptions, RemoteSample, RemoteSampleTicket, RemoteSubscribeOptions,
    RemoteSubscriber,
};
pub use export::RemoteExported;
pub use group::{RemoteGroup, RemoteGroupOptions, RemoteMember};
pub use hal_core::handle::remote::{RemoteHandle, RemoteKind, RemoteMemoryType};
pub use memory::{Op, RemoteMemory};
pub use node::{Node, NodeOptions, RemoteOptions};
pub use notify::RemoteNotify;

/// The fuzzing entry points: the decoders of bytes from other hosts, for
/// the fuzz targets (fuzz/), only with the `fuzzing` feature.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing {
    /// Decode a message as a node does (total: never panics); one that
    /// decodes must re-encode to `bytes`, or this panics.
    pub fn check_message(bytes: &[u8]) {
        if let Ok(m) = crate::protocol::decode(bytes) {
            assert_eq!(m.encode(), bytes, "{m:?} re-encodes otherwise");
        }
    }

    /// Decode a channel's message as either side does (total: never
    /// panics); one that decodes must re-encode to `bytes`, or this panics.
    pub fn check_channel_message(bytes: &[u8]) {
        if let Ok(m) = crate::channel::wire::decode(bytes) {
            assert_eq!(m.encode(), bytes, "{m:?} re-encodes otherwise");
        }
    }

    /// Decode a group's message as a member does (total: never panics):
    /// the first byte says how many of the rest are the head, the others
    /// are the body. One that decodes must re-encode to them, or this
    /// panics.
    pub fn check_group_message(bytes: &[u8]) {
        let Some((n, rest)) = bytes.split_first() else {
            return;
        };
        let (head, body) = rest.split_at((*n as usize).min(rest.len()));
        if let Ok(m) = crate::group::wire::decode(head, body) {
            let (h, b) = m.encode();
            assert_eq!((&h[..], &b[..]), (head, body), "{m:?} re-encodes otherwise");
        }
    }
}
