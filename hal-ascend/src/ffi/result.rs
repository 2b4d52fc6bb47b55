//! The typed result layer: one safe function per runtime call, grouped by
//! concept ([`init`], [`ctx`], [`device`], [`mem`], [`ipc`], [`stream`],
//! [`event`], [`notify`], [`vmm`]). Each fetches its entry point from the
//! table (`sys.rs`), makes the one call, and turns an `aclError` other than
//! success into a [`VendorError`] with the code's number, its name from
//! `hal_core::kit::vendor::acl`, the runtime's own text of the failure
//! (`aclGetRecentErrMsg`) and the symbol's name as the table resolved it.
//! Nothing above this layer calls the runtime.
//!
//! **Pointers.** The host pointers a call passes are made here: places on
//! this function's stack, slices with their own lengths, NUL-terminated
//! keys. Device addresses (`u64`) are values the runtime resolves in the
//! device's address space, never host memory of this process: device
//! memory is reached through the runtime (`aclrtMemcpy`), never
//! dereferenced. The one call whose host pointer must outlive the call (an
//! asynchronous copy from host memory) is an `unsafe fn`.
//!
//! **Handles.** A stream, event, notify or physical memory handle is an
//! owned value of `sys.rs`, made only here from the runtime's answer,
//! neither `Copy` nor `Clone`, and given back by value to the one function
//! that destroys it: a handle passed by reference is live. (A caller's
//! stream is live by the contract of
//! [`StreamHandle::borrowed`](super::sys::StreamHandle::borrowed).)

use std::ffi::{c_char, c_void, CStr};

use hal_core::kit::vendor::acl;
use hal_core::{Error, Result};

use super::sys::{Runtime, Status};

/// `ACL_SUCCESS`.
const SUCCESS: Status = 0;

impl Runtime {
    /// `Ok` for success, the vendor error of `status` otherwise; `call`
    /// names the entry point for the message.
    pub(super) fn check(&self, call: &str, status: Status) -> Result<()> {
        if status == SUCCESS {
            return Ok(());
        }
        Err(self.error(call, status))
    }

    /// The vendor error of a failed `call`.
    fn error(&self, call: &str, status: Status) -> Error {
        let text = self
            .recent_message()
            .unwrap_or_else(|| "the runtime gave no message (aclGetRecentErrMsg)".into());
        hal_core::kit::vendor::error(
            hal_core::BackendId::Ascend,
            "aclError",
            i64::from(status),
            || None,
            message(call, &text),
        )
    }

    /// The text of the calling thread's last runtime error.
    fn recent_message(&self) -> Option<String> {
        let e = self.get_recent_err_msg().ok()?;
        // SAFETY: aclGetRecentErrMsg takes nothing and returns null or a
        // NUL-terminated string the runtime keeps for this thread.
        let p = unsafe { (e.f)() };
        // SAFETY: null or NUL-terminated and kept by the runtime (above);
        // copied at once.
        text(unsafe { p.as_ref().map(|p| CStr::from_ptr(p)) })
    }
}

/// A string the runtime gave, copied.
fn text(s: Option<&CStr>) -> Option<String> {
    s.map(|s| s.to_string_lossy().into_owned())
}

/// The text of a failed `call`: the runtime's own `text`, after the entry
/// point's name unless the runtime's text names it already.
fn message(call: &str, text: &str) -> String {
    if text.contains(call) {
        text.to_owned()
    } else {
        format!("{call}: {text}")
    }
}

/// True when `err` is the vendor's `code`.
pub(crate) fn is_code(err: &Error, code: hal_core::kit::vendor::Code) -> bool {
    code.matches(err)
}

/// An import the runtime refused for want of permission
/// (`ACL_ERROR_RT_NO_PERMISSION`: this process's bare tgid is not on the
/// key's allow-list) as the contract's [`Error::PermissionDenied`], its
/// text keeping the vendor's code and name; other errors unchanged.
pub(crate) fn refused_import(e: Error) -> Error {
    if !is_code(&e, acl::RT_NO_PERMISSION) {
        return e;
    }
    Error::PermissionDenied {
        pid: None,
        reason: format!(
            "{e}; the exporter must add this process's bare tgid (Device::process_id) with \
             Device::allow_importers, or export to anyone"
        ),
    }
}

/// A device address as the runtime takes it (`void*`).
fn dptr(addr: u64) -> *mut c_void {
    std::ptr::without_provenance_mut(addr as usize)
}

/// `aclInit` with no configuration.
pub(crate) fn init(rt: &Runtime) -> Result<()> {
    let e = rt.init()?;
    // SAFETY: a null configuration path is allowed (no configuration).
    rt.check(e.name, unsafe { (e.f)(std::ptr::null()) })
}

/// The calling thread's current device.
pub(crate) mod ctx {
    use super::*;

    /// The thread's current device (`aclrtGetDevice`); a thread that set
    /// none answers `ACL_ERROR_RT_CONTEXT_NULL`.
    pub(crate) fn get_device(rt: &Runtime) -> Result<i32> {
        let e = rt.get_device()?;
        let mut id: i32 = -1;
        // SAFETY: `id` is a valid place for the device id.
        rt.check(e.name, unsafe { (e.f)(&mut id) })?;
        Ok(id)
    }

    /// Make device `id` current on the calling thread (`aclrtSetDevice`).
    pub(crate) fn set_device(rt: &Runtime, id: i32) -> Result<()> {
        let e = rt.set_device()?;
        // SAFETY: a plain value; the runtime checks the id.
        rt.check(e.name, unsafe { (e.f)(id) })
    }
}

/// Devices: how many, what each is, peer access, the process's bare tgid.
pub(crate) mod device {
    use super::*;
    use crate::ffi::bindings::{aclrtUuid, ACL_HBM_MEM};

    /// The number of devices the runtime sees (`aclrtGetDeviceCount`).
    pub(crate) fn count(rt: &Runtime) -> Result<u32> {
        let e = rt.get_device_count()?;
        let mut n: u32 = 0;
        // SAFETY: `n` is a valid place for the count.
        rt.check(e.name, unsafe { (e.f)(&mut n) })?;
        Ok(n)
    }

    /// The 16 bytes that name device `ordinal` (`aclrtDeviceGetUuid`).
    pub(crate) fn uuid(rt: &Runtime, ordinal: u32) -> Result<[u8; 16]> {
        let e = rt.device_get_uuid()?;
        let mut uuid = aclrtUuid { bytes: [0; 16] };
        // SAFETY: `uuid` is a valid place for an `aclrtUuid`.
        rt.check(e.name, unsafe { (e.f)(ordinal as i32, &mut uuid) })?;
        Ok(uuid.bytes.map(|b| b as u8))
    }

    /// The current device's SoC name (`aclrtGetSocName`), empty when the
    /// runtime answers null; an error only where the runtime lacks the call.
    pub(crate) fn soc_name(rt: &Runtime) -> Result<String> {
        let e = rt.get_soc_name()?;
        // SAFETY: takes nothing; returns null or a NUL-terminated string the
        // runtime keeps.
        let p = unsafe { (e.f)() };
        // SAFETY: null or NUL-terminated and kept by the runtime (above);
        // copied at once.
        Ok(text(unsafe { p.as_ref().map(|p| CStr::from_ptr(p)) }).unwrap_or_default())
    }

    /// The current device's total high-bandwidth memory in bytes
    /// (`aclrtGetMemInfo` of `ACL_HBM_MEM`); `None` where the runtime
    /// lacks the call.
    pub(crate) fn total_memory(rt: &Runtime) -> Result<Option<u64>> {
        let Ok(e) = rt.get_mem_info() else {
            return Ok(None);
        };
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both are valid places; ACL_HBM_MEM is an `aclrtMemAttr`.
        rt.check(e.name, unsafe { (e.f)(ACL_HBM_MEM, &mut free, &mut total) })?;
        Ok(Some(total as u64))
    }

    /// This process's bare tgid (`aclrtDeviceGetBareTgid`).
    pub(crate) fn bare_tgid(rt: &Runtime) -> Result<i32> {
        let e = rt.device_get_bare_tgid()?;
        let mut t: i32 = 0;
        // SAFETY: `t` is a valid place.
        rt.check(e.name, unsafe { (e.f)(&mut t) })?;
        Ok(t)
    }

    /// Wait for all work queued on the current device
    /// (`aclrtSynchronizeDevice`).
    pub(crate) fn synchronize(rt: &Runtime) -> Result<()> {
        let e = rt.synchronize_device()?;
        // SAFETY: no arguments.
        rt.check(e.name, unsafe { (e.f)() })
    }

    /// True when device `device` can reach the memory of device `peer`
    /// (`aclrtDeviceCanAccessPeer`).
    pub(crate) fn can_access_peer(rt: &Runtime, device: u32, peer: u32) -> Result<bool> {
        let e = rt.device_can_access_peer()?;
        let mut can: i32 = 0;
        // SAFETY: `can` is a valid place; the ids are plain values.
        let status = unsafe { (e.f)(&mut can, device as i32, peer as i32) };
        rt.check(e.name, status)?;
        Ok(can != 0)
    }

    /// Let the current device reach the memory of device `peer`
    /// (`aclrtDeviceEnablePeerAccess`).
    pub(crate) fn enable_peer_access(rt: &Runtime, peer: u32) -> Result<()> {
        let e = rt.device_enable_peer_access()?;
        // SAFETY: plain values.
        rt.check(e.name, unsafe { (e.f)(peer as i32, 0) })
    }
}

/// Device memory: allocation, copies, fills.
pub(crate) mod mem {
    use super::*;
    use crate::ffi::bindings::{
        aclrtMemMallocPolicy, ACL_MEMCPY_DEVICE_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST,
        ACL_MEMCPY_HOST_TO_DEVICE,
    };
    use crate::ffi::sys::StreamHandle;

    /// `size` bytes of device memory with `policy` (`aclrtMalloc`).
    pub(crate) fn alloc(rt: &Runtime, size: usize, policy: aclrtMemMallocPolicy) -> Result<u64> {
        let e = rt.malloc()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid place; the size and policy are plain values.
        rt.check(e.name, unsafe { (e.f)(&mut p, size, policy) })?;
        Ok(p as u64)
    }

    /// Free device memory `aclrtMalloc` gave (`aclrtFree`).
    pub(crate) fn free(rt: &Runtime, addr: u64) -> Result<()> {
        let e = rt.free()?;
        // SAFETY: a device address, looked up by the runtime.
        rt.check(e.name, unsafe { (e.f)(dptr(addr)) })
    }

    /// Copy `dst.len()` bytes of device memory at `src` into `dst`
    /// (`aclrtMemcpy`, device to host).
    pub(crate) fn copy_to_host(rt: &Runtime, dst: &mut [u8], src: u64) -> Result<()> {
        let e = rt.memcpy()?;
        let (n, kind) = (dst.len(), ACL_MEMCPY_DEVICE_TO_HOST);
        // SAFETY: `dst` is a host buffer valid for writes of `n` bytes, the
        // length passed; `src` is a device address.
        let status = unsafe { (e.f)(dst.as_mut_ptr().cast(), n, dptr(src), n, kind) };
        rt.check(e.name, status)
    }

    /// Copy `src` into device memory at `dst` (`aclrtMemcpy`, host to
    /// device).
    pub(crate) fn copy_from_host(rt: &Runtime, dst: u64, src: &[u8]) -> Result<()> {
        let e = rt.memcpy()?;
        let (n, kind) = (src.len(), ACL_MEMCPY_HOST_TO_DEVICE);
        // SAFETY: `src` is a host buffer valid for reads of `n` bytes, the
        // length passed; `dst` is a device address.
        let status = unsafe { (e.f)(dptr(dst), n, src.as_ptr().cast(), n, kind) };
        rt.check(e.name, status)
    }

    /// Queue a copy of `len` bytes from device memory at `src` to `dst` on
    /// `stream` (`aclrtMemcpyAsync`, device to device).
    pub(crate) fn copy_async(
        rt: &Runtime,
        dst: u64,
        src: u64,
        len: usize,
        stream: &StreamHandle,
    ) -> Result<()> {
        let e = rt.memcpy_async()?;
        let (s, kind) = (stream.raw, ACL_MEMCPY_DEVICE_TO_DEVICE);
        // SAFETY: device addresses and a live stream (module doc); no host
        // memory is passed.
        let status = unsafe { (e.f)(dptr(dst), len, dptr(src), len, kind, s) };
        rt.check(e.name, status)
    }

    /// Queue a copy of `src` into device memory at `dst` on `stream`
    /// (`aclrtMemcpyAsync`, host to device).
    ///
    /// # Safety
    ///
    /// The bytes of `src` stay valid, unmoved and unwritten until the
    /// stream ran the copy (the stream holds their buffer until then).
    pub(crate) unsafe fn copy_from_host_async(
        rt: &Runtime,
        dst: u64,
        src: &[u8],
        stream: &StreamHandle,
    ) -> Result<()> {
        let e = rt.memcpy_async()?;
        let (n, kind, s) = (src.len(), ACL_MEMCPY_HOST_TO_DEVICE, stream.raw);
        // SAFETY: `src` is valid for reads of `n` bytes, the length passed,
        // until the stream ran the copy (the caller's promise); `dst` is a
        // device address; the stream is live (module doc).
        let status = unsafe { (e.f)(dptr(dst), n, src.as_ptr().cast(), n, kind, s) };
        rt.check(e.name, status)
    }

    /// Queue a fill of `len` bytes of device memory at `dst` with `value`
    /// on `stream` (`aclrtMemsetAsync`).
    pub(crate) fn memset_async(
        rt: &Runtime,
        dst: u64,
        value: u8,
        len: usize,
        stream: &StreamHandle,
    ) -> Result<()> {
        let e = rt.memset_async()?;
        // SAFETY: a device address and a live stream (module doc).
        let status = unsafe { (e.f)(dptr(dst), len, i32::from(value), len, stream.raw) };
        rt.check(e.name, status)
    }

    /// The start and size of the device memory the runtime knows at `addr`
    /// (`aclrtMemGetAddressRange`).
    pub(crate) fn address_range(rt: &Runtime, addr: u64) -> Result<(u64, u64)> {
        let e = rt.mem_get_address_range()?;
        let (mut start, mut size): (*mut c_void, usize) = (std::ptr::null_mut(), 0);
        // SAFETY: both are valid places; `addr` is a device address.
        rt.check(e.name, unsafe { (e.f)(dptr(addr), &mut start, &mut size) })?;
        Ok((start as u64, size as u64))
    }
}

/// Memory keys: IPC of device memory.
pub(crate) mod ipc {
    use super::*;

    /// Bytes of a key buffer (the runtime documentation's length: memory
    /// keys 65, notify keys at least 65; the public headers have no
    /// constant for it).
    pub(crate) const KEY_LEN: usize = 65;

    /// The key of the `len` bytes of device memory at `addr`
    /// (`aclrtIpcMemGetExportKey`), as the runtime wrote it.
    pub(crate) fn get_export_key(
        rt: &Runtime,
        addr: u64,
        len: u64,
        flags: u32,
    ) -> Result<[c_char; KEY_LEN]> {
        let e = rt.ipc_mem_get_export_key()?;
        let mut buf = [0; KEY_LEN];
        let (p, n, flags) = (buf.as_mut_ptr(), buf.len(), u64::from(flags));
        // SAFETY: `p` is valid for writes of `n` (KEY_LEN) bytes, the length
        // passed; `addr` is a device address.
        let status = unsafe { (e.f)(dptr(addr), len as usize, p, n, flags) };
        rt.check(e.name, status)?;
        Ok(buf)
    }

    /// Admit the bare tgids `tgids` to import `key`
    /// (`aclrtIpcMemSetImportPid`).
    pub(crate) fn set_import_pid(rt: &Runtime, key: &CStr, tgids: &[i32]) -> Result<()> {
        let e = rt.ipc_mem_set_import_pid()?;
        let mut list = tgids.to_vec();
        // SAFETY: `key` is NUL-terminated; `list` holds `list.len()` ids.
        let status = unsafe { (e.f)(key.as_ptr(), list.as_mut_ptr(), list.len()) };
        rt.check(e.name, status)
    }

    /// Open `key` on the current device (`aclrtIpcMemImportByKey`): the
    /// address of the memory it names. A refusal of this process's bare
    /// tgid is [`Error::PermissionDenied`] ([`refused_import`]).
    pub(crate) fn import_by_key(rt: &Runtime, key: &CStr, flags: u32) -> Result<u64> {
        let e = rt.ipc_mem_import_by_key()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid place; `key` is NUL-terminated.
        let status = unsafe { (e.f)(&mut p, key.as_ptr(), u64::from(flags)) };
        rt.check(e.name, status).map_err(refused_import)?;
        Ok(p as u64)
    }

    /// Close `key` (`aclrtIpcMemClose`).
    pub(crate) fn close(rt: &Runtime, key: &CStr) -> Result<()> {
        let e = rt.ipc_mem_close()?;
        // SAFETY: `key` is NUL-terminated.
        rt.check(e.name, unsafe { (e.f)(key.as_ptr()) })
    }
}

/// Streams.
pub(crate) mod stream {
    use super::*;
    use crate::ffi::bindings::{ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, ACL_STREAM_STATUS_COMPLETE};
    use crate::ffi::sys::StreamHandle;

    /// A new stream on the current device (`aclrtCreateStream`).
    pub(crate) fn create(rt: &Runtime) -> Result<StreamHandle> {
        let e = rt.create_stream()?;
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: `raw` is a valid place for the handle.
        rt.check(e.name, unsafe { (e.f)(&mut raw) })?;
        Ok(StreamHandle::created(raw))
    }

    /// Destroy a stream this crate created (`aclrtDestroyStream`); a
    /// caller's stream or the default stream is left alone.
    pub(crate) fn destroy(rt: &Runtime, stream: StreamHandle) -> Result<()> {
        if !stream.owned() {
            return Ok(());
        }
        let e = rt.destroy_stream()?;
        // SAFETY: a live stream this crate created, given up here.
        rt.check(e.name, unsafe { (e.f)(stream.raw) })
    }

    /// Wait up to `ms` milliseconds (-1: forever) for the stream's work
    /// (`aclrtSynchronizeStreamWithTimeout`): false for the runtime's own
    /// timeout code.
    pub(crate) fn synchronize(rt: &Runtime, stream: &StreamHandle, ms: i32) -> Result<bool> {
        let e = rt.synchronize_stream_with_timeout()?;
        // SAFETY: a live stream (module doc) and a plain value.
        let status = unsafe { (e.f)(stream.raw, ms) };
        if status as u32 == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT {
            return Ok(false);
        }
        rt.check(e.name, status)?;
        Ok(true)
    }

    /// True when the stream ran everything queued (`aclrtStreamQuery`).
    pub(crate) fn query(rt: &Runtime, stream: &StreamHandle) -> Result<bool> {
        let e = rt.stream_query()?;
        let mut status = 0;
        // SAFETY: a live stream (module doc); `status` is a valid place.
        rt.check(e.name, unsafe { (e.f)(stream.raw, &mut status) })?;
        Ok(status == ACL_STREAM_STATUS_COMPLETE)
    }
}

/// Events and IPC events.
pub(crate) mod event {
    use super::*;
    use crate::ffi::bindings::{
        aclrtIpcEventHandle, ACL_ERROR_RT_EVENT_SYNC_TIMEOUT, ACL_EVENT_RECORDED_STATUS_COMPLETE,
        ACL_IPC_EVENT_HANDLE_SIZE,
    };
    use crate::ffi::sys::{EventHandle, StreamHandle};

    /// Bytes of an IPC event handle.
    pub(crate) const HANDLE_LEN: usize = ACL_IPC_EVENT_HANDLE_SIZE as usize;

    /// A new event with the runtime's `flag` (`aclrtCreateEventExWithFlag`).
    pub(crate) fn create(rt: &Runtime, flag: u32) -> Result<EventHandle> {
        let e = rt.create_event_ex_with_flag()?;
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: `raw` is a valid place; the flag is a plain value.
        rt.check(e.name, unsafe { (e.f)(&mut raw, flag) })?;
        Ok(EventHandle::made(raw))
    }

    /// Destroy an event (`aclrtDestroyEvent`).
    pub(crate) fn destroy(rt: &Runtime, event: EventHandle) -> Result<()> {
        let e = rt.destroy_event()?;
        let raw = event.live()?;
        // SAFETY: a live event (module doc), given up here.
        rt.check(e.name, unsafe { (e.f)(raw) })
    }

    /// Record `event` on `stream` (`aclrtRecordEvent`).
    pub(crate) fn record(rt: &Runtime, event: &EventHandle, stream: &StreamHandle) -> Result<()> {
        let e = rt.record_event()?;
        let raw = event.live()?;
        // SAFETY: a live event and a live stream (module doc).
        rt.check(e.name, unsafe { (e.f)(raw, stream.raw) })
    }

    /// Make `stream` wait for `event` (`aclrtStreamWaitEvent`).
    pub(crate) fn stream_wait(
        rt: &Runtime,
        stream: &StreamHandle,
        event: &EventHandle,
    ) -> Result<()> {
        let e = rt.stream_wait_event()?;
        let raw = event.live()?;
        // SAFETY: a live stream and a live event (module doc).
        rt.check(e.name, unsafe { (e.f)(stream.raw, raw) })
    }

    /// True once the latest record completed (`aclrtQueryEventStatus`).
    pub(crate) fn query(rt: &Runtime, event: &EventHandle) -> Result<bool> {
        let e = rt.query_event_status()?;
        let raw = event.live()?;
        let mut status = 0;
        // SAFETY: a live event (module doc); `status` is a valid place.
        rt.check(e.name, unsafe { (e.f)(raw, &mut status) })?;
        Ok(status == ACL_EVENT_RECORDED_STATUS_COMPLETE)
    }

    /// Wait up to `timeout_ms` for the latest record
    /// (`aclrtSynchronizeEventWithTimeout`): false for the runtime's own
    /// timeout code.
    pub(crate) fn synchronize(rt: &Runtime, event: &EventHandle, timeout_ms: i32) -> Result<bool> {
        let e = rt.synchronize_event_with_timeout()?;
        let raw = event.live()?;
        // SAFETY: a live event (module doc) and a plain value.
        let status = unsafe { (e.f)(raw, timeout_ms) };
        if status as u32 == ACL_ERROR_RT_EVENT_SYNC_TIMEOUT {
            return Ok(false);
        }
        rt.check(e.name, status)?;
        Ok(true)
    }

    /// The IPC handle of an event made with `ACL_EVENT_IPC`
    /// (`aclrtIpcGetEventHandle`).
    pub(crate) fn ipc_handle(rt: &Runtime, event: &EventHandle) -> Result<[u8; HANDLE_LEN]> {
        let e = rt.ipc_get_event_handle()?;
        let raw = event.live()?;
        let mut h = aclrtIpcEventHandle {
            reserved: [0; HANDLE_LEN],
        };
        // SAFETY: a live event (module doc); `h` is a valid place for the
        // handle.
        rt.check(e.name, unsafe { (e.f)(raw, &mut h) })?;
        Ok(h.reserved.map(|c| c as u8))
    }

    /// Open an exported IPC event on the current device
    /// (`aclrtIpcOpenEventHandle`, the handle by value).
    pub(crate) fn ipc_open(rt: &Runtime, handle: &[u8; HANDLE_LEN]) -> Result<EventHandle> {
        let e = rt.ipc_open_event_handle()?;
        let h = aclrtIpcEventHandle {
            reserved: handle.map(|b| b as c_char),
        };
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: `raw` is a valid place; the handle is passed by value.
        rt.check(e.name, unsafe { (e.f)(h, &mut raw) })?;
        Ok(EventHandle::made(raw))
    }
}

/// Notifies.
pub(crate) mod notify {
    use super::*;
    use crate::ffi::sys::{NotifyHandle, StreamHandle};

    /// A new notify with the runtime's `flag` (`aclrtCreateNotify`).
    pub(crate) fn create(rt: &Runtime, flag: u32) -> Result<NotifyHandle> {
        let e = rt.create_notify()?;
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: `raw` is a valid place; the flag is a plain value.
        rt.check(e.name, unsafe { (e.f)(&mut raw, u64::from(flag)) })?;
        Ok(NotifyHandle::made(raw))
    }

    /// Destroy a notify (`aclrtDestroyNotify`).
    pub(crate) fn destroy(rt: &Runtime, notify: NotifyHandle) -> Result<()> {
        let e = rt.destroy_notify()?;
        let raw = notify.live()?;
        // SAFETY: a live notify (module doc), given up here.
        rt.check(e.name, unsafe { (e.f)(raw) })
    }

    /// Record `notify` on `stream` (`aclrtRecordNotify`).
    pub(crate) fn record(rt: &Runtime, notify: &NotifyHandle, stream: &StreamHandle) -> Result<()> {
        let e = rt.record_notify()?;
        let raw = notify.live()?;
        // SAFETY: a live notify and a live stream (module doc).
        rt.check(e.name, unsafe { (e.f)(raw, stream.raw) })
    }

    /// Make `stream` wait for `notify` and reset it, for at most the
    /// runtime's `timeout` (0: forever; `aclrtWaitAndResetNotify`).
    pub(crate) fn wait_and_reset(
        rt: &Runtime,
        notify: &NotifyHandle,
        stream: &StreamHandle,
        timeout: u32,
    ) -> Result<()> {
        let e = rt.wait_and_reset_notify()?;
        let raw = notify.live()?;
        // SAFETY: a live notify and a live stream (module doc).
        rt.check(e.name, unsafe { (e.f)(raw, stream.raw, timeout) })
    }

    /// The key of `notify` (`aclrtNotifyGetExportKey`), as the runtime
    /// wrote it.
    pub(crate) fn get_export_key(
        rt: &Runtime,
        notify: &NotifyHandle,
        flags: u32,
    ) -> Result<[c_char; super::ipc::KEY_LEN]> {
        let e = rt.notify_get_export_key()?;
        let raw = notify.live()?;
        let mut buf = [0; super::ipc::KEY_LEN];
        // SAFETY: a live notify (module doc); `buf` is valid for writes of
        // KEY_LEN bytes, the length passed.
        let status = unsafe { (e.f)(raw, buf.as_mut_ptr(), buf.len(), u64::from(flags)) };
        rt.check(e.name, status)?;
        Ok(buf)
    }

    /// Admit the bare tgids `tgids` to import `notify`
    /// (`aclrtNotifySetImportPid`).
    pub(crate) fn set_import_pid(rt: &Runtime, notify: &NotifyHandle, tgids: &[i32]) -> Result<()> {
        let e = rt.notify_set_import_pid()?;
        let raw = notify.live()?;
        let mut list = tgids.to_vec();
        // SAFETY: a live notify (module doc); `list` holds `list.len()` ids.
        rt.check(e.name, unsafe { (e.f)(raw, list.as_mut_ptr(), list.len()) })
    }

    /// Open the notify `key` names on the current device
    /// (`aclrtNotifyImportByKey`). A refusal of this process's bare tgid
    /// is [`Error::PermissionDenied`] ([`refused_import`]).
    pub(crate) fn import_by_key(rt: &Runtime, key: &CStr, flags: u32) -> Result<NotifyHandle> {
        let e = rt.notify_import_by_key()?;
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: `raw` is a valid place; `key` is NUL-terminated.
        let status = unsafe { (e.f)(&mut raw, key.as_ptr(), u64::from(flags)) };
        rt.check(e.name, status).map_err(refused_import)?;
        Ok(NotifyHandle::made(raw))
    }
}

/// VMM: physical memory, address ranges, mappings, access, sharing.
pub(crate) mod vmm {
    use super::*;
    use crate::ffi::bindings::{
        aclrtMemAccessDesc, aclrtMemLocation, aclrtPhysicalMemProp, ACL_HBM_MEM_NORMAL,
        ACL_MEM_ALLOCATION_TYPE_PINNED, ACL_MEM_HANDLE_TYPE_NONE, ACL_MEM_LOCATION_TYPE_DEVICE,
        ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
    };
    use crate::ffi::sys::MemHandle;

    /// The property structure of device memory on device `ordinal`.
    fn device_prop(ordinal: u32) -> aclrtPhysicalMemProp {
        aclrtPhysicalMemProp {
            handleType: ACL_MEM_HANDLE_TYPE_NONE,
            allocationType: ACL_MEM_ALLOCATION_TYPE_PINNED,
            memAttr: ACL_HBM_MEM_NORMAL,
            location: aclrtMemLocation {
                id: ordinal,
                type_: ACL_MEM_LOCATION_TYPE_DEVICE,
            },
            reserve: 0,
        }
    }

    /// The minimum granularity of device memory on device `ordinal`
    /// (`aclrtMemGetAllocationGranularity`).
    pub(crate) fn granularity(rt: &Runtime, ordinal: u32) -> Result<usize> {
        let e = rt.mem_get_allocation_granularity()?;
        let mut p = device_prop(ordinal);
        let mut g: usize = 0;
        // SAFETY: `p` and `g` are valid places; the option is MINIMUM.
        let status = unsafe { (e.f)(&mut p, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &mut g) };
        rt.check(e.name, status)?;
        Ok(g)
    }

    /// `size` bytes of device memory on device `ordinal`
    /// (`aclrtMallocPhysical`).
    pub(crate) fn malloc_physical(rt: &Runtime, size: usize, ordinal: u32) -> Result<MemHandle> {
        let e = rt.malloc_physical()?;
        let prop = device_prop(ordinal);
        let mut h: *mut c_void = std::ptr::null_mut();
        // SAFETY: `h` is a valid place; `prop` is a filled-in property
        // structure that outlives the call; flags 0.
        rt.check(e.name, unsafe { (e.f)(&mut h, size, &prop, 0) })?;
        Ok(MemHandle::made(h))
    }

    /// Free physical memory, allocated or imported (`aclrtFreePhysical`).
    pub(crate) fn free_physical(rt: &Runtime, handle: MemHandle) -> Result<()> {
        let e = rt.free_physical()?;
        let raw = handle.live()?;
        // SAFETY: a live handle (module doc), given up here.
        rt.check(e.name, unsafe { (e.f)(raw) })
    }

    /// Reserve `size` bytes of device address space aligned to `align`
    /// (`aclrtReserveMemAddress`): the range's first address.
    pub(crate) fn reserve(rt: &Runtime, size: u64, align: u64) -> Result<u64> {
        let e = rt.reserve_mem_address()?;
        let mut va: *mut c_void = std::ptr::null_mut();
        let (size, align, at) = (size as usize, align as usize, std::ptr::null_mut());
        // SAFETY: `va` is a valid place; no address is asked (null), flags 0.
        rt.check(e.name, unsafe { (e.f)(&mut va, size, align, at, 0) })?;
        Ok(va.addr() as u64)
    }

    /// Release a reserved range (`aclrtReleaseMemAddress`).
    pub(crate) fn release(rt: &Runtime, addr: u64) -> Result<()> {
        let e = rt.release_mem_address()?;
        // SAFETY: a device address, looked up by the runtime.
        rt.check(e.name, unsafe { (e.f)(dptr(addr)) })
    }

    /// Map `len` bytes of `handle` from `offset` at `addr` (`aclrtMapMem`).
    pub(crate) fn map(
        rt: &Runtime,
        addr: u64,
        len: u64,
        offset: u64,
        handle: &MemHandle,
    ) -> Result<()> {
        let e = rt.map_mem()?;
        let raw = handle.live()?;
        // SAFETY: a device address and a live handle (module doc); flags 0.
        let status = unsafe { (e.f)(dptr(addr), len as usize, offset as usize, raw, 0) };
        rt.check(e.name, status)
    }

    /// Unmap the mapping that starts at `addr` (`aclrtUnmapMem`).
    pub(crate) fn unmap(rt: &Runtime, addr: u64) -> Result<()> {
        let e = rt.unmap_mem()?;
        // SAFETY: a device address, looked up by the runtime.
        rt.check(e.name, unsafe { (e.f)(dptr(addr)) })
    }

    /// Set the access of `len` mapped bytes at `addr` (`aclrtMemSetAccess`,
    /// which takes the descriptors as a mutable array: they are moved in).
    pub(crate) fn set_access(
        rt: &Runtime,
        addr: u64,
        len: u64,
        mut descs: Vec<aclrtMemAccessDesc>,
    ) -> Result<()> {
        let e = rt.mem_set_access()?;
        // SAFETY: a device address; `descs` holds `descs.len()` descriptors
        // and outlives the call.
        let status = unsafe { (e.f)(dptr(addr), len as usize, descs.as_mut_ptr(), descs.len()) };
        rt.check(e.name, status)
    }

    /// The 64-bit shareable handle of `handle`
    /// (`aclrtMemExportToShareableHandle`, `ACL_MEM_HANDLE_TYPE_NONE`).
    pub(crate) fn export_shareable(rt: &Runtime, handle: &MemHandle, flags: u32) -> Result<u64> {
        let e = rt.mem_export_to_shareable_handle()?;
        let raw = handle.live()?;
        let mut n = 0u64;
        // SAFETY: a live handle (module doc); `n` is a valid place.
        let status = unsafe { (e.f)(raw, ACL_MEM_HANDLE_TYPE_NONE, u64::from(flags), &mut n) };
        rt.check(e.name, status)?;
        Ok(n)
    }

    /// Admit the bare tgids `tgids` to import `shareable`
    /// (`aclrtMemSetPidToShareableHandle`).
    pub(crate) fn set_pid_shareable(rt: &Runtime, shareable: u64, tgids: &[i32]) -> Result<()> {
        let e = rt.mem_set_pid_to_shareable_handle()?;
        let mut list = tgids.to_vec();
        // SAFETY: `list` holds `list.len()` ids; the handle is a plain value.
        let status = unsafe { (e.f)(shareable, list.as_mut_ptr(), list.len()) };
        rt.check(e.name, status)
    }

    /// Open `shareable` on device `device`
    /// (`aclrtMemImportFromShareableHandle`). A refusal of this process's
    /// bare tgid is [`Error::PermissionDenied`] ([`refused_import`]).
    pub(crate) fn import_shareable(rt: &Runtime, shareable: u64, device: i32) -> Result<MemHandle> {
        let e = rt.mem_import_from_shareable_handle()?;
        let mut h: *mut c_void = std::ptr::null_mut();
        // SAFETY: `h` is a valid place; the shareable handle and the device
        // id are plain values.
        let status = unsafe { (e.f)(shareable, device, &mut h) };
        rt.check(e.name, status).map_err(refused_import)?;
        Ok(MemHandle::made(h))
    }
}

#[cfg(test)]
mod tests {
    use super::message;

    #[test]
    fn a_message_names_its_entry_point_once() {
        assert_eq!(
            message("aclrtMalloc", "out of memory"),
            "aclrtMalloc: out of memory"
        );
        assert_eq!(
            message(
                "aclrtIpcMemImportByKey",
                "aclrtIpcMemImportByKey: pid 7 is not allowed"
            ),
            "aclrtIpcMemImportByKey: pid 7 is not allowed"
        );
    }
}
