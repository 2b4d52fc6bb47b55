//! The VMM resource types of this backend, which does not offer VMM yet:
//! no value of them exists (`hal_core::absent`), and the device answers
//! `Unsupported` where one would be made.

/// A VMM physical allocation: none exist, VMM is not offered yet.
pub type AscendPhysical = hal_core::absent::NoPhysical;
/// A VMM reservation: none exist, VMM is not offered yet.
pub type AscendReservation = hal_core::absent::NoReservation;
