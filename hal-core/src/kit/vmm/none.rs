//! The [`Vmm`](crate::Vmm) of a device without VMM: implement
//! [`VmmByCalls`](super::forward::VmmByCalls) with [`NoVmm`] as its calls and [`unsupported`] as the
//! answer of [`VmmByCalls::vmm`](super::forward::VmmByCalls::vmm), and every VMM operation answers
//! [`Error::Unsupported`] naming itself. [`NoPhysical`], [`NoReservation`]
//! and [`NoVmm`] are types without values: nothing of them is ever made.
//!
//! ```ignore
//! impl VmmByCalls for MyDevice {
//!     type Physical = NoPhysical;
//!     type Reservation = NoReservation;
//!     type Calls<'a> = NoVmm;
//!
//!     fn vmm(&self, operation: &str) -> Result<NoVmm> {
//!         Err(none::unsupported(self.info(), operation))
//!     }
//! }
//! ```
//!
//! The device must not claim [`Capabilities::VMM`](crate::Capabilities::VMM)
//! (nor `GROWABLE`): the conformance suite then requires exactly these
//! answers.

use crate::error::{Error, Result};
use crate::exported::Exported;
use crate::handle::SharedHandle;
use crate::kit::vmm::forward::VmmCalls;
use crate::types::{Access, DeviceInfo, ExportOptions};
use crate::vmm::{AccessGrant, AccessTarget, Physical, PhysicalDesc, PhysicalLocation};
use crate::vmm::{Reservation, ShareableHandle};

/// What every VMM operation of a device without VMM answers:
/// [`Error::Unsupported`] naming the backend, the operation and what to use
/// instead.
///
/// ```
/// use hal_core::kit::vmm::none;
/// use hal_core::{BackendId, Capabilities, DeviceInfo, DlpackTypes};
///
/// let info = DeviceInfo {
///     backend: BackendId::External(0x8001),
///     ordinal: 0,
///     uuid: [0; 16],
///     name: "example".into(),
///     total_memory: 0,
///     page_sizes: vec![4096],
///     granularity_min: 4096,
///     granularity_recommended: 4096,
///     capabilities: Capabilities::default(),
///     dlpack: DlpackTypes::HOST,
/// };
/// let e = none::unsupported(&info, "reserve");
/// assert!(e.is_unsupported());
/// assert!(e.to_string().contains("reserve"));
/// ```
pub fn unsupported(info: &DeviceInfo, operation: &str) -> Error {
    Error::unsupported(
        info.backend,
        operation,
        format!(
            "device {} (`{}`) has no virtual memory management (its capabilities lack VMM); \
             allocate with Device::allocate instead",
            info.ordinal, info.name
        ),
    )
}

/// The physical allocation of a device without VMM: there is none.
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

/// The reservation of a device without VMM: there is none.
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

/// The VMM calls of a device without VMM: there are none, since
/// [`VmmByCalls::vmm`](super::forward::VmmByCalls::vmm) never hands them
/// out.
#[derive(Debug)]
pub enum NoVmm {}

impl VmmCalls for NoVmm {
    type Physical = NoPhysical;
    type Reservation = NoReservation;

    fn info(&self) -> &DeviceInfo {
        match *self {}
    }

    fn check_reservation(&self, _reservation: &NoReservation) -> Result<()> {
        match *self {}
    }

    fn device_count(&self) -> Result<u32> {
        match *self {}
    }

    fn allocate(&self, _desc: &PhysicalDesc) -> Result<NoPhysical> {
        match *self {}
    }

    fn reserve(&self, _size: u64, _align: u64) -> Result<NoReservation> {
        match *self {}
    }

    fn map(
        &self,
        _reservation: &NoReservation,
        _offset: u64,
        _physical: &NoPhysical,
        _physical_offset: u64,
        _len: u64,
    ) -> Result<()> {
        match *self {}
    }

    fn unmap(&self, _reservation: &NoReservation, _offset: u64, _len: u64) -> Result<()> {
        match *self {}
    }

    fn set_access(
        &self,
        _reservation: &NoReservation,
        _offset: u64,
        _len: u64,
        _grants: &[AccessGrant],
    ) -> Result<()> {
        match *self {}
    }

    fn access(
        &self,
        _reservation: &NoReservation,
        _offset: u64,
        _target: AccessTarget,
    ) -> Result<Access> {
        match *self {}
    }

    fn export(&self, _physical: &NoPhysical, _opts: &ExportOptions) -> Result<Exported> {
        match *self {}
    }

    fn import(&self, _shared: SharedHandle) -> Result<NoPhysical> {
        match *self {}
    }
}
