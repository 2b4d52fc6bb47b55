//! Every entry point of the stand-in, called through the C ABI of the
//! built shared library. Tests that run in parallel use devices of their
//! own: primary contexts are process-wide.

mod common;

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::{null, null_mut};

use common::{cu, init, library, OK};
use cudarc::driver::sys::{CUdevice_attribute as A, CUresult, CUuuid};

use CUresult::{
    CUDA_ERROR_INVALID_DEVICE as INVALID_DEVICE, CUDA_ERROR_INVALID_VALUE as INVALID_VALUE,
};

#[test]
fn every_listed_symbol_resolves_and_nothing_else_is_a_driver_symbol() {
    let lib = library();
    for name in hal_mock_libcuda::EXPORTED {
        // SAFETY: only the address is looked at.
        let s = unsafe { lib.get::<*const c_void>(*name) };
        assert!(s.is_ok(), "{name} is not exported");
        assert!(
            hal_core::kit::vendor::cuda::entry::ALL.contains(name),
            "{name} is not a driver entry point"
        );
    }
    let mut sorted = hal_mock_libcuda::EXPORTED.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        hal_mock_libcuda::EXPORTED.len(),
        "listed twice"
    );
    // SAFETY: only the address is looked at.
    assert!(unsafe { lib.get::<*const c_void>("cuNotAnEntryPoint") }.is_err());
}

#[test]
fn error_names_and_strings() {
    let cu = cu();
    let text = |f: unsafe extern "C" fn(u32, *mut *const c_char) -> CUresult, code: u32| {
        let mut p = null();
        // SAFETY: valid output pointer; the string is static in the library.
        unsafe {
            assert_eq!(f(code, &mut p), OK);
            CStr::from_ptr(p).to_str().unwrap().to_owned()
        }
    };
    assert_eq!(text(cu.cuGetErrorName, 1), "CUDA_ERROR_INVALID_VALUE");
    assert_eq!(text(cu.cuGetErrorName, 600), "CUDA_ERROR_NOT_READY");
    assert_eq!(text(cu.cuGetErrorName, 0), "CUDA_SUCCESS");
    assert_eq!(text(cu.cuGetErrorString, 1), "invalid argument");
    assert_eq!(text(cu.cuGetErrorString, 101), "invalid device ordinal");
    // A code without a description of its own is described by its name.
    assert_eq!(
        text(cu.cuGetErrorString, 912),
        "CUDA_ERROR_INVALID_CLUSTER_SIZE"
    );
    let mut p = null();
    // SAFETY: valid output pointer, or null on purpose.
    unsafe {
        assert_eq!((cu.cuGetErrorName)(12345, &mut p), INVALID_VALUE);
        assert_eq!((cu.cuGetErrorString)(u32::MAX, &mut p), INVALID_VALUE);
        assert_eq!((cu.cuGetErrorName)(1, null_mut()), INVALID_VALUE);
    }
}

#[test]
fn init_version_and_devices() {
    let cu = init();
    let mut v = 0;
    let mut uuid = CUuuid { bytes: [0; 16] };
    let mut uuid2 = CUuuid { bytes: [0; 16] };
    let mut name = [0 as c_char; 64];
    let mut total = 0usize;
    let mut n = 0;
    let mut dev = -1;
    // SAFETY: valid output pointers and lengths, or null on purpose.
    unsafe {
        assert_eq!((cu.cuInit)(1), INVALID_VALUE);
        assert_eq!((cu.cuInit)(0), OK, "a second cuInit");
        assert_eq!((cu.cuDriverGetVersion)(&mut v), OK);
        assert_eq!(v, 12080);
        assert_eq!((cu.cuDriverGetVersion)(null_mut()), INVALID_VALUE);
        assert_eq!((cu.cuDeviceGetCount)(&mut n), OK);
        assert_eq!(n, 4);
        assert_eq!((cu.cuDeviceGetCount)(null_mut()), INVALID_VALUE);
        assert_eq!((cu.cuDeviceGet)(&mut dev, 3), OK);
        assert_eq!(dev, 3);
        assert_eq!((cu.cuDeviceGet)(&mut dev, 4), INVALID_DEVICE);
        assert_eq!((cu.cuDeviceGet)(&mut dev, -1), INVALID_DEVICE);
        assert_eq!((cu.cuDeviceGet)(null_mut(), 0), INVALID_VALUE);

        assert_eq!((cu.cuDeviceGetName)(name.as_mut_ptr(), 64, 1), OK);
        assert_eq!(
            CStr::from_ptr(name.as_ptr()).to_str().unwrap(),
            "Mock CUDA device 1"
        );
        assert_eq!((cu.cuDeviceGetName)(name.as_mut_ptr(), 5, 1), OK);
        assert_eq!(
            CStr::from_ptr(name.as_ptr()).to_str().unwrap(),
            "Mock",
            "cut to len - 1"
        );
        assert_eq!((cu.cuDeviceGetName)(name.as_mut_ptr(), 0, 1), INVALID_VALUE);
        assert_eq!((cu.cuDeviceGetName)(null_mut(), 64, 1), INVALID_VALUE);
        assert_eq!(
            (cu.cuDeviceGetName)(name.as_mut_ptr(), 64, 9),
            INVALID_DEVICE
        );

        assert_eq!((cu.cuDeviceGetUuid_v2)(&mut uuid, 2), OK);
        assert_eq!((cu.cuDeviceGetUuid)(&mut uuid2, 2), OK);
        assert_eq!(uuid.bytes, uuid2.bytes);
        let expected = hal_mock::Profile::cuda().device_uuid(2);
        assert_eq!(uuid.bytes.map(|b| b as u8), expected);
        assert_eq!((cu.cuDeviceGetUuid_v2)(&mut uuid, 4), INVALID_DEVICE);
        assert_eq!((cu.cuDeviceGetUuid_v2)(null_mut(), 0), INVALID_VALUE);

        assert_eq!((cu.cuDeviceTotalMem_v2)(&mut total, 0), OK);
        assert_eq!(total, 16 << 30);
        assert_eq!((cu.cuDeviceTotalMem_v2)(null_mut(), 0), INVALID_VALUE);
        assert_eq!((cu.cuDeviceTotalMem_v2)(&mut total, 7), INVALID_DEVICE);
    }
}

#[test]
fn attributes_are_an_h200s() {
    let cu = init();
    let get = |attrib: c_int, dev: c_int| {
        let mut v = -7;
        // SAFETY: valid output pointer.
        let r = unsafe { (cu.cuDeviceGetAttribute)(&mut v, attrib, dev) };
        (r, v)
    };
    let expect = [
        (A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1),
        (A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1),
        (A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1),
        (A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0),
        (A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1),
        (
            A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            1,
        ),
        (
            A::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
            1,
        ),
        (A::CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, 1),
        (A::CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 1),
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9),
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0),
        (
            A::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
            1,
        ),
        (A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1),
        (A::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, 0),
        (A::CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0),
        (A::CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32),
    ];
    for (a, v) in expect {
        assert_eq!(get(a as c_int, 0), (OK, v), "{a:?}");
    }
    for dev in 0..4 {
        assert_eq!(
            get(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID as c_int, dev),
            (OK, dev)
        );
    }
    // HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED (CUDA 13.0's number).
    assert_eq!(get(141, 0), (OK, 1));
    // A number the driver knows without a value here: 0.
    assert_eq!(get(A::CU_DEVICE_ATTRIBUTE_TCC_DRIVER as c_int, 0), (OK, 0));
    assert_eq!(get(0, 0).0, INVALID_VALUE);
    assert_eq!(get(148, 0).0, INVALID_VALUE);
    assert_eq!(get(-3, 0).0, INVALID_VALUE);
    assert_eq!(get(1, 4).0, INVALID_DEVICE);
    // SAFETY: null on purpose: the library refuses it.
    let r = unsafe { (cu.cuDeviceGetAttribute)(null_mut(), 1, 0) };
    assert_eq!(r, INVALID_VALUE);
}

#[test]
fn the_stand_in_is_linked_never_to_be_unloaded() {
    // Threads the simulator starts inside the library outlive a test's
    // handle: a `dlclose` that unmapped it would crash them.
    let path = common::library_path();
    assert_eq!(
        hal_mock::standin::is_nodelete(&path),
        Ok(true),
        "{} lacks DF_1_NODELETE (build.rs links it -z nodelete)",
        path.display()
    );
}
