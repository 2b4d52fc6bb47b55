//! A device without VMM: [`no_vmm!`](crate::no_vmm) writes its `impl Vmm`,
//! in which every call answers [`Error::Unsupported`] naming the operation,
//! with [`NoPhysical`] and [`NoReservation`], types that have no values, as
//! its physical allocations and reservations.
//!
//! The device must not claim [`Capabilities::VMM`](crate::Capabilities::VMM)
//! (nor `GROWABLE`): the conformance suite then requires exactly these
//! answers.
//!
//! ```
//! use hal_core::kit::no_vmm;
//! use hal_core::{BackendId, Capabilities, DeviceInfo, DlpackTypes};
//!
//! let info = DeviceInfo {
//!     backend: BackendId::External(0x8001),
//!     ordinal: 0,
//!     uuid: [0; 16],
//!     name: "example".into(),
//!     total_memory: 0,
//!     page_sizes: vec![4096],
//!     granularity_min: 4096,
//!     granularity_recommended: 4096,
//!     capabilities: Capabilities::default(),
//!     dlpack: DlpackTypes::HOST,
//! };
//! let e = no_vmm::unsupported(&info, "reserve");
//! assert!(e.is_unsupported());
//! assert!(e.to_string().contains("reserve"));
//! ```

use crate::error::Error;
use crate::types::DeviceInfo;
use crate::vmm::{Physical, PhysicalLocation, Reservation, ShareableHandle};
use crate::Result;

/// What a VMM call of a device without VMM answers: [`Error::Unsupported`]
/// naming the backend, the operation and what to use instead.
pub fn unsupported(info: &DeviceInfo, operation: &str) -> Error {
    Error::unsupported(
        info.backend.to_string(),
        operation,
        format!(
            "device {} (`{}`) has no virtual memory management (its capabilities lack VMM); \
             allocate with Device::allocate instead",
            info.ordinal, info.name
        ),
    )
}

/// The physical allocation of a device without VMM: there is none (the type
/// has no values).
#[derive(Debug)]
pub enum NoPhysical {}

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

/// The reservation of a device without VMM: there is none (the type has no
/// values).
#[derive(Debug)]
pub enum NoReservation {}

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

/// `impl Vmm for $device` of a device without VMM: every call answers
/// [`Error::Unsupported`] ([`unsupported`]), with [`NoPhysical`] and
/// [`NoReservation`] as its types.
///
/// ```ignore
/// hal_core::no_vmm!(MyDevice);
/// ```
#[macro_export]
macro_rules! no_vmm {
    ($device:ty) => {
        impl $crate::Vmm for $device {
            type Physical = $crate::kit::no_vmm::NoPhysical;
            type Reservation = $crate::kit::no_vmm::NoReservation;

            fn granularity(&self, _which: $crate::Granularity) -> $crate::Result<u64> {
                Err($crate::kit::no_vmm::unsupported(
                    $crate::Device::info(self),
                    "granularity",
                ))
            }

            fn allocate_physical_with(
                &self,
                _desc: &$crate::PhysicalDesc,
            ) -> $crate::Result<Self::Physical> {
                Err($crate::kit::no_vmm::unsupported(
                    $crate::Device::info(self),
                    "allocate_physical",
                ))
            }

            fn reserve(&self, _size: u64, _align: u64) -> $crate::Result<Self::Reservation> {
                Err($crate::kit::no_vmm::unsupported(
                    $crate::Device::info(self),
                    "reserve",
                ))
            }

            fn map_range(
                &self,
                reservation: &Self::Reservation,
                _offset: u64,
                _physical: &Self::Physical,
                _physical_offset: u64,
                _len: u64,
            ) -> $crate::Result<()> {
                match *reservation {}
            }

            fn unmap(
                &self,
                reservation: &Self::Reservation,
                _offset: u64,
                _len: u64,
            ) -> $crate::Result<()> {
                match *reservation {}
            }

            fn set_access_for(
                &self,
                reservation: &Self::Reservation,
                _offset: u64,
                _len: u64,
                _grants: &[$crate::AccessGrant],
            ) -> $crate::Result<()> {
                match *reservation {}
            }

            fn access(
                &self,
                reservation: &Self::Reservation,
                _offset: u64,
                _target: $crate::AccessTarget,
            ) -> $crate::Result<$crate::Access> {
                match *reservation {}
            }

            fn export_physical(
                &self,
                physical: &Self::Physical,
                _opts: &$crate::ExportOptions,
            ) -> $crate::Result<$crate::Exported> {
                match *physical {}
            }

            fn import_physical(
                &self,
                _shared: $crate::SharedHandle,
                _opts: &$crate::ImportOptions,
            ) -> $crate::Result<Self::Physical> {
                Err($crate::kit::no_vmm::unsupported(
                    $crate::Device::info(self),
                    "import_physical",
                ))
            }
        }
    };
}
