//! `CUDA_VISIBLE_DEVICES` in a child process: the environment is read by
//! `cuInit`, once per process, so each case runs this test binary again
//! with the variable set.

mod common;

use common::{cu, OK};
use cudarc::driver::sys::{CUresult, CUuuid};

const CHILD: &str = "HAL_MOCK_LIBCUDA_VISIBLE_CHILD";

/// Run `test` of this binary in a child process with `CUDA_VISIBLE_DEVICES=value`.
fn run_child(test: &str, value: &str) {
    let out = hal_core::testing::child(test)
        .env(CHILD, "1")
        .env("CUDA_VISIBLE_DEVICES", value)
        .env_remove("HAL_MOCK_DEVICES")
        .env_remove("HAL_MOCK_VISIBLE_DEVICES")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{test} with CUDA_VISIBLE_DEVICES={value}:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn visible_devices_reorder_and_hide() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    run_child("child_two_devices", "2,0");
    run_child("child_no_device", "-1");
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn child_two_devices() {
    if std::env::var_os(CHILD).is_none() {
        panic!("a child entry point: run by its parent, which sets its variables");
    }
    let cu = cu();
    let mut n = 0;
    let mut uuid = CUuuid { bytes: [0; 16] };
    let mut bus = -1;
    // SAFETY: valid output pointers.
    unsafe {
        assert_eq!((cu.cuInit)(0), OK);
        assert_eq!((cu.cuDeviceGetCount)(&mut n), OK);
        assert_eq!(n, 2);
        assert_eq!((cu.cuDeviceGetUuid_v2)(&mut uuid, 0), OK);
        assert_eq!(
            uuid.bytes.map(|b| b as u8),
            hal_mock::Profile::cuda().device_uuid(2)
        );
        assert_eq!((cu.cuDeviceGetAttribute)(&mut bus, 33, 0), OK);
        assert_eq!(bus, 2, "the PCI bus follows the physical device");
        assert_eq!(
            (cu.cuDeviceGetUuid_v2)(&mut uuid, 2),
            CUresult::CUDA_ERROR_INVALID_DEVICE
        );
    }
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn child_no_device() {
    if std::env::var_os(CHILD).is_none() {
        panic!("a child entry point: run by its parent, which sets its variables");
    }
    let cu = cu();
    let mut n = 0;
    // SAFETY: valid output pointer.
    unsafe {
        assert_eq!((cu.cuInit)(0), CUresult::CUDA_ERROR_NO_DEVICE);
        assert_eq!(
            (cu.cuInit)(0),
            CUresult::CUDA_ERROR_NO_DEVICE,
            "answered again"
        );
        assert_eq!(
            (cu.cuDeviceGetCount)(&mut n),
            CUresult::CUDA_ERROR_NOT_INITIALIZED
        );
    }
}
