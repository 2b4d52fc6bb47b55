//! The backend's name.

/// The backend's registry name, used in errors.
pub(crate) const BACKEND: hal_core::BackendId = hal_core::BackendId::CpuShm;
