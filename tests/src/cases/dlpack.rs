//! DLPack export of every kind of memory a backend hands out.

use std::sync::Arc;

use hal_core::dlpack::{to_dlpack, DLDataType, DLDeviceType};
use hal_core::{Backend, Device, Location, Memory};

use crate::support::{alloc_filled, must, Suite};

/// An allocation of the backend's usual location is a DLPack tensor: device
/// memory with the backend's device type, the device's ordinal and the
/// device address as data (DLPack export is not only for host memory);
/// host memory with a host type and the host pointer. The tensor keeps the
/// memory alive until its deleter runs.
pub fn dlpack_device_memory<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let page = dev.info().page_size();
    let a = Arc::new(alloc_filled(&dev, 1, 9));
    let t = must(
        to_dlpack(Arc::clone(&a), dev.info(), DLDataType::U8, &[page as i64]),
        "to_dlpack",
    );
    let d = t.tensor();
    match a.location() {
        Location::Device(n) => {
            assert!(
                !matches!(
                    d.device.device_type,
                    DLDeviceType::CPU | DLDeviceType::CUDA_HOST
                ),
                "device memory described as host memory: {:?}",
                d.device
            );
            assert_eq!(d.device.device_id, n as i32, "the device's ordinal");
            assert_eq!(d.data as u64, a.addr(), "the device address");
        }
        _ => {
            let host = a.host_ptr().expect("host memory is host-visible");
            assert_eq!(d.data as usize, host as usize, "the host pointer");
        }
    }
    assert_eq!(Arc::strong_count(&a), 2, "the tensor holds the memory");
    drop(t);
    assert_eq!(Arc::strong_count(&a), 1, "the deleter let it go");
}
