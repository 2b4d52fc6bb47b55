//! # hal-core: the contract
//!
//! `hal` shares memory, events and notifications between processes on one
//! machine, across CPU shared memory, CUDA device memory, CUDA managed memory
//! and Ascend NPUs. This crate is the contract every backend implements and
//! every program speaks:
//!
//! - [`Backend`] and [`Device`]: what a vendor runtime and its devices can do
//!   ([`DeviceInfo`], [`Capabilities`]), allocation, export and import of
//!   memory, streams, events, notifies and VMM;
//! - [`Error`]: one typed error for every backend;
//! - [`Handle`]: the versioned wire format of every exported resource (see
//!   [`handle::wire`] for the byte layout and the compatibility promise);
//! - [`exchange`]: how handles and their file descriptors travel between
//!   processes (a file, a string, a Unix socket with `SCM_RIGHTS`, the
//!   exporter's descriptor broker);
//! - [`export`]: the export layer of memfd-backed backends (a handle from
//!   the export options, sealed memfds, [`Exported`], checked imports), and
//!   [`syncpage`], the shared page under their events and notifies;
//! - [`lease`]: importers counted by the exporter, dead processes excluded;
//! - [`dlpack`]: host-visible memory as a DLPack 1.x tensor;
//! - [`channel`]: a zero-copy channel of samples between processes, in
//!   memory of any backend;
//! - [`group`]: a rendezvous of N processes (ranks, all-gather, broadcast,
//!   barrier), for exchanging handles;
//! - [`dynamic`]: the object-safe mirror of the traits, for choosing a backend
//!   at run time;
//! - [`testing`]: what a test suite does when a test cannot run here
//!   (`HAL_TESTS_STRICT=1` makes it a failure);
//! - [`vendor`]: the vendors' error codes and entry-point names as plain data,
//!   shared by the real backends and the simulator.
//!
//! Backends live in their own crates (`hal-cpu-shm`, `hal-mock`, ...); the
//! `hal` facade crate gathers them behind Cargo features.
//!
//! A program needs the traits, [`Error`], [`Handle`], the plain data of
//! [`types`] and the modules [`channel`], [`dynamic`], [`exchange`], [`group`], [`growable`],
//! [`dlpack`], [`vmm`] and [`wait`]. The other modules are the backend
//! author's kit ([`export`], [`lease`], [`lock`], [`needs`],
//! [`os`], [`queued`], [`reaper`], [`runtime`], [`syncpage`], [`teardown`],
//! [`vendor`], [`vmm_pieces`]); the `hal` facade shows them apart, as
//! `hal::kit`.
#![deny(missing_docs)]
#![cfg(unix)]

mod bounds;
pub mod channel;
pub mod device;
pub mod dlpack;
pub mod dynamic;
pub mod error;
pub mod exchange;
pub mod export;
pub mod group;
pub mod growable;
pub mod handle;
mod import;
pub mod lease;
pub mod lock;
pub mod needs;
pub mod os;
pub mod queued;
pub mod reaper;
mod registered;
pub mod runtime;
pub mod syncpage;
pub mod teardown;
pub mod testing;
pub mod types;
pub mod vendor;
pub mod vmm;
pub mod vmm_pieces;
pub mod wait;

pub use device::{
    Allocation, Backend, Device, Event, FreeError, Mapping, MemRef, Memory, Notify, WaitFuture,
};
pub use error::{Error, HandleError, Result, VendorError};
pub use export::Exported;
pub use handle::{FdSource, Handle, HandleFlags, HandleKind, PidKind, SharedHandle};
pub use registered::RegisteredHost;
pub use types::*;
pub use vmm::{
    AccessGrant, AccessTarget, Physical, PhysicalDesc, PhysicalLocation, Reservation,
    ShareableHandle, Vmm, VmmExt,
};
