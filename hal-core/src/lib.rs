//! # hal-core: the contract
//!
//! `hal` shares memory, events and notifications between processes on one
//! machine, across CPU shared memory, CUDA device memory, CUDA managed memory
//! and Ascend NPUs. This crate has three parts.
//!
//! **The contract** (the modules declared first below) is what every backend
//! implements and every program speaks, about 4,000 lines read in this order:
//!
//! - [`backend`] and [`device`]: [`Backend`] and [`Device`], what a vendor
//!   runtime and its devices do (allocation, export and import of memory, streams, events,
//!   notifies), with [`DeviceExt`]'s conveniences;
//! - [`vmm`]: [`Vmm`], virtual memory management (physical allocations,
//!   reservations, mappings), a separate trait of every device;
//! - [`types`]: the plain data of options, descriptions and capabilities;
//! - [`error`]: [`Error`], one typed error for every backend;
//! - [`handle`]: [`Handle`], the versioned wire format of every exported
//!   resource (see [`handle::wire`] for the byte layout and the
//!   compatibility promise);
//! - [`wait`]: waits with deadlines, blocking or async;
//! - [`dynamic`]: the object-safe mirror of the traits, for choosing a
//!   backend at run time.
//!
//! **The features** are built on the contract, for programs:
//! [`exchange`] (handles and their descriptors between processes), [`lease`]
//! (importers counted by the exporter), [`channel`] (a zero-copy channel of
//! samples), [`group`] (a rendezvous of N processes), [`growable`] (memory
//! that grows in place), [`dlpack`] (host-visible memory as a DLPack tensor)
//! and [`testing`] (what a suite does when a test cannot run here).
//!
//! **The kit** ([`kit`]) is for backend authors: the export layer, shared
//! sync pages, the vendors' codes, stream holders, teardown workers and the
//! vendor-neutral halves of VMM.
//!
//! Backends live in their own crates (`hal-cpu-shm`, `hal-mock`, ...); the
//! `hal` facade crate gathers them behind Cargo features.
#![deny(missing_docs)]
// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]
#![cfg(unix)]

// The contract.
pub mod backend;
#[allow(unsafe_code)]
pub mod device;
#[allow(unsafe_code)]
pub mod dynamic;
pub mod error;
pub mod handle;
pub mod types;
pub mod vmm;
pub mod wait;

pub use backend::Backend;
pub use device::{
    Allocation, Device, DeviceExt, Event, FreeError, Mapping, MemRef, Memory, Notify, WaitFuture,
};
pub use error::{Error, HandleError, Result, VendorError};
pub use handle::{FdSource, Handle, HandleFlags, HandleKind, PidKind, SharedHandle};
pub use kit::export::Exported;
pub use types::*;
pub use vmm::{
    AccessGrant, AccessTarget, Physical, PhysicalDesc, PhysicalLocation, Reservation,
    ShareableHandle, Vmm, VmmExt,
};

// The features.
pub mod channel;
pub mod dlpack;
pub mod exchange;
pub mod group;
pub mod growable;
pub mod lease;
pub mod testing;

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;

// The backend author's kit.
mod bounds;
pub mod kit;
