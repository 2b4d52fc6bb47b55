//! Resource types of operations a backend does not offer: VMM physical
//! allocations and reservations with no value. A backend without VMM names
//! them as its `Device::Physical` and `Device::Reservation` and answers
//! [`Error::Unsupported`](crate::Error::Unsupported) where one would be
//! made; its capabilities do not claim `VMM`.

use crate::device::{Physical, Reservation};
use crate::error::Result;
use crate::vmm::{PhysicalLocation, ShareableHandle};

/// A VMM physical allocation of a backend without VMM: no value exists.
#[derive(Debug)]
pub enum NoPhysical {}

/// A VMM reservation of a backend without VMM: no value exists.
#[derive(Debug)]
pub enum NoReservation {}

impl Physical for NoPhysical {
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

impl Reservation for NoReservation {
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
