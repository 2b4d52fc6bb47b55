//! # hal-core: the contract
//!
//! `hal` shares memory, events and notifications between processes on one
//! machine, across CPU shared memory, CUDA device memory, CUDA managed memory
//! and Ascend NPUs. This crate has three parts.
//!
//! **The contract** (the modules declared first below) is what every backend
//! implements and every program speaks, read in this order:
//!
//! - [`backend`] and [`device`]: [`Backend`] and [`Device`], what a vendor
//!   runtime and its devices do (allocation, export and import of memory, streams, events,
//!   notifies), with [`DeviceExt`]'s conveniences, and [`Exported`], what
//!   an export gives back;
//! - [`vmm`]: [`Vmm`], virtual memory management (physical allocations,
//!   reservations, mappings), a separate trait of every device;
//! - [`types`]: the plain data of options, descriptions and capabilities;
//! - [`error`]: [`Error`], one typed error for every backend;
//! - [`handle`]: [`Handle`], the versioned wire format of every exported
//!   resource (see [`handle::wire`] for the byte layout and the
//!   compatibility promise).
//!
//! The contract is a leaf: its files import only each other (and this
//! process's identity, which it needs of the OS), never the kit or the
//! features; `cargo xtask circles` checks it and prints the size of its
//! import closure, under 4,000 lines outside tests. Built on it for every
//! program and backend: [`wait`] (waits with deadlines, blocking or async)
//! and [`dynamic`] (the object-safe mirror of the traits, for choosing a
//! backend at run time).
//!
//! **The features** are built on the contract, for programs:
//! [`exchange`] (handles and their descriptors between processes), [`lease`]
//! (importers counted by the exporter), [`channel`] (a zero-copy channel of
//! samples), [`group`] (a rendezvous of N processes), [`growable`] (memory
//! that grows in place), [`dlpack`] (host-visible memory as a DLPack tensor),
//! [`naming`] (the names out-of-tree backends are registered under) and
//! [`testing`] (what a suite does when a test cannot run here).
//!
//! **The kit** ([`kit`]) is for backend authors: the export layer, shared
//! sync pages, the vendors' codes, stream holders, teardown workers and the
//! vendor-neutral halves of VMM. It sits on the contract and below the
//! features: it imports nothing from [`exchange`], [`lease`], [`channel`]
//! or [`group`].
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
mod exported;
pub mod handle;
pub mod types;
pub mod vmm;
pub mod wait;

pub use backend::Backend;
pub use device::{
    Allocation, Device, DeviceExt, Event, FreeError, Mapping, MemRef, Memory, Notify, WaitFuture,
};
pub use error::{Error, HandleError, Result, VendorError};
pub use exported::Exported;
pub use handle::{FdSource, Handle, HandleFlags, HandleKind, PidKind, SharedHandle};
pub use types::*;
pub use vmm::{
    AccessGrant, AccessTarget, Physical, PhysicalDesc, PhysicalLocation, Reservation,
    ShareableHandle, Vmm, VmmExt,
};

// The features.
pub mod channel;
pub mod dlpack;
pub mod exchange;
mod external_names;
pub mod group;
pub mod growable;
pub mod lease;
pub mod naming;
pub mod testing;

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;

// Who this process is, which the contract needs of the OS.
mod bounds;
#[allow(unsafe_code)]
mod process;

// The backend author's kit.
pub mod kit;
