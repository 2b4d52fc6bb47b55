//! The export layer: what every memfd-backed backend does to export an
//! object and to import it, in one place.
//!
//! - [`new_handle`]: a fresh [`Handle`](crate::Handle) from a backend's
//!   [`HandleSpec`] and the caller's [`ExportOptions`](crate::ExportOptions)
//!   (who may import, read-only, creator identity, object id);
//! - [`SealedMemfd`] and [`sealed_memfd`]: the memory object, a memfd
//!   sealed against size changes, and its mapping;
//! - [`Exported`]: the handle with its descriptors, registered with this
//!   process's descriptor broker;
//! - [`take_sealed`]: the importer's side, the descriptors of a shared
//!   handle taken and their seals checked before anything maps them.
//!
//! The shared page of an event or a notify built on these is
//! [`syncpage`](crate::kit::syncpage).

pub mod envelope;
mod exported;
mod handle;
mod memfd;
pub mod numbered;
mod take;

pub use exported::Exported;
pub use handle::{new_handle, HandleSpec};
pub use memfd::{sealed_memfd, SealedMemfd};
pub use take::{
    check_fd_count, check_sealed, fd_array, take_sealed, take_sealed_batch, Expect, Sealed,
};
