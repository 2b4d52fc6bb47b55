//! A zero-copy channel between processes: a [`Publisher`] loans a slot of
//! a pool in memory of any backend, fills it and publishes it; each
//! [`Subscriber`] receives it, reads it in place, and releases it by
//! dropping the [`Sample`].
//!
//! - **Modes** ([`Mode`]): broadcast (every subscriber receives every
//!   sample published while it is subscribed) or queue (each sample goes to
//!   one subscriber; samples wait for one).
//! - **Back-pressure**: a slot is loaned again only once every subscriber
//!   that was to receive its sample released it. [`Publisher::loan`] waits
//!   for one (at most [`ChannelOptions::timeout`]), [`Publisher::try_loan`]
//!   answers [`Error::Busy`](crate::Error::Busy) at once.
//! - **Memory of any backend**: the slots are one allocation on the
//!   publisher's device ([`ChannelOptions::location`]), exported, and
//!   imported by each subscriber (any device, as a
//!   [`DynDevice`](crate::dynamic::DynDevice): a backend's own device type
//!   is one); [`Loan::memory`] and [`Sample::memory`]
//!   with their offsets are what device work (copies, kernels) uses.
//! - **Stream order** ([`ChannelOptions::stream_ordered`]): each slot has
//!   an interprocess event; [`Loan::publish_on`] records it on the
//!   publisher's stream after the work that fills the slot and publishes
//!   the sample at once, [`Sample::wait_on`] makes a subscriber's stream
//!   wait for it (host reads wait for it too), and [`Sample::release_on`]
//!   gives the slot back once the subscriber's stream ran past its work on
//!   it. Device work in one process feeds device work in another with no
//!   host round trip between them.
//! - **Crashes**: a dead subscriber's slots return to the pool (the
//!   publisher reaps it while it waits for a slot); a dead publisher is
//!   reported to its subscribers ([`Error::Closed`](crate::Error::Closed)) once they received
//!   what it published, and the samples they hold stay readable.
//! - **Private to its user**: the control region is a memfd of the
//!   publisher's, sealed against shrinking and growing (no process can
//!   truncate it under the members' mappings); its name,
//!   `/dev/shm/.hal-UID/channel.NAME`, mode 0600, holds where it is, and
//!   subscribers open it through `/proc/PID/fd/N` (allowed to this user's
//!   processes while the publisher is dumpable) and check its identity and
//!   seals first. The slots' memory is exported to this user's processes
//!   where the backend's broker checks importers' users (cpu-shm, cuda-uvm),
//!   to anyone who has the handle (which only the control region holds)
//!   elsewhere. The publisher removes the name when it closes; whoever
//!   finds the name of a publisher that is gone removes it, and a new
//!   publisher of the name replaces it; [`collect_garbage`] (`halctl shm
//!   gc`) removes the names of publishers that are gone.
//! - **Bindings** that cannot hold a borrow between calls (the C library,
//!   Python) keep a loan or a received sample as plain data:
//!   [`Loan::detach`] gives a [`LoanTicket`] that
//!   [`Publisher::publish_ticket`] publishes (once; a ticket taken before
//!   another was published is refused), [`Sample::detach`] a
//!   [`SampleTicket`] that [`Subscriber::release_ticket`] releases. A
//!   [`Subscriber`] is `Sync`: threads that receive at once each get their
//!   own samples.
//! - **Hostile writers** of the control region can make the members'
//!   calls fail or time out, never read out of bounds or hang past a
//!   timeout: every slot index, length and handle length read from it is
//!   checked, and a slot word that claims a sample newer than the published
//!   count is an error; a name that leads elsewhere than a sealed memfd of
//!   the channel's identity is refused (a real attacker process tries each
//!   in hal's `tests/tests/channel_attacks.rs`).
//!
//! ```no_run
//! use hal_core::channel::{ChannelOptions, Publisher, SubscribeOptions, Subscriber};
//! # fn demo(device: &dyn hal_core::dynamic::DynDevice) -> hal_core::Result<()> {
//! // The publisher's process:
//! let mut publisher = Publisher::create(device, "frames", &ChannelOptions::default())?;
//! let loan = publisher.loan()?;
//! loan.write(0, b"frame 0")?;
//! loan.publish(7)?;
//!
//! // A subscriber's process:
//! let subscriber = Subscriber::open(device, "frames", &SubscribeOptions::default())?;
//! let sample = subscriber.receive()?;
//! let bytes = sample.to_vec()?;
//! drop(sample); // releases the slot
//! # let _ = bytes;
//! # Ok(())
//! # }
//! ```

mod file;
mod gc;
pub(crate) mod layout;
mod list;
mod members;
mod options;
mod park;
mod publisher;
pub(crate) mod record;
mod remote_note;
mod subscriber;
mod ticket;

pub use gc::{collect_garbage, collect_garbage_prefix, DeadChannel};
pub use layout::{Mode, MAX_ORDERED_SLOTS, MAX_SLOTS, MAX_SUBSCRIBERS};
pub use list::{list, ChannelInfo, RemoteSubscriberInfo};
pub use options::{ChannelOptions, SubscribeOptions};
pub use publisher::{Loan, Publisher};
pub use remote_note::RemoteNote;
pub use subscriber::{Sample, Subscriber};
pub use ticket::{LoanTicket, SampleTicket};
