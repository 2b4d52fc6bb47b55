//! The DLPack device types the simulated devices declare: host and managed
//! memory are host memory, device memory is no real device's.

use hal_core::dlpack::{dl_device, DLDeviceType};
use hal_core::{Backend, Device, Location};
use hal_mock::MockBackend;

#[test]
fn simulated_device_memory_is_never_taken_for_cpu_or_cuda_memory() {
    for backend in [MockBackend::cuda(), MockBackend::ascend()] {
        let dev = backend.open(0).unwrap();
        let info = dev.info();
        let device_type = |l| dl_device(info, l).unwrap().device_type;
        assert_eq!(
            device_type(Location::Device(0)),
            DLDeviceType::EXT_DEV,
            "{}",
            info.backend
        );
        assert_eq!(device_type(Location::Host), DLDeviceType::CPU);
        assert_eq!(device_type(Location::Managed), DLDeviceType::CPU);
    }
}
