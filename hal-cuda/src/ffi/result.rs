//! The typed layer over the entry points of `sys.rs`, grouped by concept:
//! each function fetches its entry point, makes the one call and turns a
//! `CUresult` other than success into a [`VendorError`] named with the
//! entry point's versioned symbol, the code's number and its name as the
//! driver gives it (`cuGetErrorName`, else `hal_core::kit::vendor::cuda`'s).
//! A function is safe where the arguments are values the driver checks
//! (handles, device addresses, sizes) and places or buffers that live for
//! the call; one whose queued work reaches host memory later is an
//! `unsafe fn` whose `# Safety` says what its caller keeps alive.

use std::ffi::{c_char, CStr};

use hal_core::{Error, Result};

use super::sys::{Driver, Entry, Status};

/// The call of entry point `$entry`, every argument a value the driver
/// checks (handles, device addresses, sizes, flags), its status checked.
macro_rules! by_value {
    ($driver:expr, $entry:ident($($arg:expr),* $(,)?)) => {{
        let e = $driver.$entry()?;
        // SAFETY: the signature is the table's (`cuda.h`); every argument
        // is passed by value (a handle is the driver's own) and checked by
        // the driver: no buffer of this process is handed over.
        $driver.ok(&e, unsafe { (e.f)($($arg),*) })
    }};
}

/// As `by_value!`, but the first argument is the place of the answer, of
/// type `$t` (first `$init`): the answer, once the status is checked.
macro_rules! answer {
    ($driver:expr, $entry:ident($t:ty = $init:expr $(, $arg:expr)* $(,)?)) => {{
        let e = $driver.$entry()?;
        let mut out: $t = $init;
        // SAFETY: `out` is a valid place of the type the signature names
        // for the answer (the call compiles only so); every other argument
        // is passed by value (a handle is the driver's own) and checked by
        // the driver: no other buffer of this process is handed over.
        $driver.ok(&e, unsafe { (e.f)(&mut out $(, $arg)*) })?;
        out
    }};
}

/// `cuGetErrorName` and `cuGetErrorString`.
type Describe = unsafe extern "C" fn(Status, *mut *const c_char) -> Status;
/// The accessor of one of them.
type Lookup = fn(&Driver) -> Result<Entry<Describe>>;

/// `CUDA_SUCCESS`.
pub(crate) const SUCCESS: Status = 0;
/// `CUDA_ERROR_NOT_READY`: queued work has not completed.
pub(crate) const NOT_READY: Status = 600;

impl Driver {
    /// The vendor error of a failed `call`.
    fn error(&self, call: &str, status: Status) -> Error {
        let text = self
            .describe(status, Driver::get_error_string)
            .unwrap_or_else(|| "no description from the driver".into());
        // The driver's name of the code (`cuGetErrorName`), else the kit's.
        hal_core::kit::vendor::error(
            hal_core::BackendId::Cuda,
            "CUresult",
            i64::from(status),
            || self.describe(status, Driver::get_error_name),
            format!("{call}: {text}"),
        )
    }

    /// What `lookup` (`cuGetErrorName` or `cuGetErrorString`) says of `status`.
    fn describe(&self, status: Status, lookup: Lookup) -> Option<String> {
        let e = lookup(self).ok()?;
        let mut out: *const c_char = std::ptr::null();
        // SAFETY: `out` is a valid place for the driver to store a pointer.
        if unsafe { (e.f)(status, &mut out) } != SUCCESS || out.is_null() {
            return None;
        }
        // SAFETY: on success the driver stored a pointer to a static,
        // NUL-terminated string.
        let text = unsafe { CStr::from_ptr(out) };
        Some(text.to_string_lossy().into_owned())
    }

    /// `Ok` for success, else the vendor error of the call of `e`.
    fn ok<F>(&self, e: &Entry<F>, status: Status) -> Result<()> {
        match status {
            SUCCESS => Ok(()),
            other => Err(self.error(e.name, other)),
        }
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
    by_value!(driver, init(0))
}

/// `Ok` when the driver has the entry point of the accessor's answer
/// `entry` (asked as a call asks it): for a caller that prepares a call.
pub(crate) fn has<F>(entry: Result<Entry<F>>) -> Result<()> {
    entry.map(|_| ())
}

/// Devices: their number, handles, names and attributes.
pub(crate) mod device {
    use std::ffi::{c_char, c_int, CStr};

    use hal_core::Result;

    use crate::ffi::sys::{CUdevice, CUuuid, Driver};

    /// The number of devices the driver sees (`cuDeviceGetCount`).
    pub(crate) fn count(driver: &Driver) -> Result<u32> {
        Ok(u32::try_from(answer!(driver, device_get_count(c_int = 0))).unwrap_or(0))
    }

    /// The handle of device `ordinal` (`cuDeviceGet`).
    pub(crate) fn get(driver: &Driver, ordinal: u32) -> Result<CUdevice> {
        Ok(answer!(driver, device_get(CUdevice = 0, ordinal as c_int)))
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
        let uuid = answer!(
            driver,
            device_get_uuid(CUuuid = CUuuid { bytes: [0; 16] }, dev)
        );
        Ok(uuid.bytes.map(|b| b as u8))
    }

    /// The device's memory in bytes (`cuDeviceTotalMem_v2`).
    pub(crate) fn total_mem(driver: &Driver, dev: CUdevice) -> Result<usize> {
        Ok(answer!(driver, device_total_mem(usize = 0, dev)))
    }

    /// The attribute numbered `attr` of `dev` (`cuDeviceGetAttribute`), also
    /// one newer than the headers' enum (`hal_core::kit::vendor::cuda::ATTRIBUTE_*`).
    pub(crate) fn attribute(driver: &Driver, dev: CUdevice, attr: c_int) -> Result<i32> {
        Ok(answer!(driver, device_get_attribute(c_int = 0, attr, dev)))
    }

    /// True when device `dev` can access the memory of device `peer`
    /// (`cuDeviceCanAccessPeer`).
    pub(crate) fn can_access_peer(driver: &Driver, dev: CUdevice, peer: CUdevice) -> Result<bool> {
        let answer = answer!(driver, device_can_access_peer(c_int = 0, dev, peer));
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
        let ctx = answer!(
            driver,
            primary_ctx_retain(CUcontext = std::ptr::null_mut(), dev)
        );
        Ok(Context(ctx))
    }

    /// Release the primary context of `dev` (`cuDevicePrimaryCtxRelease_v2`).
    pub(crate) fn release_primary(driver: &Driver, dev: CUdevice) -> Result<()> {
        by_value!(driver, primary_ctx_release(dev))
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
        answer!(driver, ctx_pop_current(CUcontext = std::ptr::null_mut()));
        Ok(())
    }

    /// The calling thread's current context, if any (`cuCtxGetCurrent`).
    pub(crate) fn current(driver: &Driver) -> Result<Option<u64>> {
        let ctx = answer!(driver, ctx_get_current(CUcontext = std::ptr::null_mut()));
        Ok((!ctx.is_null()).then_some(ctx as u64))
    }

    /// Wait for all the current context's work (`cuCtxSynchronize`).
    pub(crate) fn synchronize(driver: &Driver) -> Result<()> {
        by_value!(driver, ctx_synchronize())
    }

    /// Let the current context access the memory of `peer`
    /// (`cuCtxEnablePeerAccess`, flags 0).
    pub(crate) fn enable_peer_access(driver: &Driver, peer: Context) -> Result<()> {
        by_value!(driver, ctx_enable_peer_access(peer.0, 0))
    }
}

/// Memory: allocation, copies, pointers, managed memory, registration.
pub(crate) mod mem {
    use std::ffi::{c_int, c_uint, c_void};

    use hal_core::kit::os::HostRange;
    use hal_core::Result;

    use crate::ffi::sys::{CUdeviceptr, CUmemLocation, Driver, Stream};

    /// `size` bytes of device memory (`cuMemAlloc_v2`).
    pub(crate) fn alloc(driver: &Driver, size: usize) -> Result<CUdeviceptr> {
        Ok(answer!(driver, mem_alloc(CUdeviceptr = 0, size)))
    }

    /// `size` bytes of pinned host memory (`cuMemAllocHost_v2`): the host's address.
    pub(crate) fn alloc_host(driver: &Driver, size: usize) -> Result<CUdeviceptr> {
        let p = answer!(driver, mem_alloc_host(*mut c_void = std::ptr::null_mut(), size));
        Ok(p as CUdeviceptr)
    }

    /// `size` bytes of managed memory (`cuMemAllocManaged`).
    pub(crate) fn alloc_managed(
        driver: &Driver,
        size: usize,
        flags: c_uint,
    ) -> Result<CUdeviceptr> {
        Ok(answer!(
            driver,
            mem_alloc_managed(CUdeviceptr = 0, size, flags)
        ))
    }

    /// Free device or managed memory (`cuMemFree_v2`).
    pub(crate) fn free(driver: &Driver, ptr: CUdeviceptr) -> Result<()> {
        by_value!(driver, mem_free(ptr))
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
        by_value!(driver, mem_advise(ptr, len, advice, at))
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
        by_value!(driver, mem_prefetch_async(ptr, len, to, 0, stream.0))
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
}

/// Legacy IPC of memory and events: 64-byte handles.
pub(crate) mod ipc {
    use std::ffi::c_uint;

    use hal_core::Result;

    use crate::ffi::sys::{CUdeviceptr, CUevent, CUipcEventHandle, CUipcMemHandle, Driver, Event};

    /// The 64 bytes of the allocation whose base is `base`
    /// (`cuIpcGetMemHandle`).
    pub(crate) fn get_mem_handle(driver: &Driver, base: CUdeviceptr) -> Result<[u8; 64]> {
        let empty = CUipcMemHandle { reserved: [0; 64] };
        let raw = answer!(driver, ipc_get_mem_handle(CUipcMemHandle = empty, base));
        Ok(raw.reserved.map(|b| b as u8))
    }

    /// Open the 64 bytes of another process's allocation in the current
    /// context (`cuIpcOpenMemHandle_v2`): its base here.
    pub(crate) fn open_mem_handle(
        driver: &Driver,
        ipc: &[u8; 64],
        flags: c_uint,
    ) -> Result<CUdeviceptr> {
        let raw = CUipcMemHandle {
            reserved: ipc.map(|b| b as _),
        };
        Ok(answer!(
            driver,
            ipc_open_mem_handle(CUdeviceptr = 0, raw, flags)
        ))
    }

    /// Close an open of [`open_mem_handle`] (`cuIpcCloseMemHandle`).
    pub(crate) fn close_mem_handle(driver: &Driver, base: CUdeviceptr) -> Result<()> {
        by_value!(driver, ipc_close_mem_handle(base))
    }

    /// The 64 bytes of an interprocess event (`cuIpcGetEventHandle`).
    pub(crate) fn get_event_handle(driver: &Driver, event: Event) -> Result<[u8; 64]> {
        let empty = CUipcEventHandle { reserved: [0; 64] };
        let raw = answer!(
            driver,
            ipc_get_event_handle(CUipcEventHandle = empty, event.0)
        );
        Ok(raw.reserved.map(|b| b as u8))
    }

    /// Open another process's event by its 64 bytes (`cuIpcOpenEventHandle`).
    pub(crate) fn open_event_handle(driver: &Driver, ipc: &[u8; 64]) -> Result<Event> {
        let handle = CUipcEventHandle {
            reserved: ipc.map(|b| b as _),
        };
        let raw = answer!(
            driver,
            ipc_open_event_handle(CUevent = std::ptr::null_mut(), handle)
        );
        Ok(Event(raw))
    }
}

/// Streams: creation, queries, waits, memory operations, host functions.
pub(crate) mod stream {
    use std::ffi::{c_uint, c_void};

    use hal_core::Result;

    use crate::ffi::sys::{CUdeviceptr, CUstream, Driver, Event, HostFn, Stream};

    /// A new stream of the current context (`cuStreamCreate`).
    pub(crate) fn create(driver: &Driver, flags: c_uint) -> Result<Stream> {
        let raw = answer!(
            driver,
            stream_create(CUstream = std::ptr::null_mut(), flags)
        );
        Ok(Stream(raw))
    }

    /// Destroy a stream (`cuStreamDestroy_v2`).
    pub(crate) fn destroy(driver: &Driver, stream: Stream) -> Result<()> {
        by_value!(driver, stream_destroy(stream.0))
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
        by_value!(driver, stream_synchronize(stream.0))
    }

    /// Queue on `stream` a wait for `event` (`cuStreamWaitEvent`, flags 0).
    pub(crate) fn wait_event(driver: &Driver, stream: Stream, event: Event) -> Result<()> {
        by_value!(driver, stream_wait_event(stream.0, event.0, 0))
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
        let raw = answer!(driver, event_create(CUevent = std::ptr::null_mut(), flags));
        Ok(Event(raw))
    }

    /// Destroy an event (`cuEventDestroy_v2`).
    pub(crate) fn destroy(driver: &Driver, event: Event) -> Result<()> {
        by_value!(driver, event_destroy(event.0))
    }

    /// Record `event` on `stream` (`cuEventRecord`).
    pub(crate) fn record(driver: &Driver, event: Event, stream: Stream) -> Result<()> {
        by_value!(driver, event_record(event.0, stream.0))
    }

    /// True when the work before the event's record ran (`cuEventQuery`).
    pub(crate) fn query(driver: &Driver, event: Event) -> Result<bool> {
        let e = driver.event_query()?;
        // SAFETY: the handle is passed by value and checked by the driver.
        driver.ready(&e, unsafe { (e.f)(event.0) })
    }
}

/// VMM: physical memory, reservations, mappings, access, descriptors.
pub(crate) mod vmm {
    use std::ffi::{c_uint, c_void};
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

    use hal_core::{Error, Result};

    use crate::ffi::sys::{
        CUdeviceptr, CUmemAccessDesc, CUmemAllocationProp, CUmemGenericAllocationHandle, Driver,
    };

    /// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
    pub(crate) const HANDLE_POSIX_FD: c_uint = 1;
    /// `CU_MEM_HANDLE_TYPE_FABRIC`.
    pub(crate) const HANDLE_FABRIC: c_uint = 8;

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
        by_value!(driver, mem_release(handle))
    }

    /// Reserve `size` bytes of address space aligned to `align` (0: the
    /// driver's choice) anywhere (`cuMemAddressReserve`, flags 0).
    pub(crate) fn reserve(driver: &Driver, size: usize, align: usize) -> Result<CUdeviceptr> {
        Ok(answer!(
            driver,
            mem_address_reserve(CUdeviceptr = 0, size, align, 0, 0)
        ))
    }

    /// Free a reserved range (`cuMemAddressFree`).
    pub(crate) fn free_range(driver: &Driver, base: CUdeviceptr, size: usize) -> Result<()> {
        by_value!(driver, mem_address_free(base, size))
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
        by_value!(driver, mem_map(at, size, offset, handle, 0))
    }

    /// Unmap `size` bytes at `at` (`cuMemUnmap`).
    pub(crate) fn unmap(driver: &Driver, at: CUdeviceptr, size: usize) -> Result<()> {
        by_value!(driver, mem_unmap(at, size))
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
