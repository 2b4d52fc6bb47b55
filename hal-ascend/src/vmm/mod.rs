//! VMM: the operations of a device ([`ops`]), reservations of device
//! address space and what is mapped into them ([`reservation`]), physical
//! allocations ([`physical`]).

pub(crate) mod ops;
pub(crate) mod physical;
pub(crate) mod reservation;

pub(crate) use ops::{allow, device_granularity};
