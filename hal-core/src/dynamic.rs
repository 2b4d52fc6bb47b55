//! Placeholder: the object-safe mirror is being written.
