//! What this backend needs of the GPU device underneath.

use hal_core::testing::ContextProbe;
use hal_core::{Device, Vmm};

/// A GPU device this backend layers on: any [`Device`] with [`Vmm`] (and the
/// thread rule's [`ContextProbe`]) whose allocations,
/// host registrations, events and notifies own their resources
/// (`'static`), as `hal-cuda`'s and the simulator's do. Implemented for
/// every such device.
pub trait GpuDevice:
    Device<Allocation: 'static, HostRegistration: 'static, Event: 'static, Notify: 'static>
    + Vmm
    + ContextProbe
{
}

impl<D> GpuDevice for D where
    D: Device<Allocation: 'static, HostRegistration: 'static, Event: 'static, Notify: 'static>
        + Vmm
        + ContextProbe
{
}
