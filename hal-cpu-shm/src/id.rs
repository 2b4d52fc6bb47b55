//! The backend's name.

/// The backend's registry name, used in errors.
pub(crate) const BACKEND: &str = "cpu-shm";
