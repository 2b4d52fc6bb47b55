//! Placeholder: handle exchange is being written.
