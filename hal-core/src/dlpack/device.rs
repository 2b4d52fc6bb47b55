//! The DLPack device of memory, from its device's DLPack types and its
//! location.

use crate::error::{Error, Result};
use crate::types::{DeviceInfo, Location};

use super::abi::{DLDevice, DLDeviceType};

/// The DLPack device of memory of the device `info` at `location`: the type
/// the backend declared for that location ([`DeviceInfo::dlpack`]), with the
/// device's ordinal as id for device memory and 0 otherwise.
pub fn dl_device(info: &DeviceInfo, location: Location) -> Result<DLDevice> {
    let types = info.dlpack;
    let (device_type, device_id) = match location {
        Location::Device(n) => (
            types.device,
            i32::try_from(n).map_err(|_| {
                Error::invalid(format!("device ordinal {n} does not fit DLPack's int32"))
            })?,
        ),
        Location::Host => (Some(types.host), 0),
        Location::Managed => (types.managed, 0),
    };
    let Some(device_type) = device_type else {
        return Err(Error::unsupported(
            info.backend,
            "DLPack export",
            format!(
                "no DLPack device type is defined for {location} of this backend; \
                 name one with TensorSpec::with_device"
            ),
        ));
    };
    Ok(DLDevice {
        device_type: DLDeviceType(device_type),
        device_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{BackendId, DlpackTypes};

    fn info(dlpack: DlpackTypes) -> DeviceInfo {
        DeviceInfo::for_tests(BackendId::External(0x8001), dlpack)
    }

    #[test]
    fn the_declared_type_with_the_ordinal_for_device_memory_and_zero_otherwise() {
        let gpu = info(DlpackTypes {
            device: Some(DLDeviceType::CUDA.0),
            host: DLDeviceType::CUDA_HOST.0,
            managed: Some(DLDeviceType::CUDA_MANAGED.0),
        });
        let dev = |t: DLDeviceType, id| DLDevice {
            device_type: t,
            device_id: id,
        };
        assert_eq!(
            dl_device(&gpu, Location::Device(3)).unwrap(),
            dev(DLDeviceType::CUDA, 3)
        );
        assert_eq!(
            dl_device(&gpu, Location::Host).unwrap(),
            dev(DLDeviceType::CUDA_HOST, 0)
        );
        assert_eq!(
            dl_device(&gpu, Location::Managed).unwrap(),
            dev(DLDeviceType::CUDA_MANAGED, 0)
        );
        assert!(dl_device(&gpu, Location::Device(u32::MAX)).is_err());
    }

    #[test]
    fn a_location_without_a_declared_type_is_refused() {
        let host = info(DlpackTypes::HOST);
        assert_eq!(dl_device(&host, Location::Host).unwrap(), DLDevice::CPU);
        for location in [Location::Device(0), Location::Managed] {
            let err = dl_device(&host, location).unwrap_err();
            assert!(err.is_unsupported(), "{err}");
            assert!(err.to_string().contains("TensorSpec::with_device"), "{err}");
        }
    }
}
