//! The typed layer over the entry points of `sys.rs`, grouped by concept:
//! each function fetches its entry point, makes the one call and turns the
//! `CUresult` into hal's error, named with the entry point's versioned
//! symbol. A result other than success becomes a [`VendorError`] with the
//! code's number and its name as the driver gives it (`cuGetErrorName`), or
//! as `hal_core::vendor::cuda` knows it when the driver has no name for it.
//!
//! The functions are safe where the call's arguments are values the driver
//! checks (handles, device addresses, sizes) and places or buffers that
//! live for the call. A call that keeps a host address beyond its return
//! (queued work that reads or writes host memory later) is an `unsafe fn`
//! whose `# Safety` says what its caller keeps alive.

use std::ffi::{c_char, CStr};

use hal_core::vendor::cuda;
use hal_core::{Error, Result, VendorError};

use super::sys::{Driver, Entry, Status};

/// `CUDA_SUCCESS`.
pub(crate) const SUCCESS: Status = 0;
/// `CUDA_ERROR_NOT_READY`: queued work has not completed.
pub(crate) const NOT_READY: Status = 600;

impl Driver {
    /// `Ok` for success, the vendor error of `status` otherwise; `call`
    /// names the entry point for the message.
    pub(crate) fn check(&self, call: &str, status: Status) -> Result<()> {
        if status == SUCCESS {
            return Ok(());
        }
        Err(self.error(call, status))
    }

    /// The vendor error of a failed `call`.
    pub(crate) fn error(&self, call: &str, status: Status) -> Error {
        let known = cuda::code(i64::from(status));
        let name = self
            .describe(status, Driver::get_error_name)
            .or_else(|| known.map(|c| c.name.to_string()))
            .unwrap_or_else(|| format!("CUresult {status}"));
        let text = self
            .describe(status, Driver::get_error_string)
            .unwrap_or_else(|| "no description from the driver".into());
        Error::Vendor(VendorError {
            backend: "cuda".into(),
            code: i64::from(status),
            name,
            message: format!("{call}: {text}"),
        })
    }

    /// What `lookup` (`cuGetErrorName` or `cuGetErrorString`) says of `status`.
    fn describe(
        &self,
        status: Status,
        lookup: fn(
            &Driver,
        )
            -> Result<Entry<unsafe extern "C" fn(Status, *mut *const c_char) -> Status>>,
    ) -> Option<String> {
        let e = lookup(self).ok()?;
        let mut out: *const c_char = std::ptr::null();
        // SAFETY: `out` is a valid place for the driver to store a pointer.
        if unsafe { (e.f)(status, &mut out) } != SUCCESS || out.is_null() {
            return None;
        }
        // SAFETY: on success the driver stored a pointer to a static,
        // NUL-terminated string.
        Some(
            unsafe { CStr::from_ptr(out) }
                .to_string_lossy()
                .into_owned(),
        )
    }

    /// `Ok` when `status` of the call of `e` is success.
    fn ok<F>(&self, e: &Entry<F>, status: Status) -> Result<()> {
        self.check(e.name, status)
    }

    /// True for success, false for `CUDA_ERROR_NOT_READY`, the vendor
    /// error otherwise (a query).
    fn ready<F>(&self, e: &Entry<F>, status: Status) -> Result<bool> {
        match status {
            SUCCESS => Ok(true),
            NOT_READY => Ok(false),
            other => Err(self.error(e.name, other)),
        }
    }
}

/// `cuInit(0)`.
pub(crate) fn init(driver: &Driver) -> Result<()> {
    let e = driver.init()?;
    // SAFETY: cuInit takes flags 0 and has no other precondition.
    driver.ok(&e, unsafe { (e.f)(0) })
}

/// Devices: their number, handles, names and attributes.
pub(crate) mod device {
    use std::ffi::{c_char, c_int, CStr};

    use hal_core::Result;

    use crate::ffi::sys::{CUdevice, CUuuid, Driver};

    /// The number of devices the driver sees (`cuDeviceGetCount`).
    pub(crate) fn count(driver: &Driver) -> Result<u32> {
        let e = driver.device_get_count()?;
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid place for the count.
        driver.ok(&e, unsafe { (e.f)(&mut n) })?;
        Ok(u32::try_from(n).unwrap_or(0))
    }

    /// The handle of device `ordinal` (`cuDeviceGet`).
    pub(crate) fn get(driver: &Driver, ordinal: u32) -> Result<CUdevice> {
        let e = driver.device_get()?;
        let mut dev: CUdevice = 0;
        // SAFETY: `dev` is a valid place; the ordinal is passed by value
        // and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(&mut dev, ordinal as c_int) })?;
        Ok(dev)
    }

    /// The device's name (`cuDeviceGetName`, at most 255 bytes).
    pub(crate) fn name(driver: &Driver, dev: CUdevice) -> Result<String> {
        let mut name = [0 as c_char; 256];
        let e = driver.device_get_name()?;
        // SAFETY: `name` holds 256 bytes, the length passed.
        driver.ok(&e, unsafe {
            (e.f)(name.as_mut_ptr(), name.len() as c_int, dev)
        })?;
        name[255] = 0;
        // SAFETY: the buffer ends with a NUL (set just above), so the string
        // the driver wrote is terminated.
        Ok(unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// The device's UUID (`cuDeviceGetUuid_v2`).
    pub(crate) fn uuid(driver: &Driver, dev: CUdevice) -> Result<[u8; 16]> {
        let mut uuid = CUuuid { bytes: [0; 16] };
        let e = driver.device_get_uuid()?;
        // SAFETY: `uuid` is a valid place for 16 bytes.
        driver.ok(&e, unsafe { (e.f)(&mut uuid, dev) })?;
        Ok(uuid.bytes.map(|b| b as u8))
    }

    /// The device's memory in bytes (`cuDeviceTotalMem_v2`).
    pub(crate) fn total_mem(driver: &Driver, dev: CUdevice) -> Result<usize> {
        let mut total: usize = 0;
        let e = driver.device_total_mem()?;
        // SAFETY: `total` is a valid place.
        driver.ok(&e, unsafe { (e.f)(&mut total, dev) })?;
        Ok(total)
    }

    /// The attribute numbered `attr` of `dev` (`cuDeviceGetAttribute`):
    /// also numbers newer than the headers' enum
    /// (`hal_core::vendor::cuda::ATTRIBUTE_*`).
    pub(crate) fn attribute(driver: &Driver, dev: CUdevice, attr: c_int) -> Result<i32> {
        let e = driver.device_get_attribute()?;
        let mut v: c_int = 0;
        // SAFETY: `v` is a valid place; the attribute is passed as its number
        // (the enum's ABI), and the driver answers any number.
        driver.ok(&e, unsafe { (e.f)(&mut v, attr, dev) })?;
        Ok(v)
    }

    /// True when device `dev` can access the memory of device `peer`
    /// (`cuDeviceCanAccessPeer`).
    pub(crate) fn can_access_peer(driver: &Driver, dev: CUdevice, peer: CUdevice) -> Result<bool> {
        let e = driver.device_can_access_peer()?;
        let mut answer: c_int = 0;
        // SAFETY: `answer` is a valid place; both devices are passed by
        // value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(&mut answer, dev, peer) })?;
        Ok(answer != 0)
    }
}

/// Contexts: the primary context, the calling thread's current one.
pub(crate) mod ctx {
    use hal_core::Result;

    use crate::ffi::sys::{CUcontext, CUdevice, Context, Driver};

    /// The address of the library's `cuDevicePrimaryCtxRetain`: one per
    /// loaded library.
    pub(crate) fn library_key(driver: &Driver) -> Result<usize> {
        Ok(driver.primary_ctx_retain()?.f as usize)
    }

    /// Retain the primary context of `dev` (`cuDevicePrimaryCtxRetain`).
    pub(crate) fn retain_primary(driver: &Driver, dev: CUdevice) -> Result<Context> {
        let e = driver.primary_ctx_retain()?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid place for the handle; `dev` is passed by
        // value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(&mut ctx, dev) })?;
        Ok(Context(ctx))
    }

    /// Release the primary context of `dev` (`cuDevicePrimaryCtxRelease_v2`).
    pub(crate) fn release_primary(driver: &Driver, dev: CUdevice) -> Result<()> {
        let e = driver.primary_ctx_release()?;
        // SAFETY: the device is passed by value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(dev) })
    }

    /// Push `ctx` on the calling thread (`cuCtxPushCurrent_v2`). The pop's
    /// entry point is resolved first, so that a push is never made that
    /// [`pop`] cannot undo.
    pub(crate) fn push(driver: &Driver, ctx: Context) -> Result<()> {
        let e = driver.ctx_push_current()?;
        driver.ctx_pop_current()?;
        // SAFETY: the handle is passed by value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(ctx.0) })
    }

    /// Pop the calling thread's current context (`cuCtxPopCurrent_v2`).
    pub(crate) fn pop(driver: &Driver) -> Result<()> {
        let e = driver.ctx_pop_current()?;
        let mut popped: CUcontext = std::ptr::null_mut();
        // SAFETY: `popped` is a valid place for the handle.
        driver.ok(&e, unsafe { (e.f)(&mut popped) })
    }

    /// The calling thread's current context, if any (`cuCtxGetCurrent`).
    pub(crate) fn current(driver: &Driver) -> Result<Option<u64>> {
        let e = driver.ctx_get_current()?;
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid place for the handle.
        driver.ok(&e, unsafe { (e.f)(&mut ctx) })?;
        Ok((!ctx.is_null()).then_some(ctx as u64))
    }

    /// Wait for all the current context's work (`cuCtxSynchronize`).
    pub(crate) fn synchronize(driver: &Driver) -> Result<()> {
        let e = driver.ctx_synchronize()?;
        // SAFETY: no argument; the driver answers an error without a
        // current context.
        driver.ok(&e, unsafe { (e.f)() })
    }

    /// `Ok` when the driver has `cuCtxSynchronize` (asked as a call would):
    /// a caller that must prepare the call checks first.
    pub(crate) fn has_synchronize(driver: &Driver) -> Result<()> {
        driver.ctx_synchronize().map(|_| ())
    }

    /// True when the driver has `cuDevicePrimaryCtxRelease_v2` (asked as a
    /// call would).
    pub(crate) fn has_release_primary(driver: &Driver) -> bool {
        driver.primary_ctx_release().is_ok()
    }

    /// `Ok` when the driver has `cuCtxEnablePeerAccess` (asked as a call
    /// would, so it counts as asked for).
    pub(crate) fn has_enable_peer_access(driver: &Driver) -> Result<()> {
        driver.ctx_enable_peer_access().map(|_| ())
    }

    /// Let the current context access the memory of `peer`
    /// (`cuCtxEnablePeerAccess`, flags 0).
    pub(crate) fn enable_peer_access(driver: &Driver, peer: Context) -> Result<()> {
        let e = driver.ctx_enable_peer_access()?;
        // SAFETY: the handle is passed by value and checked by the driver;
        // flags are 0.
        driver.ok(&e, unsafe { (e.f)(peer.0, 0) })
    }
}

/// Memory: allocation, copies, pointer queries, managed memory, host
/// registration.
pub(crate) mod mem {
    use std::ffi::{c_int, c_uint, c_void};

    use hal_core::os::HostRange;
    use hal_core::Result;

    use crate::ffi::sys::{CUdeviceptr, CUmemLocation, Driver, Stream};

    /// `size` bytes of device memory (`cuMemAlloc_v2`).
    pub(crate) fn alloc(driver: &Driver, size: usize) -> Result<CUdeviceptr> {
        let e = driver.mem_alloc()?;
        let mut p: CUdeviceptr = 0;
        // SAFETY: `p` is a valid place; the size is passed by value.
        driver.ok(&e, unsafe { (e.f)(&mut p, size) })?;
        Ok(p)
    }

    /// `size` bytes of pinned host memory (`cuMemAllocHost_v2`), at the
    /// address that is both the host's and the device's.
    pub(crate) fn alloc_host(driver: &Driver, size: usize) -> Result<CUdeviceptr> {
        let e = driver.mem_alloc_host()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid place; the size is passed by value.
        driver.ok(&e, unsafe { (e.f)(&mut p, size) })?;
        Ok(p as CUdeviceptr)
    }

    /// `size` bytes of managed memory (`cuMemAllocManaged`).
    pub(crate) fn alloc_managed(
        driver: &Driver,
        size: usize,
        flags: c_uint,
    ) -> Result<CUdeviceptr> {
        let e = driver.mem_alloc_managed()?;
        let mut p: CUdeviceptr = 0;
        // SAFETY: `p` is a valid place; size and flags are passed by value.
        driver.ok(&e, unsafe { (e.f)(&mut p, size, flags) })?;
        Ok(p)
    }

    /// Free device or managed memory (`cuMemFree_v2`).
    pub(crate) fn free(driver: &Driver, ptr: CUdeviceptr) -> Result<()> {
        let e = driver.mem_free()?;
        // SAFETY: the address is passed by value; the driver checks that it
        // is an allocation of its own.
        driver.ok(&e, unsafe { (e.f)(ptr) })
    }

    /// Free pinned host memory (`cuMemFreeHost`).
    pub(crate) fn free_host(driver: &Driver, ptr: CUdeviceptr) -> Result<()> {
        let e = driver.mem_free_host()?;
        // SAFETY: the address is passed by value and never dereferenced
        // here; the driver checks that it is memory of cuMemAllocHost.
        driver.ok(&e, unsafe { (e.f)(ptr as *mut c_void) })
    }

    /// Copy `src` to the device address `dst` (`cuMemcpyHtoD_v2`).
    pub(crate) fn copy_to_device(driver: &Driver, dst: CUdeviceptr, src: &[u8]) -> Result<()> {
        let e = driver.memcpy_htod()?;
        // SAFETY: `src` is a host buffer of `src.len()` bytes, borrowed for
        // the whole call, which is synchronous for it; `dst` is passed by
        // value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(dst, src.as_ptr().cast(), src.len()) })
    }

    /// Copy `dst.len()` bytes at the device address `src` into `dst`
    /// (`cuMemcpyDtoH_v2`).
    pub(crate) fn copy_from_device(
        driver: &Driver,
        dst: &mut [u8],
        src: CUdeviceptr,
    ) -> Result<()> {
        let e = driver.memcpy_dtoh()?;
        // SAFETY: `dst` is a host buffer of `dst.len()` bytes, borrowed
        // mutably for the whole (synchronous) call; `src` is passed by value
        // and checked by the driver.
        driver.ok(&e, unsafe {
            (e.f)(dst.as_mut_ptr().cast(), src, dst.len())
        })
    }

    /// Queue on `stream` a copy of `len` bytes from `src` to `dst`, either
    /// side host or device memory (`cuMemcpyAsync`, unified addressing).
    ///
    /// # Safety
    ///
    /// Both ranges are memory the device reaches, and stay so (host memory
    /// mapped and registered or pinned) until the stream ran the copy.
    pub(crate) unsafe fn copy_async(
        driver: &Driver,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        len: usize,
        stream: Stream,
    ) -> Result<()> {
        let e = driver.memcpy_async()?;
        // SAFETY: the caller keeps both ranges reachable until the stream
        // ran the copy.
        driver.ok(&e, unsafe { (e.f)(dst, src, len, stream.0) })
    }

    /// Queue on `stream` a copy of `len` bytes from the host address `src`
    /// to the device address `dst` (`cuMemcpyHtoDAsync_v2`).
    ///
    /// # Safety
    ///
    /// `src..src + len` is host memory that stays allocated and unwritten
    /// until the stream ran the copy; `dst..dst + len` is memory the device
    /// reaches until then.
    pub(crate) unsafe fn copy_to_device_async(
        driver: &Driver,
        dst: CUdeviceptr,
        src: *const u8,
        len: usize,
        stream: Stream,
    ) -> Result<()> {
        let e = driver.memcpy_htod_async()?;
        // SAFETY: the caller keeps the source and destination alive until
        // the stream ran the copy.
        driver.ok(&e, unsafe { (e.f)(dst, src.cast(), len, stream.0) })
    }

    /// Queue on `stream` a fill of `len` bytes at `dst` with `value`
    /// (`cuMemsetD8Async`).
    ///
    /// # Safety
    ///
    /// `dst..dst + len` is memory the device reaches, and stays so until
    /// the stream ran the fill.
    pub(crate) unsafe fn set_async(
        driver: &Driver,
        dst: CUdeviceptr,
        value: u8,
        len: usize,
        stream: Stream,
    ) -> Result<()> {
        let e = driver.memset_d8_async()?;
        // SAFETY: the caller keeps the range reachable until the stream ran
        // the fill.
        driver.ok(&e, unsafe { (e.f)(dst, value, len, stream.0) })
    }

    /// The first byte and size of the allocation holding `ptr`
    /// (`cuMemGetAddressRange_v2`; the context current).
    pub(crate) fn address_range(driver: &Driver, ptr: CUdeviceptr) -> Result<(CUdeviceptr, u64)> {
        let e = driver.mem_get_address_range()?;
        let mut base: CUdeviceptr = 0;
        let mut size: usize = 0;
        // SAFETY: both outputs are valid places; the driver checks `ptr`.
        driver.ok(&e, unsafe { (e.f)(&mut base, &mut size, ptr) })?;
        Ok((base, size as u64))
    }

    /// A 4-byte attribute (an `int`, a `CUmemorytype` or a flag) of the
    /// memory at `ptr` (`cuPointerGetAttribute`; the context current).
    pub(crate) fn attribute_u32(driver: &Driver, attr: c_int, ptr: CUdeviceptr) -> Result<u32> {
        let e = driver.pointer_get_attribute()?;
        // Zeroed 4 bytes: a driver that writes a one-byte flag leaves the rest 0.
        let mut value: u32 = 0;
        // SAFETY: `value` is a valid place for the 4-byte attributes this
        // is asked for (`int`, `CUmemorytype`, and flags, at most 4 bytes).
        driver.ok(&e, unsafe {
            (e.f)((&raw mut value).cast::<c_void>(), attr, ptr)
        })?;
        Ok(value)
    }

    /// An 8-byte attribute (an `unsigned long long`, the buffer id) of the
    /// memory at `ptr` (`cuPointerGetAttribute`; the context current).
    pub(crate) fn attribute_u64(driver: &Driver, attr: c_int, ptr: CUdeviceptr) -> Result<u64> {
        let e = driver.pointer_get_attribute()?;
        let mut value: u64 = 0;
        // SAFETY: the attribute's value is an `unsigned long long`, and
        // `value` is a valid place for one.
        driver.ok(&e, unsafe {
            (e.f)((&raw mut value).cast::<c_void>(), attr, ptr)
        })?;
        Ok(value)
    }

    /// Advise the driver on the managed range `ptr..ptr + len`
    /// (`cuMemAdvise_v2`).
    pub(crate) fn advise(
        driver: &Driver,
        ptr: CUdeviceptr,
        len: usize,
        advice: c_uint,
        at: CUmemLocation,
    ) -> Result<()> {
        let e = driver.mem_advise()?;
        // SAFETY: every argument is passed by value and checked by the
        // driver; advice moves no bytes.
        driver.ok(&e, unsafe { (e.f)(ptr, len, advice, at) })
    }

    /// Queue on `stream` the migration of the managed range
    /// `ptr..ptr + len` to `to` (`cuMemPrefetchAsync_v2`, flags 0).
    pub(crate) fn prefetch(
        driver: &Driver,
        ptr: CUdeviceptr,
        len: usize,
        to: CUmemLocation,
        stream: Stream,
    ) -> Result<()> {
        let e = driver.mem_prefetch_async()?;
        // SAFETY: every argument is passed by value and checked by the
        // driver; a migration moves pages, not their contents.
        driver.ok(&e, unsafe { (e.f)(ptr, len, to, 0, stream.0) })
    }

    /// Register `range` with the current context (`cuMemHostRegister_v2`).
    pub(crate) fn host_register(driver: &Driver, range: &HostRange, flags: c_uint) -> Result<()> {
        let e = driver.mem_host_register()?;
        // SAFETY: the range is mapped and page-aligned, and stays mapped as
        // long as `range` lives (`HostRange`'s contract).
        driver.ok(&e, unsafe {
            (e.f)(range.ptr().cast(), range.len() as usize, flags)
        })
    }

    /// The device's address of the registered host address `at`
    /// (`cuMemHostGetDevicePointer_v2`).
    pub(crate) fn host_device_pointer(driver: &Driver, at: u64) -> Result<CUdeviceptr> {
        let e = driver.mem_host_get_device_pointer()?;
        let mut dptr: CUdeviceptr = 0;
        // SAFETY: `dptr` is a valid place; the host address is passed by
        // value and only looked up among the registrations; flags 0.
        driver.ok(&e, unsafe {
            (e.f)(&mut dptr, at as usize as *mut c_void, 0)
        })?;
        Ok(dptr)
    }

    /// End the registration at the host address `at` (`cuMemHostUnregister`).
    pub(crate) fn host_unregister(driver: &Driver, at: u64) -> Result<()> {
        let e = driver.mem_host_unregister()?;
        // SAFETY: the host address is passed by value and only looked up
        // among the registrations, never dereferenced.
        driver.ok(&e, unsafe { (e.f)(at as usize as *mut c_void) })
    }

    /// `Ok` when the driver has `cuMemHostUnregister` (asked as a call
    /// would): a registration is made only when it can be ended.
    pub(crate) fn has_host_unregister(driver: &Driver) -> Result<()> {
        driver.mem_host_unregister().map(|_| ())
    }

    /// As [`has_host_unregister`], for `cuMemHostGetDevicePointer_v2`.
    pub(crate) fn has_host_device_pointer(driver: &Driver) -> Result<()> {
        driver.mem_host_get_device_pointer().map(|_| ())
    }
}

/// Legacy IPC of memory and events: 64-byte handles.
pub(crate) mod ipc {
    use std::ffi::c_uint;

    use hal_core::Result;

    use crate::ffi::sys::{CUdeviceptr, CUevent, CUipcEventHandle, CUipcMemHandle, Driver, Event};

    /// The 64 bytes of the allocation whose base is `base`
    /// (`cuIpcGetMemHandle`).
    pub(crate) fn get_mem_handle(driver: &Driver, base: CUdeviceptr) -> Result<[u8; 64]> {
        let e = driver.ipc_get_mem_handle()?;
        let mut raw = CUipcMemHandle { reserved: [0; 64] };
        // SAFETY: `raw` is a valid place for 64 bytes; the address is passed
        // by value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(&mut raw, base) })?;
        Ok(raw.reserved.map(|b| b as u8))
    }

    /// Open the 64 bytes of another process's allocation in the current
    /// context (`cuIpcOpenMemHandle_v2`): its base here.
    pub(crate) fn open_mem_handle(
        driver: &Driver,
        ipc: &[u8; 64],
        flags: c_uint,
    ) -> Result<CUdeviceptr> {
        let e = driver.ipc_open_mem_handle()?;
        let raw = CUipcMemHandle {
            reserved: ipc.map(|b| b as _),
        };
        let mut base: CUdeviceptr = 0;
        // SAFETY: `base` is a valid place; the handle is passed by value.
        driver.ok(&e, unsafe { (e.f)(&mut base, raw, flags) })?;
        Ok(base)
    }

    /// Close an open of [`open_mem_handle`] (`cuIpcCloseMemHandle`).
    pub(crate) fn close_mem_handle(driver: &Driver, base: CUdeviceptr) -> Result<()> {
        let e = driver.ipc_close_mem_handle()?;
        // SAFETY: the address is passed by value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(base) })
    }

    /// The 64 bytes of an interprocess event (`cuIpcGetEventHandle`).
    pub(crate) fn get_event_handle(driver: &Driver, event: Event) -> Result<[u8; 64]> {
        let e = driver.ipc_get_event_handle()?;
        let mut raw = CUipcEventHandle { reserved: [0; 64] };
        // SAFETY: `raw` is a valid place for 64 bytes; the event is passed
        // by value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(&mut raw, event.0) })?;
        Ok(raw.reserved.map(|b| b as u8))
    }

    /// Open another process's event by its 64 bytes (`cuIpcOpenEventHandle`).
    pub(crate) fn open_event_handle(driver: &Driver, ipc: &[u8; 64]) -> Result<Event> {
        let e = driver.ipc_open_event_handle()?;
        let mut raw: CUevent = std::ptr::null_mut();
        let handle = CUipcEventHandle {
            reserved: ipc.map(|b| b as _),
        };
        // SAFETY: `raw` is a valid place; the handle is passed by value.
        driver.ok(&e, unsafe { (e.f)(&mut raw, handle) })?;
        Ok(Event(raw))
    }
}

/// Streams: creation, queries, waits, stream memory operations and host
/// functions.
pub(crate) mod stream {
    use std::ffi::{c_uint, c_void};

    use hal_core::Result;

    use crate::ffi::sys::{CUdeviceptr, CUstream, Driver, Event, HostFn, Stream};

    /// A new stream of the current context (`cuStreamCreate`).
    pub(crate) fn create(driver: &Driver, flags: c_uint) -> Result<Stream> {
        let e = driver.stream_create()?;
        let mut raw: CUstream = std::ptr::null_mut();
        // SAFETY: `raw` is a valid place; the flags are passed by value.
        driver.ok(&e, unsafe { (e.f)(&mut raw, flags) })?;
        Ok(Stream(raw))
    }

    /// Destroy a stream (`cuStreamDestroy_v2`).
    pub(crate) fn destroy(driver: &Driver, stream: Stream) -> Result<()> {
        let e = driver.stream_destroy()?;
        // SAFETY: the handle is passed by value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(stream.0) })
    }

    /// True when the stream ran everything queued (`cuStreamQuery`).
    pub(crate) fn query(driver: &Driver, stream: Stream) -> Result<bool> {
        let e = driver.stream_query()?;
        // SAFETY: the handle is passed by value and checked by the driver.
        driver.ready(&e, unsafe { (e.f)(stream.0) })
    }

    /// Wait on the host until the stream ran everything queued
    /// (`cuStreamSynchronize`).
    pub(crate) fn synchronize(driver: &Driver, stream: Stream) -> Result<()> {
        let e = driver.stream_synchronize()?;
        // SAFETY: the handle is passed by value and checked by the driver
        // (null: the current context's legacy stream).
        driver.ok(&e, unsafe { (e.f)(stream.0) })
    }

    /// Queue on `stream` a wait for `event` (`cuStreamWaitEvent`, flags 0).
    pub(crate) fn wait_event(driver: &Driver, stream: Stream, event: Event) -> Result<()> {
        let e = driver.stream_wait_event()?;
        // SAFETY: both handles are passed by value and checked by the
        // driver; flags 0.
        driver.ok(&e, unsafe { (e.f)(stream.0, event.0, 0) })
    }

    /// `Ok` when the driver has `cuStreamWaitValue32_v2` and
    /// `cuStreamWriteValue32_v2` (asked as calls would, in that order): a
    /// caller that queues both checks before it queues either.
    pub(crate) fn has_value32_ops(driver: &Driver) -> Result<()> {
        driver.stream_wait_value32()?;
        driver.stream_write_value32().map(|_| ())
    }

    /// Queue on `stream` a write of `value` to the 4-byte word at the
    /// device address `addr` (`cuStreamWriteValue32_v2`).
    ///
    /// # Safety
    ///
    /// `addr` is the device's address of a 4-byte aligned word of memory
    /// that stays allocated and reachable by the device until the stream
    /// ran the write (for host memory: registered, and not freed before it
    /// is unregistered).
    pub(crate) unsafe fn write_value32(
        driver: &Driver,
        stream: Stream,
        addr: CUdeviceptr,
        value: u32,
        flags: c_uint,
    ) -> Result<()> {
        let e = driver.stream_write_value32()?;
        // SAFETY: the caller keeps the word alive until the stream wrote it.
        driver.ok(&e, unsafe { (e.f)(stream.0, addr, value, flags) })
    }

    /// Queue on `stream` a wait until the 4-byte word at the device address
    /// `addr` compares to `value` as `flags` says (`cuStreamWaitValue32_v2`).
    ///
    /// # Safety
    ///
    /// As [`write_value32`]: the word stays alive until the stream passed
    /// the wait.
    pub(crate) unsafe fn wait_value32(
        driver: &Driver,
        stream: Stream,
        addr: CUdeviceptr,
        value: u32,
        flags: c_uint,
    ) -> Result<()> {
        let e = driver.stream_wait_value32()?;
        // SAFETY: the caller keeps the word alive until the stream passed.
        driver.ok(&e, unsafe { (e.f)(stream.0, addr, value, flags) })
    }

    /// Queue on `stream` a call of `f(data)` on a driver thread
    /// (`cuLaunchHostFunc`).
    ///
    /// # Safety
    ///
    /// `f` may be called with `data` once, on another thread, at any time
    /// until the stream ran it: `data` must be valid for that call.
    pub(crate) unsafe fn launch_host_func(
        driver: &Driver,
        stream: Stream,
        f: HostFn,
        data: *mut c_void,
    ) -> Result<()> {
        let e = driver.launch_host_func()?;
        // SAFETY: the caller makes `data` valid for the one call of `f`.
        driver.ok(&e, unsafe { (e.f)(stream.0, f, data) })
    }
}

/// Events: creation, record, query.
pub(crate) mod event {
    use std::ffi::c_uint;

    use hal_core::Result;

    use crate::ffi::sys::{CUevent, Driver, Event, Stream};

    /// A new event of the current context (`cuEventCreate`).
    pub(crate) fn create(driver: &Driver, flags: c_uint) -> Result<Event> {
        let e = driver.event_create()?;
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: `raw` is a valid place; the flags are passed by value.
        driver.ok(&e, unsafe { (e.f)(&mut raw, flags) })?;
        Ok(Event(raw))
    }

    /// Destroy an event (`cuEventDestroy_v2`).
    pub(crate) fn destroy(driver: &Driver, event: Event) -> Result<()> {
        let e = driver.event_destroy()?;
        // SAFETY: the handle is passed by value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(event.0) })
    }

    /// Record `event` on `stream` (`cuEventRecord`).
    pub(crate) fn record(driver: &Driver, event: Event, stream: Stream) -> Result<()> {
        let e = driver.event_record()?;
        // SAFETY: both handles are passed by value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(event.0, stream.0) })
    }

    /// True when the work before the event's record ran (`cuEventQuery`).
    pub(crate) fn query(driver: &Driver, event: Event) -> Result<bool> {
        let e = driver.event_query()?;
        // SAFETY: the handle is passed by value and checked by the driver.
        driver.ready(&e, unsafe { (e.f)(event.0) })
    }
}

/// VMM: physical allocations, reservations, mappings, access, sharing by
/// descriptor.
pub(crate) mod vmm {
    use std::ffi::{c_uint, c_void};
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

    use cudarc::driver::sys::{CUmemAllocationHandleType, CUmemAllocationType};
    use hal_core::{Error, Result};

    use crate::ffi::sys::{
        CUdeviceptr, CUmemAccessDesc, CUmemAllocationProp, CUmemGenericAllocationHandle,
        CUmemLocation, Driver,
    };

    /// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
    pub(crate) const HANDLE_POSIX_FD: c_uint = 1;
    /// `CU_MEM_HANDLE_TYPE_FABRIC`.
    pub(crate) const HANDLE_FABRIC: c_uint = 8;

    /// The properties of pinned memory at `location`, shareable as
    /// `handle_types` says.
    pub(crate) fn prop(location: CUmemLocation, handle_types: c_uint) -> CUmemAllocationProp {
        // SAFETY: CUmemAllocationProp is plain C data (integers, a pointer and
        // bytes); all zeroes is its documented default.
        let mut p: CUmemAllocationProp = unsafe { std::mem::zeroed() };
        p.type_ = CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        p.requestedHandleTypes = CUmemAllocationHandleType(handle_types);
        p.location = location;
        p
    }

    /// The minimum (or, with `recommended`, the recommended) granularity of
    /// memory of `prop` (`cuMemGetAllocationGranularity`).
    pub(crate) fn granularity(
        driver: &Driver,
        prop: &CUmemAllocationProp,
        recommended: bool,
    ) -> Result<usize> {
        let e = driver.mem_get_allocation_granularity()?;
        let mut g: usize = 0;
        // SAFETY: `g` is a valid place; `prop` is a filled-in property
        // structure borrowed for the call; the option is
        // CU_MEM_ALLOC_GRANULARITY_MINIMUM (0) or _RECOMMENDED (1).
        driver.ok(&e, unsafe {
            (e.f)(&mut g, prop, c_uint::from(recommended))
        })?;
        Ok(g)
    }

    /// `size` bytes of physical memory of `prop` (`cuMemCreate`, flags 0).
    pub(crate) fn create(
        driver: &Driver,
        size: usize,
        prop: &CUmemAllocationProp,
    ) -> Result<CUmemGenericAllocationHandle> {
        let e = driver.mem_create()?;
        let mut handle: CUmemGenericAllocationHandle = 0;
        // SAFETY: `handle` is a valid place; `prop` is a filled-in property
        // structure borrowed for the call; flags 0.
        driver.ok(&e, unsafe { (e.f)(&mut handle, size, prop, 0) })?;
        Ok(handle)
    }

    /// Release a physical allocation's handle (`cuMemRelease`).
    pub(crate) fn release(driver: &Driver, handle: CUmemGenericAllocationHandle) -> Result<()> {
        let e = driver.mem_release()?;
        // SAFETY: the handle is passed by value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(handle) })
    }

    /// Reserve `size` bytes of address space aligned to `align` (0: the
    /// driver's choice) anywhere (`cuMemAddressReserve`, flags 0).
    pub(crate) fn reserve(driver: &Driver, size: usize, align: usize) -> Result<CUdeviceptr> {
        let e = driver.mem_address_reserve()?;
        let mut base: CUdeviceptr = 0;
        // SAFETY: `base` is a valid place; no address is asked (0), flags 0.
        driver.ok(&e, unsafe { (e.f)(&mut base, size, align, 0, 0) })?;
        Ok(base)
    }

    /// Free a reserved range (`cuMemAddressFree`).
    pub(crate) fn free_range(driver: &Driver, base: CUdeviceptr, size: usize) -> Result<()> {
        let e = driver.mem_address_free()?;
        // SAFETY: the range is passed by value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(base, size) })
    }

    /// Map `size` bytes of `handle` from `offset` at `at` (`cuMemMap`,
    /// flags 0).
    pub(crate) fn map(
        driver: &Driver,
        at: CUdeviceptr,
        size: usize,
        offset: usize,
        handle: CUmemGenericAllocationHandle,
    ) -> Result<()> {
        let e = driver.mem_map()?;
        // SAFETY: every argument is passed by value and checked by the
        // driver (a range of a reservation that maps nothing yet).
        driver.ok(&e, unsafe { (e.f)(at, size, offset, handle, 0) })
    }

    /// Unmap `size` bytes at `at` (`cuMemUnmap`).
    pub(crate) fn unmap(driver: &Driver, at: CUdeviceptr, size: usize) -> Result<()> {
        let e = driver.mem_unmap()?;
        // SAFETY: the range is passed by value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(at, size) })
    }

    /// Set the access of `descs` to the mapped `size` bytes at `at`
    /// (`cuMemSetAccess`).
    pub(crate) fn set_access(
        driver: &Driver,
        at: CUdeviceptr,
        size: usize,
        descs: &[CUmemAccessDesc],
    ) -> Result<()> {
        let e = driver.mem_set_access()?;
        // SAFETY: `descs` holds `descs.len()` descriptors, borrowed for the
        // call; the range is passed by value and checked by the driver.
        driver.ok(&e, unsafe { (e.f)(at, size, descs.as_ptr(), descs.len()) })
    }

    /// The POSIX descriptor of a physical allocation
    /// (`cuMemExportToShareableHandle`, flags 0).
    pub(crate) fn export_fd(
        driver: &Driver,
        handle: CUmemGenericAllocationHandle,
    ) -> Result<OwnedFd> {
        let e = driver.mem_export_to_shareable_handle()?;
        let mut raw: i32 = -1;
        // SAFETY: for a POSIX descriptor the output is an `int`, and `raw`
        // is a valid place for one; the handle is passed by value; flags 0.
        driver.ok(&e, unsafe {
            (e.f)((&raw mut raw).cast::<c_void>(), handle, HANDLE_POSIX_FD, 0)
        })?;
        if raw < 0 {
            return Err(Error::invalid(format!(
                "{} succeeded without a descriptor",
                e.name
            )));
        }
        // SAFETY: on success the driver gave a new descriptor that the
        // caller owns (cuda.h); nothing else owns or closes it.
        Ok(unsafe { OwnedFd::from_raw_fd(raw) })
    }

    /// Import a physical allocation from its POSIX descriptor
    /// (`cuMemImportFromShareableHandle`); the descriptor stays the
    /// caller's.
    pub(crate) fn import_fd(
        driver: &Driver,
        fd: BorrowedFd<'_>,
    ) -> Result<CUmemGenericAllocationHandle> {
        let e = driver.mem_import_from_shareable_handle()?;
        let mut handle: CUmemGenericAllocationHandle = 0;
        // SAFETY: `handle` is a valid place; a POSIX descriptor is passed
        // as the pointer's value, and `fd` is open for the call (borrowed).
        driver.ok(&e, unsafe {
            (e.f)(
                &mut handle,
                std::ptr::without_provenance_mut(fd.as_raw_fd() as usize),
                HANDLE_POSIX_FD,
            )
        })?;
        Ok(handle)
    }
}
