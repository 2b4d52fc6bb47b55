//! Virtual memory management (VMM): the [`Vmm`] trait, and what a VMM call
//! says beyond sizes: where a physical allocation's pages live, which
//! shareable handle it is made for, and who may access a mapped range.
//!
//! The descriptions mirror the vendors' structures (CUDA's
//! `CUmemAllocationProp` and `CUmemAccessDesc`, Ascend's
//! `aclrtPhysicalMemProp` and `aclrtMemAccessDesc`) closely enough that a
//! backend translates them field by field, and the rules every backend
//! shares live here: a grant list is checked the same way everywhere
//! ([`check_grants`]), and a refused fabric handle falls back to a POSIX
//! descriptor with one warning ([`fabric_or_posix`]).

mod contract;
mod desc;

pub use contract::{Physical, Reservation, Vmm, VmmExt};
pub use desc::*;
