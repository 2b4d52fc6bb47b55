//! The resource types of operations this backend does not offer yet:
//! VMM physical allocations and reservations.
//! No value of them can exist (the types have no variant), and the device
//! answers [`Error::Unsupported`](hal_core::Error::Unsupported) where one
//! would be made; the capabilities do not claim them.

use hal_core::{Physical, Reservation};
use hal_core::{PhysicalLocation, Result, ShareableHandle};

/// A VMM physical allocation (not offered yet).
#[derive(Debug)]
pub enum AscendPhysical {}

/// A VMM reservation (not offered yet).
#[derive(Debug)]
pub enum AscendReservation {}

impl Physical for AscendPhysical {
    fn size(&self) -> u64 {
        match *self {}
    }
    fn location(&self) -> PhysicalLocation {
        match *self {}
    }
    fn handle_type(&self) -> ShareableHandle {
        match *self {}
    }
}

impl Reservation for AscendReservation {
    fn base(&self) -> u64 {
        match *self {}
    }
    fn len(&self) -> u64 {
        match *self {}
    }
    fn read(&self, _offset: u64, _dst: &mut [u8]) -> Result<()> {
        match *self {}
    }
    fn write(&self, _offset: u64, _src: &[u8]) -> Result<()> {
        match *self {}
    }
}
