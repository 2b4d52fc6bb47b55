//! Peer access between devices: `cuDeviceCanAccessPeer` and
//! `cuCtxEnablePeerAccess`.
//!
//! Every pair of distinct devices of the simulator can reach each other,
//! as on an NVLink machine such as the measured H200 host. The variable
//! [`NO_PEER_VAR`](crate::NO_PEER_VAR) set to `1` makes the stand-in a machine without peer
//! access: `cuDeviceCanAccessPeer` answers 0, and enabling access, or
//! opening an IPC handle with `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS` onto a
//! device other than the memory's, is `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED`
//! (217).

use std::ffi::{c_int, c_uint};

use cudarc::driver::sys::{CUcontext, CUdevice, CUresult};
use hal_core::kit::vendor::{cuda, Code};

use crate::abi::{guard, non_null, put};
use crate::context::{current, ordinal_of};
use crate::error::sim;
use crate::state::driver;

/// True when the machine has peer access.
fn available() -> bool {
    crate::switches::peer_access()
}

/// The answer for device `dev` reaching device `peer`.
fn can_access(dev: u32, peer: u32) -> bool {
    dev != peer && available()
}

/// Whether device `dev` can access the memory of device `peer_dev`: 1 for
/// two distinct devices (0 for a device and itself, as the driver answers).
#[no_mangle]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(
    can_access_peer: *mut c_int,
    dev: CUdevice,
    peer_dev: CUdevice,
) -> CUresult {
    guard("cuDeviceCanAccessPeer", || {
        let d = driver()?;
        d.dev(dev)?;
        d.dev(peer_dev)?;
        non_null(can_access_peer)?;
        let answer = c_int::from(can_access(dev as u32, peer_dev as u32));
        // SAFETY: not null and valid for a write (the caller's contract).
        unsafe { put(can_access_peer, answer) }
    })
}

/// Lets the current context access the memory of `peer_context`'s device
/// (`flags` must be 0). A second enable is
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED` (704); a context and itself
/// is `CUDA_ERROR_INVALID_DEVICE` (101).
#[no_mangle]
pub unsafe extern "C" fn cuCtxEnablePeerAccess(peer_context: CUcontext, flags: c_uint) -> CUresult {
    guard("cuCtxEnablePeerAccess", || {
        let d = driver()?;
        let ordinal = current(d)?;
        let peer = ordinal_of(d, peer_context)?;
        if flags != 0 {
            return Err(cuda::INVALID_VALUE);
        }
        if peer == ordinal {
            return Err(cuda::INVALID_DEVICE);
        }
        refuse_without_peer(ordinal, peer)?;
        sim(d.devices[ordinal as usize].device.enable_peer_access(peer))
    })
}

/// `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED` when device `dev` cannot reach `peer`.
pub(crate) fn refuse_without_peer(dev: u32, peer: u32) -> Result<(), Code> {
    if dev != peer && !available() {
        return Err(cuda::PEER_ACCESS_UNSUPPORTED);
    }
    Ok(())
}
