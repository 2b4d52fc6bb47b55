//! The backend's id and name.

/// The backend's wire id: [`hal_core::BackendId::External`] with this value,
/// claimed in docs/adding-a-backend.md's table of ids.
pub const ID: u16 = 0x8000;

/// The backend's registry name.
pub const NAME: &str = "template";

/// The backend's [`hal_core::BackendId`].
pub const BACKEND_ID: hal_core::BackendId = hal_core::BackendId::External(ID);
