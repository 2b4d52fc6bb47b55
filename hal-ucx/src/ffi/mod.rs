//! UCX's UCP library, loaded at run time: its generated types
//! (`bindings`), where it is found ([`loader`]), its entry points (`sys`)
//! and what its status codes mean (`status`).

#[rustfmt::skip]
#[allow(unsafe_code)]
pub(crate) mod bindings;
pub mod loader;
#[allow(unsafe_code)]
pub(crate) mod status;
#[allow(unsafe_code)]
pub(crate) mod sys;
