//! UCX's UCP library, loaded at run time: its generated types
//! (`bindings`), where it is found ([`loader`]), its entry points (`sys`)
//! and what its status codes mean (`status`).

#[rustfmt::skip]
pub(crate) mod bindings;
pub mod loader;
pub(crate) mod status;
pub(crate) mod sys;
