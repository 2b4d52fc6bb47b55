//! Loading the built `libhal_mock_libcuda.so` and its entry points, as a
//! program that loads the driver does.
#![allow(dead_code, non_snake_case)]

use std::ffi::{c_char, c_int, c_uchar, c_uint, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUipcEventHandle, CUipcMemHandle, CUmemLocation,
    CUresult, CUstream, CUuuid,
};
use hal_mock_libcuda::{AccessDesc, AllocationProp};
use libloading::Library;

/// The shared library cargo built with this package's library target.
pub fn library_path() -> PathBuf {
    hal_mock_libcuda::built_library()
}

/// The library, loaded once for the process.
pub fn library() -> &'static Library {
    static LIB: OnceLock<Library> = OnceLock::new();
    LIB.get_or_init(|| {
        // SAFETY: the stand-in's initialisers do nothing but set up Rust statics.
        unsafe { Library::new(library_path()) }.expect("load the stand-in libcuda")
    })
}

macro_rules! entry_points {
    ($($name:ident: fn($($arg:ty),*);)*) => {
        /// The entry points, resolved by name.
        #[derive(Clone, Copy)]
        pub struct Cu {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> CUresult,)*
        }

        /// Resolve every entry point of [`Cu`].
        pub fn cu() -> &'static Cu {
            static CU: OnceLock<Cu> = OnceLock::new();
            CU.get_or_init(|| {
                let lib = library();
                Cu {
                    $($name: {
                        // SAFETY: the symbol is the stand-in's function of this signature.
                        let s = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> CUresult>(stringify!($name))
                        };
                        *s.unwrap_or_else(|e| panic!("{}: {e}", stringify!($name)))
                    },)*
                }
            })
        }
    };
}

entry_points! {
    cuGetErrorName: fn(c_uint, *mut *const c_char);
    cuGetErrorString: fn(c_uint, *mut *const c_char);
    cuInit: fn(c_uint);
    cuDriverGetVersion: fn(*mut c_int);
    cuDeviceGetCount: fn(*mut c_int);
    cuDeviceGet: fn(*mut CUdevice, c_int);
    cuDeviceGetName: fn(*mut c_char, c_int, CUdevice);
    cuDeviceGetUuid: fn(*mut CUuuid, CUdevice);
    cuDeviceGetUuid_v2: fn(*mut CUuuid, CUdevice);
    cuDeviceTotalMem_v2: fn(*mut usize, CUdevice);
    cuDeviceGetAttribute: fn(*mut c_int, c_int, CUdevice);
    cuDevicePrimaryCtxRetain: fn(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease_v2: fn(CUdevice);
    cuCtxPushCurrent_v2: fn(CUcontext);
    cuCtxPopCurrent_v2: fn(*mut CUcontext);
    cuCtxGetCurrent: fn(*mut CUcontext);
    cuCtxSetCurrent: fn(CUcontext);
    cuCtxSynchronize: fn();
    cuCtxEnablePeerAccess: fn(CUcontext, c_uint);
    cuDeviceCanAccessPeer: fn(*mut c_int, CUdevice, CUdevice);
    cuMemAlloc_v2: fn(*mut CUdeviceptr, usize);
    cuMemFree_v2: fn(CUdeviceptr);
    cuMemAllocHost_v2: fn(*mut *mut c_void, usize);
    cuMemFreeHost: fn(*mut c_void);
    cuMemAllocManaged: fn(*mut CUdeviceptr, usize, c_uint);
    cuMemGetAddressRange_v2: fn(*mut CUdeviceptr, *mut usize, CUdeviceptr);
    cuMemcpyHtoD_v2: fn(CUdeviceptr, *const c_void, usize);
    cuMemcpyDtoH_v2: fn(*mut c_void, CUdeviceptr, usize);
    cuMemcpyDtoD_v2: fn(CUdeviceptr, CUdeviceptr, usize);
    cuStreamCreate: fn(*mut CUstream, c_uint);
    cuStreamDestroy_v2: fn(CUstream);
    cuStreamSynchronize: fn(CUstream);
    cuStreamQuery: fn(CUstream);
    cuMemcpyHtoDAsync_v2: fn(CUdeviceptr, *const c_void, usize, CUstream);
    cuMemcpyDtoHAsync_v2: fn(*mut c_void, CUdeviceptr, usize, CUstream);
    cuMemsetD8Async: fn(CUdeviceptr, c_uchar, usize, CUstream);
    cuEventCreate: fn(*mut CUevent, c_uint);
    cuEventDestroy_v2: fn(CUevent);
    cuEventRecord: fn(CUevent, CUstream);
    cuEventQuery: fn(CUevent);
    cuEventSynchronize: fn(CUevent);
    cuEventElapsedTime: fn(*mut f32, CUevent, CUevent);
    cuStreamWaitEvent: fn(CUstream, CUevent, c_uint);
    cuMemcpyAsync: fn(CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuLaunchHostFunc: fn(CUstream, cudarc::driver::sys::CUhostFn, *mut c_void);
    cuMemAdvise_v2: fn(CUdeviceptr, usize, c_uint, CUmemLocation);
    cuMemPrefetchAsync_v2: fn(CUdeviceptr, usize, CUmemLocation, c_uint, CUstream);
    cuMemHostRegister_v2: fn(*mut c_void, usize, c_uint);
    cuMemHostGetDevicePointer_v2: fn(*mut CUdeviceptr, *mut c_void, c_uint);
    cuMemHostUnregister: fn(*mut c_void);
    cuStreamWriteValue32_v2: fn(CUstream, CUdeviceptr, c_uint, c_uint);
    cuStreamWaitValue32_v2: fn(CUstream, CUdeviceptr, c_uint, c_uint);
    cuIpcGetMemHandle: fn(*mut CUipcMemHandle, CUdeviceptr);
    cuIpcOpenMemHandle_v2: fn(*mut CUdeviceptr, CUipcMemHandle, c_uint);
    cuIpcCloseMemHandle: fn(CUdeviceptr);
    cuIpcGetEventHandle: fn(*mut CUipcEventHandle, CUevent);
    cuIpcOpenEventHandle: fn(*mut CUevent, CUipcEventHandle);
    cuPointerGetAttribute: fn(*mut c_void, c_int, CUdeviceptr);
    cuMemGetAllocationGranularity: fn(*mut usize, *const AllocationProp, c_uint);
    cuMemCreate: fn(*mut u64, usize, *const AllocationProp, u64);
    cuMemRelease: fn(u64);
    cuMemAddressReserve: fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, u64);
    cuMemAddressFree: fn(CUdeviceptr, usize);
    cuMemMap: fn(CUdeviceptr, usize, usize, u64, u64);
    cuMemUnmap: fn(CUdeviceptr, usize);
    cuMemSetAccess: fn(CUdeviceptr, usize, *const AccessDesc, usize);
    cuMemExportToShareableHandle: fn(*mut c_void, u64, c_uint, u64);
    cuMemImportFromShareableHandle: fn(*mut u64, *mut c_void, c_uint);
}

/// `CUDA_SUCCESS`.
pub const OK: CUresult = CUresult::CUDA_SUCCESS;

/// Initialise the driver (again: later calls answer what the first did).
pub fn init() -> &'static Cu {
    let cu = cu();
    // SAFETY: plain call with no pointers.
    assert_eq!(unsafe { (cu.cuInit)(0) }, OK);
    cu
}

/// Retain device `dev`'s primary context and push it on this thread;
/// [`Current::drop`] pops and releases it.
pub struct Current {
    pub dev: CUdevice,
    pub ctx: CUcontext,
}

impl Current {
    pub fn on(dev: CUdevice) -> Current {
        let cu = init();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: valid output pointer; the context handle is the library's.
        unsafe {
            assert_eq!((cu.cuDevicePrimaryCtxRetain)(&mut ctx, dev), OK);
            assert_eq!((cu.cuCtxPushCurrent_v2)(ctx), OK);
        }
        Current { dev, ctx }
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        let cu = cu();
        let mut popped = std::ptr::null_mut();
        // SAFETY: valid output pointer.
        let (pop, release) = unsafe {
            (
                (cu.cuCtxPopCurrent_v2)(&mut popped),
                (cu.cuDevicePrimaryCtxRelease_v2)(self.dev),
            )
        };
        if !std::thread::panicking() {
            assert_eq!((pop, release), (OK, OK));
            assert_eq!(popped, self.ctx);
        }
    }
}

/// The permissions (`r`, `w`, `x`, `p`/`s`: as `/proc/self/maps` prints
/// them) of the mapping holding `addr`, or `None` when nothing is mapped there.
pub fn protection(addr: u64) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    maps.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (range, perms) = (f.next()?, f.next()?);
        let (lo, hi) = range.split_once('-')?;
        let (lo, hi) = (
            u64::from_str_radix(lo, 16).ok()?,
            u64::from_str_radix(hi, 16).ok()?,
        );
        (lo..hi).contains(&addr).then(|| perms.to_string())
    })
}
