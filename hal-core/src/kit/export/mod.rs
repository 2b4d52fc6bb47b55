//! The export layer: what every memfd-backed backend does to export an
//! object and to import it, in one place.
//!
//! - [`new_handle`]: a fresh [`Handle`](crate::Handle) from a backend's
//!   [`HandleSpec`] and the caller's [`ExportOptions`](crate::ExportOptions)
//!   (who may import, read-only, creator identity, object id);
//! - [`SealedMemfd`] and [`sealed_memfd`]: the memory object, a memfd
//!   sealed against size changes, and its mapping;
//! - [`Exported`]: the handle with its descriptors (the contract's value,
//!   registered with this process's descriptor broker by the exchange);
//! - [`check_memfds`]: the importer's side, the descriptors of a shared
//!   handle, once taken ([`exchange::take_sealed`](crate::exchange::sealed::take_sealed)),
//!   checked for their seals before anything maps them;
//! - [`KeepAlive`]: what an import keeps as long as itself (its lease).
//!
//! The shared page of an event or a notify built on these is
//! [`syncpage`].

mod handle;
mod keep_alive;
mod memfd;
pub mod syncpage;
mod take;

pub use crate::exported::Exported;
pub use handle::{new_handle, HandleSpec};
pub use keep_alive::KeepAlive;
pub use memfd::{sealed_memfd, SealedMemfd};
pub use take::{check_fd_count, check_memfds, fd_array, Expect};
