//! Streams and the stream-ordered copies and memset.

use std::ffi::{c_uchar, c_uint, c_void};
use std::sync::Arc;

use cudarc::driver::sys::{CUdeviceptr, CUresult, CUstream, CUstream_st};
use hal_core::kit::vendor::{cuda, Code};
use hal_core::Device;
use hal_mock::MockStream;

use crate::abi::{guard, non_null, put};
use crate::context::current;
use crate::error::sim;
use crate::state::{driver, lock, Driver, Kind, StreamEntry};

/// `CU_STREAM_NON_BLOCKING`.
const NON_BLOCKING: c_uint = 1;
/// `CU_STREAM_LEGACY`.
const LEGACY: usize = 1;
/// `CU_STREAM_PER_THREAD`.
const PER_THREAD: usize = 2;

/// The stream `h` names and its device: the current context's default
/// stream for null, `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`;
/// `CUDA_ERROR_INVALID_HANDLE` for a value that is no live stream.
pub(crate) fn stream_of(d: &Driver, h: CUstream) -> Result<(Arc<MockStream>, u32), Code> {
    let ordinal = current(d)?;
    match h.addr() {
        0 | LEGACY | PER_THREAD => Ok((d.default_stream(ordinal)?, ordinal)),
        id => lock(&d.streams)
            .get(&id)
            .map(|s| (Arc::clone(&s.stream), s.ordinal))
            .ok_or(cuda::INVALID_HANDLE),
    }
}

/// Creates a stream in the current context (`flags`: 0 or
/// `CU_STREAM_NON_BLOCKING`).
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(ph_stream: *mut CUstream, flags: c_uint) -> CUresult {
    guard("cuStreamCreate", || {
        let d = driver()?;
        let ordinal = current(d)?;
        non_null(ph_stream)?;
        if flags & !NON_BLOCKING != 0 {
            return Err(cuda::INVALID_VALUE);
        }
        let stream = sim(d.devices[ordinal as usize].device.create_stream())?;
        let id = d.new_handle();
        let entry = StreamEntry {
            stream: Arc::new(stream),
            ordinal,
            blocking: flags & NON_BLOCKING == 0,
        };
        lock(&d.streams).insert(id, entry);
        // SAFETY: `ph_stream` is not null and valid for a write (the caller's contract).
        unsafe {
            put(
                ph_stream,
                std::ptr::without_provenance_mut::<CUstream_st>(id),
            )
        }
    })
}

/// Destroys a stream. As the driver does, the call returns at once and
/// work still queued runs on: the stream is released when it ran (a
/// thread of the stand-in waits for that; work that never runs keeps it
/// until the process ends).
#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(h_stream: CUstream) -> CUresult {
    guard("cuStreamDestroy_v2", || {
        let d = driver()?;
        current(d)?;
        let entry = lock(&d.streams)
            .remove(&h_stream.addr())
            .ok_or(cuda::INVALID_HANDLE)?;
        let device = &d.devices[entry.ordinal as usize].device;
        if matches!(device.query_stream(&entry.stream), Ok(false)) {
            // Where no thread can be started, the stream drops here: the
            // simulator runs its queued work and abandons waits.
            let _ = hal_core::kit::os::thread::spawn("standin-destroyed-stream", move || {
                let device = &d.devices[entry.ordinal as usize].device;
                let _ = device.synchronize(&entry.stream, None);
                drop(entry);
            });
        }
        Ok(())
    })
}

/// Waits until the work queued on the stream has run.
#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(h_stream: CUstream) -> CUresult {
    guard("cuStreamSynchronize", || {
        let d = driver()?;
        let (stream, ordinal) = stream_of(d, h_stream)?;
        sim(d.devices[ordinal as usize]
            .device
            .synchronize(&stream, None))
    })
}

/// `CUDA_SUCCESS` when the work queued on the stream has run,
/// `CUDA_ERROR_NOT_READY` while some is pending.
#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(h_stream: CUstream) -> CUresult {
    guard("cuStreamQuery", || {
        let d = driver()?;
        let (stream, ordinal) = stream_of(d, h_stream)?;
        match sim(d.devices[ordinal as usize].device.query_stream(&stream))? {
            true => Ok(()),
            false => Err(cuda::NOT_READY),
        }
    })
}

/// Queues a copy of `n` host bytes to device memory on the stream (from
/// pinned memory the bytes are read when the copy runs; from pageable
/// memory before the call returns, as the driver stages them).
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    h_stream: CUstream,
) -> CUresult {
    guard("cuMemcpyHtoDAsync_v2", || {
        let d = driver()?;
        let (stream, ordinal) = stream_of(d, h_stream)?;
        if n == 0 {
            return Ok(());
        }
        non_null(src.cast_mut())?;
        let len = u64::try_from(n).map_err(|_| cuda::INVALID_VALUE)?;
        let to = d.find_copyable(dst, len)?;
        let device = &d.devices[ordinal as usize].device;
        if let Ok(pinned) = d.find_copyable(src.addr() as u64, len) {
            if matches!(pinned.kind, Kind::Host | Kind::Registered) {
                return sim(Device::copy_async(
                    device,
                    &stream,
                    to.alloc.r(),
                    to.offset,
                    pinned.alloc.r(),
                    pinned.offset,
                    len,
                ));
            }
        }
        // SAFETY: `src` is not null and readable for `n` bytes (the caller's contract).
        let bytes = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), n) }.to_vec();
        sim(Device::write_async(
            device,
            &stream,
            to.alloc.r(),
            to.offset,
            bytes,
        ))
    })
}

/// Queues a copy of `n` device bytes to host memory on the stream (into
/// pinned memory; into pageable memory the call waits for the stream and
/// copies before it returns, as the driver does).
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    h_stream: CUstream,
) -> CUresult {
    guard("cuMemcpyDtoHAsync_v2", || {
        let d = driver()?;
        let (stream, ordinal) = stream_of(d, h_stream)?;
        if n == 0 {
            return Ok(());
        }
        non_null(dst)?;
        let len = u64::try_from(n).map_err(|_| cuda::INVALID_VALUE)?;
        let from = d.find_copyable(src, len)?;
        let device = &d.devices[ordinal as usize].device;
        if let Ok(pinned) = d.find_copyable(dst.addr() as u64, len) {
            if matches!(pinned.kind, Kind::Host | Kind::Registered) {
                return sim(Device::copy_async(
                    device,
                    &stream,
                    pinned.alloc.r(),
                    pinned.offset,
                    from.alloc.r(),
                    from.offset,
                    len,
                ));
            }
        }
        sim(device.synchronize(&stream, None))?;
        // SAFETY: `dst` is not null and writable for `n` bytes (the caller's
        // contract), and nothing else in this call refers to them.
        let bytes = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), n) };
        sim(from.alloc.read(from.offset, bytes))
    })
}

/// Queues setting `n` bytes of device memory to `uc` on the stream.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    uc: c_uchar,
    n: usize,
    h_stream: CUstream,
) -> CUresult {
    guard("cuMemsetD8Async", || {
        let d = driver()?;
        let (stream, ordinal) = stream_of(d, h_stream)?;
        if n == 0 {
            return Ok(());
        }
        let len = u64::try_from(n).map_err(|_| cuda::INVALID_VALUE)?;
        let to = d.find_copyable(dst, len)?;
        let device = &d.devices[ordinal as usize].device;
        sim(device.memset_async(&stream, to.alloc.r(), to.offset, len, uc))
    })
}

/// Queues a copy of `n` bytes between two addresses of the unified address
/// space on the stream: both in allocations of the driver (device, pinned
/// or managed) run on the stream; a pageable host side is staged as
/// `cuMemcpyHtoDAsync_v2` and `cuMemcpyDtoHAsync_v2` do.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAsync(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    h_stream: CUstream,
) -> CUresult {
    if let Err(code) = driver() {
        return guard("cuMemcpyAsync", || Err(code));
    }
    let len = match u64::try_from(n) {
        Ok(len) => len,
        Err(_) => return guard("cuMemcpyAsync", || Err(cuda::INVALID_VALUE)),
    };
    let known = |p: CUdeviceptr| driver().is_ok_and(|d| d.find_copyable(p, len.max(1)).is_ok());
    match (known(dst), known(src)) {
        // SAFETY: the caller's contract: `src` is host memory readable for `n` bytes.
        (true, false) => unsafe { cuMemcpyHtoDAsync_v2(dst, src as *const c_void, n, h_stream) },
        // SAFETY: the caller's contract: `dst` is host memory writable for `n` bytes.
        (false, true) => unsafe { cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, n, h_stream) },
        (false, false) => guard("cuMemcpyAsync", || Err(cuda::INVALID_VALUE)),
        (true, true) => guard("cuMemcpyAsync", || {
            let d = driver()?;
            let (stream, ordinal) = stream_of(d, h_stream)?;
            if n == 0 {
                return Ok(());
            }
            let to = d.find_copyable(dst, len)?;
            let from = d.find_copyable(src, len)?;
            let dev = &d.devices[ordinal as usize].device;
            let host = |k: Kind| matches!(k, Kind::Host | Kind::Registered);
            // From host memory to host memory the copy is fully
            // synchronous with respect to the host (CUDA's API
            // synchronization behaviour): it waits for the stream's earlier
            // work, and holds the driver meanwhile, as driver 580
            // did (`held.rs`).
            let held = if host(to.kind) && host(from.kind) {
                let held = crate::held::hold();
                sim(dev.synchronize(&stream, None))?;
                Some(held)
            } else {
                None
            };
            sim(Device::copy_async(
                dev,
                &stream,
                to.alloc.r(),
                to.offset,
                from.alloc.r(),
                from.offset,
                len,
            ))?;
            if held.is_some() {
                sim(dev.synchronize(&stream, None))?;
            }
            Ok(())
        }),
    }
}

/// Queues a call of `f(user_data)` on the stream: a thread of the stand-in
/// makes it once the stream's earlier work has run, and later work waits
/// for it.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(
    h_stream: CUstream,
    f: cudarc::driver::sys::CUhostFn,
    user_data: *mut c_void,
) -> CUresult {
    guard("cuLaunchHostFunc", || {
        let d = driver()?;
        let (stream, ordinal) = stream_of(d, h_stream)?;
        let f = f.ok_or(cuda::INVALID_VALUE)?;
        let data = user_data as usize;
        sim(d.devices[ordinal as usize]
            .device
            .launch_host(&stream, move || {
                // SAFETY: the caller's contract: `f` may be called once,
                // on another thread, with `user_data`.
                unsafe { f(data as *mut c_void) }
            }))
    })
}
