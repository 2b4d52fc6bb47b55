//! Channels with subscribers on other hosts: a channel of this host
//! (`hal_core::channel`, in memory of any backend) offered on a node
//! ([`Node::offer_channel`](crate::Node::offer_channel)) takes
//! [`RemoteSubscriber`]s on other hosts, with the same receive and release
//! as its local subscribers.
//!
//! - **A proxy per remote subscriber**: the offering process subscribes
//!   to the channel on the remote's behalf (a local subscriber on a thread
//!   of its own), so that broadcast and queue modes, back-pressure and the
//!   return of a gone subscriber's slots are the channel's own: a slot of
//!   the publisher is free again once every subscriber, local or remote,
//!   released its sample.
//! - **Samples move once**: the remote subscriber allocates slots of its
//!   own, and each sample travels by UCX's rendezvous from the publisher's
//!   slot straight into one of them (an active message whose data the
//!   remote receives in place); it is read there, in place
//!   ([`RemoteSample::memory`], [`RemoteSample::read`]). The proxy claims
//!   a sample only when the remote has a free slot for it, so a remote
//!   subscriber holds at most [`RemoteSubscribeOptions::slots`] samples,
//!   and a slow one holds the publisher back as a slow local one does.
//! - **Releases**: dropping a [`RemoteSample`] sends its release; the
//!   proxy then releases the channel's sample.
//! - **Crashes**: a remote subscriber that dies (or drops its
//!   subscription) closes its connection: its proxy unsubscribes, and the
//!   slots it held come back. A publisher that closes, or dies, is
//!   reported to the remote subscribers with `Error::Closed` once they
//!   received every sample forwarded to them; a publisher's process that
//!   dies with its node is reported the same way, once the samples that
//!   had reached the remote subscriber are received.
//! - **A secret**: the offer's text (`hal1r.`, a remote handle of kind
//!   channel) holds a 128-bit secret; a subscriber and the offering node
//!   prove it to each other (HMAC-SHA-256 over fresh nonces) before any
//!   sample moves. A subscriber whose text's secret differs is refused
//!   with `Error::PermissionDenied`.
//!
//! As with everything of hal-ucx, the network must be trusted: UCX's
//! connections are not encrypted.

mod offer;
mod options;
#[allow(unsafe_code)]
mod subscriber;
mod ticket;
pub(crate) mod wire;

pub use offer::ChannelOffer;
pub use options::{RemoteChannelOptions, RemoteSubscribeOptions};
pub use subscriber::{RemoteSample, RemoteSubscriber};
pub use ticket::RemoteSampleTicket;
