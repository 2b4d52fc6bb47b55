//! The driver, as this crate reaches it: the library found (`loader.rs`)
//! and loaded with its table of entry points (`sys.rs`), and the typed,
//! checked calls on them (`result.rs`). Nothing above this module calls an
//! entry point itself.

pub(crate) mod loader;
#[allow(unsafe_code)]
pub(crate) mod result;
#[allow(unsafe_code)]
pub(crate) mod sys;

pub(crate) use sys::{
    CUdevice, CUdeviceptr, CUmemAccessDesc, CUmemAllocationProp, CUmemGenericAllocationHandle,
    CUmemLocation, Context, Driver, Event, Stream,
};
