//! The vendor error codes the simulator reports, with their vendors' numbers
//! and symbolic names: the tables of [`hal_core::kit::vendor`], under the paths
//! this crate has always offered.
//!
//! Every refusal that a real runtime reports with an error code reaches the
//! caller as [`Error::Vendor`](hal_core::Error::Vendor) carrying the code and
//! name below, unchanged, so that code written against the simulator matches
//! on the same values it will see on hardware. Tests pass these constants to
//! [`Faults::fail_next`](crate::fault::Faults::fail_next) to inject a fault.

pub use hal_core::kit::vendor::{acl, cuda, Code};
