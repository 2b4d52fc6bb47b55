//! The backend author's kit: what a backend crate builds on and a program
//! does not need.
//!
//! - [`os`]: sealed memfds, shared mappings, futexes, process identity and
//!   liveness, vendor libraries loaded at run time;
//! - [`peer_region`]: a sealed memfd of one process that others reach
//!   through `/proc/PID/fd/N` (a channel's control region, a group's board);
//! - [`export`]: the export layer of memfd-backed backends (a handle from the
//!   export options, sealed memfds, checked imports) and
//!   [`syncpage`], the shared page under their events and notifies;
//! - [`vendor`]: the vendors' error codes and entry-point names as plain
//!   data, shared by the real backends and the simulator; [`vendor_codes`],
//!   an out-of-tree backend's own table of codes; [`needs`], the
//!   entry points each capability needs; [`runtime`], a vendor runtime's
//!   availability; [`vendor_library`], a loaded vendor library as a
//!   backend holds it;
//! - [`busy_free`]: the free of memory importers may still hold;
//!   [`raw_ipc`], the bytes of a raw IPC handle given to another library;
//! - [`queued`], [`reaper`], [`teardown`]: what a vendor stream holds for its
//!   queued work, and vendor frees that must not run on the caller's thread;
//! - [`vmm_pieces`]: the vendor-neutral halves of VMM reservations and
//!   physical allocations; [`vmm_checks`], the checks of a VMM call's
//!   arguments; [`vmm_forward`] and [`vmm_copies`], a backend's `Vmm` and
//!   `Reservation` written from its own calls; [`vmm_physical`], what is
//!   known of a physical allocation; [`RegisteredHost`], registered host memory;
//! - [`streams`]: a driver backend's stream methods written from its own
//!   calls; [`host_stream`], those of a backend whose streams are
//!   host-synchronous; [`no_vmm`], the `Vmm` of a device without VMM;
//! - [`off_thread`]: a vendor wait that cannot time out, bounded by running
//!   it on a thread of its own;
//! - [`lock`]: locks that a panic elsewhere does not poison.
//!
//! docs/adding-a-backend.md shows how a new vendor crate uses them.

pub mod busy_free;
#[allow(unsafe_code)]
pub mod discard;
pub mod export;
pub mod host_stream;
pub(crate) mod import;
pub mod lock;
pub mod needs;
pub mod no_vmm;
pub mod off_thread;
#[allow(unsafe_code)]
pub mod os;
pub mod peer_region;
pub mod queued;
pub mod raw_ipc;
pub mod reaper;
#[allow(unsafe_code)]
mod registered;
pub mod runtime;
pub mod streams;
pub mod syncpage;
pub mod teardown;
pub mod vendor;
pub mod vendor_codes;
pub mod vendor_library;
pub mod vmm_checks;
pub mod vmm_copies;
pub mod vmm_forward;
pub mod vmm_physical;
pub mod vmm_pieces;

pub use registered::RegisteredHost;
