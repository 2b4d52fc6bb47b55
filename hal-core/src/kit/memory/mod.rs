//! What a backend does with memory beyond the export layer:
//!
//! - [`busy_free`]: the free of memory importers may still hold;
//! - [`RegisteredHost`]: existing host memory registered with a device;
//! - the refusal of import options a vendor call that chooses the address
//!   cannot honour (`ImportOptions::refuse_unplaceable`).

pub mod busy_free;
mod placement;
#[allow(unsafe_code)]
mod registered;

pub use registered::RegisteredHost;
