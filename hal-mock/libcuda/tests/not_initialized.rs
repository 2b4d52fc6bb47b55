//! Before `cuInit`, every entry point but the error strings and the driver
//! version answers CUDA_ERROR_NOT_INITIALIZED. The only test of its binary,
//! so that nothing in this process has initialised the driver.

mod common;

use std::ffi::c_char;
use std::ptr::{null, null_mut};

use common::{cu, OK};
use cudarc::driver::sys::{CUipcEventHandle, CUipcMemHandle, CUresult};

fn host() -> cudarc::driver::sys::CUmemLocation {
    cudarc::driver::sys::CUmemLocation {
        type_: cudarc::driver::sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
        id: 0,
    }
}

#[test]
fn every_call_before_cu_init_is_not_initialized() {
    let cu = cu();
    const NI: CUresult = CUresult::CUDA_ERROR_NOT_INITIALIZED;
    let mut v = 0;
    let mut p: *const c_char = null();
    let h = null_mut();
    // SAFETY: valid output pointers or null; nothing is dereferenced before
    // the initialisation check.
    unsafe {
        assert_eq!((cu.cuDriverGetVersion)(&mut v), OK);
        assert_eq!(v, 12080);
        assert_eq!((cu.cuGetErrorName)(3, &mut p), OK);
        assert_eq!((cu.cuGetErrorString)(3, &mut p), OK);
        assert_eq!((cu.cuInit)(2), CUresult::CUDA_ERROR_INVALID_VALUE);
        let answers = [
            (cu.cuDeviceGetCount)(&mut v),
            (cu.cuDeviceGet)(&mut v, 0),
            (cu.cuDeviceGetName)(null_mut(), 0, 0),
            (cu.cuDeviceGetUuid)(null_mut(), 0),
            (cu.cuDeviceGetUuid_v2)(null_mut(), 0),
            (cu.cuDeviceTotalMem_v2)(null_mut(), 0),
            (cu.cuDeviceGetAttribute)(&mut v, 1, 0),
            (cu.cuDevicePrimaryCtxRetain)(null_mut(), 0),
            (cu.cuDevicePrimaryCtxRelease_v2)(0),
            (cu.cuCtxPushCurrent_v2)(h),
            (cu.cuCtxPopCurrent_v2)(null_mut()),
            (cu.cuCtxGetCurrent)(null_mut()),
            (cu.cuCtxSetCurrent)(h),
            (cu.cuCtxSynchronize)(),
            (cu.cuCtxEnablePeerAccess)(h, 0),
            (cu.cuDeviceCanAccessPeer)(&mut v, 0, 1),
            (cu.cuMemAlloc_v2)(null_mut(), 1),
            (cu.cuMemFree_v2)(0),
            (cu.cuMemAllocHost_v2)(null_mut(), 1),
            (cu.cuMemFreeHost)(null_mut()),
            (cu.cuMemAllocManaged)(null_mut(), 1, 1),
            (cu.cuMemGetAddressRange_v2)(null_mut(), null_mut(), 0),
            (cu.cuMemcpyHtoD_v2)(0, null(), 1),
            (cu.cuMemcpyDtoH_v2)(null_mut(), 0, 1),
            (cu.cuMemcpyDtoD_v2)(0, 0, 1),
            (cu.cuStreamCreate)(null_mut(), 0),
            (cu.cuStreamDestroy_v2)(h.cast()),
            (cu.cuStreamSynchronize)(h.cast()),
            (cu.cuStreamQuery)(h.cast()),
            (cu.cuMemcpyHtoDAsync_v2)(0, null(), 1, h.cast()),
            (cu.cuMemcpyDtoHAsync_v2)(null_mut(), 0, 1, h.cast()),
            (cu.cuMemsetD8Async)(0, 0, 1, h.cast()),
            (cu.cuEventCreate)(null_mut(), 0),
            (cu.cuEventDestroy_v2)(h.cast()),
            (cu.cuEventRecord)(h.cast(), h.cast()),
            (cu.cuEventQuery)(h.cast()),
            (cu.cuEventSynchronize)(h.cast()),
            (cu.cuEventElapsedTime)(null_mut(), h.cast(), h.cast()),
            (cu.cuStreamWaitEvent)(h.cast(), h.cast(), 0),
            (cu.cuMemcpyAsync)(0, 0, 1, h.cast()),
            (cu.cuLaunchHostFunc)(h.cast(), None, null_mut()),
            (cu.cuMemAdvise_v2)(0, 1, 1, host()),
            (cu.cuMemPrefetchAsync_v2)(0, 1, host(), 0, h.cast()),
            (cu.cuMemHostRegister_v2)(null_mut(), 1, 0),
            (cu.cuMemHostGetDevicePointer_v2)(null_mut(), null_mut(), 0),
            (cu.cuMemHostUnregister)(null_mut()),
            (cu.cuStreamWriteValue32_v2)(h.cast(), 0, 1, 0),
            (cu.cuStreamWaitValue32_v2)(h.cast(), 0, 1, 1),
            (cu.cuIpcGetMemHandle)(null_mut(), 0),
            (cu.cuIpcOpenMemHandle_v2)(null_mut(), CUipcMemHandle { reserved: [0; 64] }, 1),
            (cu.cuIpcCloseMemHandle)(0),
            (cu.cuIpcGetEventHandle)(null_mut(), h.cast()),
            (cu.cuIpcOpenEventHandle)(null_mut(), CUipcEventHandle { reserved: [0; 64] }),
            (cu.cuPointerGetAttribute)(null_mut(), 7, 0),
            (cu.cuMemGetAllocationGranularity)(null_mut(), null(), 0),
            (cu.cuMemCreate)(null_mut(), 1, null(), 0),
            (cu.cuMemRelease)(1),
            (cu.cuMemAddressReserve)(null_mut(), 1, 0, 0, 0),
            (cu.cuMemAddressFree)(0, 1),
            (cu.cuMemMap)(0, 1, 0, 1, 0),
            (cu.cuMemUnmap)(0, 1),
            (cu.cuMemSetAccess)(0, 1, null(), 1),
            (cu.cuMemExportToShareableHandle)(null_mut(), 1, 1, 0),
            (cu.cuMemImportFromShareableHandle)(null_mut(), null_mut(), 1),
        ];
        assert_eq!(
            answers.len() + 4,
            hal_mock_libcuda::EXPORTED.len(),
            "every entry point is asked"
        );
        for (i, r) in answers.iter().enumerate() {
            assert_eq!(*r, NI, "call {i}");
        }
        // The failed cuInit did not initialise; a good one does.
        assert_eq!((cu.cuInit)(0), OK);
        assert_eq!((cu.cuDeviceGetCount)(&mut v), OK);
    }
}
