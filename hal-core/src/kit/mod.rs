//! The backend author's kit: what a backend crate builds on and a program
//! does not need. It sits on the contract and below the features: nothing
//! here imports [`exchange`](crate::exchange), [`lease`](crate::lease),
//! [`channel`](crate::channel) or [`group`](crate::group) (`cargo xtask
//! circles` checks it). One folder per concept:
//!
//! - [`os`]: sealed memfds, shared mappings, futexes, process identity and
//!   liveness, threads, locks that a panic elsewhere does not poison,
//!   descriptors another process may have sent
//!   ([`discard`](os::discard)), and a sealed memfd of one process that
//!   others reach through `/proc/PID/fd/N`
//!   ([`peer_region`](os::peer_region): a channel's control region, a
//!   group's board);
//! - [`export`]: the export layer of memfd-backed backends (a handle from
//!   the export options, sealed memfds, checked imports) and
//!   [`syncpage`](export::syncpage), the shared page under their events and
//!   notifies;
//! - [`memory`]: the free of memory importers may still hold
//!   ([`busy_free`](memory::busy_free)) and registered host memory
//!   ([`RegisteredHost`]);
//! - [`stream`]: a driver backend's stream methods written from its own
//!   calls, what a vendor stream holds for its queued work, and vendor
//!   frees and waits that must not run on the caller's thread;
//! - [`vendor`]: the vendors' error codes and entry-point names as plain
//!   data, shared by the real backends and the simulator; the entry points
//!   each capability needs; a vendor runtime's availability; a loaded vendor
//!   library as a backend holds it; the bytes of a raw IPC handle;
//! - [`vmm`]: the vendor-neutral halves of VMM reservations and physical
//!   allocations, the checks of a VMM call's arguments, and a backend's
//!   `Vmm`, `Reservation` and `Physical` implemented once over its own
//!   calls.
//!
//! docs/adding-a-backend.md shows how a new vendor crate uses them.

pub mod export;
pub mod memory;
#[allow(unsafe_code)]
pub mod os;
pub mod stream;
pub mod vendor;
pub mod vmm;

pub use memory::RegisteredHost;
/// The locks, also at their first place (the export registry of
/// `export/kept.rs` and the C library name them there).
pub use os::lock;
