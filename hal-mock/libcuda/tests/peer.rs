//! Peer access through the C ABI: which devices reach which, enabling it
//! once, and a machine without peer access (a child process with
//! `HAL_MOCK_LIBCUDA_NO_PEER_ACCESS=1`). Tests that run in parallel use
//! devices of their own.

mod common;

use common::{cu, init, Current, OK};
use cudarc::driver::sys::CUresult;

use CUresult::{
    CUDA_ERROR_INVALID_CONTEXT as INVALID_CONTEXT, CUDA_ERROR_INVALID_DEVICE as INVALID_DEVICE,
    CUDA_ERROR_INVALID_VALUE as INVALID_VALUE,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED as ALREADY_ENABLED,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED as UNSUPPORTED,
};

/// The variable that makes a run of this executable the child.
const CHILD_VAR: &str = "HAL_LIBCUDA_PEER_TEST_CHILD";

fn can(dev: i32, peer: i32) -> Result<i32, CUresult> {
    let mut answer = -1;
    // SAFETY: valid output pointer.
    match unsafe { (cu().cuDeviceCanAccessPeer)(&mut answer, dev, peer) } {
        OK => Ok(answer),
        e => Err(e),
    }
}

#[test]
fn distinct_devices_reach_each_other_and_a_device_not_itself() {
    init();
    assert_eq!(can(0, 1), Ok(1));
    assert_eq!(can(3, 0), Ok(1));
    assert_eq!(
        can(2, 2),
        Ok(0),
        "a device and itself (the driver's answer)"
    );
    assert_eq!(can(0, 9), Err(INVALID_DEVICE));
    // SAFETY: a null output pointer is refused, not written.
    let null = unsafe { (cu().cuDeviceCanAccessPeer)(std::ptr::null_mut(), 0, 1) };
    assert_eq!(null, INVALID_VALUE);
}

#[test]
fn peer_access_is_enabled_once() {
    let enable = |ctx, flags| {
        // SAFETY: plain call; the context handle is the library's.
        unsafe { (cu().cuCtxEnablePeerAccess)(ctx, flags) }
    };
    // Device 3's context stays retained (and under device 1's on the stack).
    let peer = Current::on(3);
    assert_eq!(enable(peer.ctx, 0), INVALID_DEVICE, "a context and itself");
    let _here = Current::on(1);
    assert_eq!(enable(peer.ctx, 1), INVALID_VALUE, "flags must be 0");
    assert_eq!(enable(peer.ctx, 0), OK);
    assert_eq!(enable(peer.ctx, 0), ALREADY_ENABLED, "a second enable");
    assert_eq!(
        enable(std::ptr::null_mut(), 0),
        INVALID_CONTEXT,
        "not a context"
    );
}

#[test]
fn a_machine_without_peer_access_says_so() {
    let out = hal_core::testing::child("child_without_peer_access")
        .env(CHILD_VAR, "1")
        .env(hal_mock_libcuda::NO_PEER_VAR, "1")
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("child done"),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The child of `a_machine_without_peer_access_says_so`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_without_peer_access() {
    if std::env::var(CHILD_VAR).is_err() {
        panic!("a child entry point: run by its parent, which sets its variables");
    }
    init();
    assert_eq!(can(0, 1), Ok(0));
    let peer = Current::on(1);
    let _here = Current::on(0);
    // SAFETY: plain call; the context handle is the library's.
    let status = unsafe { (cu().cuCtxEnablePeerAccess)(peer.ctx, 0) };
    assert_eq!(status, UNSUPPORTED);
    println!("child done");
}
