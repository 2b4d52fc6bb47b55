//! The DLPack device of memory, from its backend and location.

use crate::error::{Error, Result};
use crate::types::{BackendId, Location};

use super::abi::{DLDevice, DLDeviceType};

/// The DLPack device of memory of `backend` at `location`, per the table in
/// the [module documentation](super).
pub fn dl_device(backend: BackendId, location: Location) -> Result<DLDevice> {
    let ordinal = |n: u32| {
        i32::try_from(n)
            .map_err(|_| Error::invalid(format!("device ordinal {n} does not fit DLPack's int32")))
    };
    let device = match (backend, location) {
        (BackendId::MockCuda | BackendId::MockAscend, Location::Device(n)) => DLDevice {
            device_type: DLDeviceType::EXT_DEV,
            device_id: ordinal(n)?,
        },
        (BackendId::CpuShm | BackendId::MockCuda | BackendId::MockAscend, _) => DLDevice::CPU,
        (BackendId::Cuda | BackendId::CudaUvm, Location::Device(n)) => DLDevice {
            device_type: DLDeviceType::CUDA,
            device_id: ordinal(n)?,
        },
        (BackendId::Cuda | BackendId::CudaUvm, Location::Host) => DLDevice {
            device_type: DLDeviceType::CUDA_HOST,
            device_id: 0,
        },
        (BackendId::Cuda | BackendId::CudaUvm, Location::Managed) => DLDevice {
            device_type: DLDeviceType::CUDA_MANAGED,
            device_id: 0,
        },
        (BackendId::Ascend, Location::Device(n)) => DLDevice {
            device_type: DLDeviceType::EXT_DEV,
            device_id: ordinal(n)?,
        },
        (_, Location::Host) => DLDevice::CPU,
        (other, location) => {
            return Err(Error::unsupported(
                other.name(),
                "DLPack export",
                format!(
                    "no DLPack device type is defined for {location:?} memory of this backend; \
                     name one with TensorSpec::with_device"
                ),
            ))
        }
    };
    Ok(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_types_per_backend_and_location() {
        let dev = |t: DLDeviceType, id| DLDevice {
            device_type: t,
            device_id: id,
        };
        let cases = [
            (BackendId::CpuShm, Location::Host, dev(DLDeviceType::CPU, 0)),
            (
                BackendId::Cuda,
                Location::Device(3),
                dev(DLDeviceType::CUDA, 3),
            ),
            (
                BackendId::Cuda,
                Location::Host,
                dev(DLDeviceType::CUDA_HOST, 0),
            ),
            (
                BackendId::Cuda,
                Location::Managed,
                dev(DLDeviceType::CUDA_MANAGED, 0),
            ),
            (
                BackendId::CudaUvm,
                Location::Managed,
                dev(DLDeviceType::CUDA_MANAGED, 0),
            ),
            (
                BackendId::Ascend,
                Location::Device(1),
                dev(DLDeviceType::EXT_DEV, 1),
            ),
            (BackendId::Ascend, Location::Host, dev(DLDeviceType::CPU, 0)),
            (
                BackendId::MockCuda,
                Location::Device(2),
                dev(DLDeviceType::EXT_DEV, 2),
            ),
            (
                BackendId::MockCuda,
                Location::Host,
                dev(DLDeviceType::CPU, 0),
            ),
            (
                BackendId::MockAscend,
                Location::Managed,
                dev(DLDeviceType::CPU, 0),
            ),
            (
                BackendId::External(0x8001),
                Location::Host,
                dev(DLDeviceType::CPU, 0),
            ),
        ];
        for (backend, location, want) in cases {
            assert_eq!(
                dl_device(backend, location).unwrap(),
                want,
                "{backend} {location:?}"
            );
        }
        assert!(dl_device(BackendId::Ascend, Location::Managed)
            .unwrap_err()
            .is_unsupported());
        assert!(dl_device(BackendId::External(0x8001), Location::Device(0))
            .unwrap_err()
            .is_unsupported());
        assert!(dl_device(BackendId::Cuda, Location::Device(u32::MAX)).is_err());
    }
}
