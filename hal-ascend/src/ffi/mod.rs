//! The runtime's C interface: the library found ([`loader`]) and loaded
//! with its table of entry points and its handles ([`sys`]), the types,
//! constants and layouts the public headers declare ([`bindings`]), and
//! the typed layer every other module calls ([`result`]).

#[rustfmt::skip]
#[allow(unsafe_code)]
pub(crate) mod bindings;
pub(crate) mod loader;
#[allow(unsafe_code)]
pub(crate) mod result;
#[allow(unsafe_code)]
pub(crate) mod sys;
