//! Contexts, memory, streams and events through the C ABI of the built
//! shared library. Tests that run in parallel use devices of their own:
//! primary contexts are process-wide.

mod common;

use std::ffi::c_void;
use std::ptr::{null, null_mut};

use common::{cu, init, Current, OK};
use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUevent, CUresult, CUstream};

use CUresult::{
    CUDA_ERROR_INVALID_CONTEXT as INVALID_CONTEXT, CUDA_ERROR_INVALID_HANDLE as INVALID_HANDLE,
    CUDA_ERROR_INVALID_VALUE as INVALID_VALUE, CUDA_ERROR_NOT_FOUND as NOT_FOUND,
    CUDA_ERROR_NOT_READY as NOT_READY,
};

const KIB: usize = 1024;

fn current() -> CUcontext {
    let mut c = null_mut();
    // SAFETY: valid output pointer.
    assert_eq!(unsafe { (cu().cuCtxGetCurrent)(&mut c) }, OK);
    c
}

#[test]
fn context_stacks_are_per_thread() {
    let cu = init();
    let (mut c1, mut c1b, mut c2) = (null_mut(), null_mut(), null_mut());
    // SAFETY: valid output pointers; handles are the library's.
    unsafe {
        assert_eq!((cu.cuDevicePrimaryCtxRetain)(&mut c1, 1), OK);
        assert_eq!((cu.cuDevicePrimaryCtxRetain)(&mut c1b, 1), OK);
        assert_eq!((cu.cuDevicePrimaryCtxRetain)(&mut c2, 2), OK);
        assert!(!c1.is_null());
        assert_eq!(c1, c1b, "one primary context per device");
        assert_ne!(c1, c2);
        assert_eq!((cu.cuDevicePrimaryCtxRetain)(null_mut(), 1), INVALID_VALUE);
        assert_eq!(
            (cu.cuDevicePrimaryCtxRetain)(&mut c1b, 9),
            CUresult::CUDA_ERROR_INVALID_DEVICE
        );

        assert_eq!(current(), null_mut());
        assert_eq!(
            (cu.cuCtxPopCurrent_v2)(null_mut()),
            INVALID_CONTEXT,
            "empty stack"
        );
        assert_eq!((cu.cuCtxPushCurrent_v2)(null_mut()), INVALID_VALUE);
        let bogus = std::ptr::without_provenance_mut(0x1234_5678);
        assert_eq!((cu.cuCtxPushCurrent_v2)(bogus), INVALID_CONTEXT);
        assert_eq!((cu.cuCtxSetCurrent)(bogus), INVALID_CONTEXT);

        assert_eq!((cu.cuCtxPushCurrent_v2)(c1), OK);
        assert_eq!((cu.cuCtxPushCurrent_v2)(c2), OK);
        assert_eq!(current(), c2);
        // Another thread has a stack of its own.
        let c1_addr = c1.addr();
        std::thread::spawn(move || {
            let cu = common::cu();
            assert_eq!(current(), null_mut());
            let c1 = std::ptr::with_exposed_provenance_mut(c1_addr);
            assert_eq!((cu.cuCtxSetCurrent)(c1), OK, "set on an empty stack pushes");
            assert_eq!(current(), c1);
            assert_eq!((cu.cuCtxSynchronize)(), OK);
            assert_eq!((cu.cuCtxSetCurrent)(null_mut()), OK, "null pops");
            assert_eq!(current(), null_mut());
            assert_eq!(
                (cu.cuCtxSetCurrent)(null_mut()),
                OK,
                "null on empty: nothing"
            );
            assert_eq!((cu.cuCtxSynchronize)(), INVALID_CONTEXT);
        })
        .join()
        .unwrap();
        assert_eq!(current(), c2, "untouched by the other thread");
        // Set replaces the top.
        assert_eq!((cu.cuCtxSetCurrent)(c1), OK);
        assert_eq!(current(), c1);
        let mut popped = null_mut();
        assert_eq!((cu.cuCtxPopCurrent_v2)(&mut popped), OK);
        assert_eq!(popped, c1);
        assert_eq!(current(), c1, "the first push is below");
        assert_eq!(
            (cu.cuCtxPopCurrent_v2)(null_mut()),
            OK,
            "the output is optional"
        );
        assert_eq!(current(), null_mut());

        assert_eq!((cu.cuDevicePrimaryCtxRelease_v2)(1), OK);
        assert_eq!((cu.cuDevicePrimaryCtxRelease_v2)(1), OK);
        assert_eq!((cu.cuDevicePrimaryCtxRelease_v2)(2), OK);
        assert_eq!(
            (cu.cuDevicePrimaryCtxRelease_v2)(2),
            INVALID_CONTEXT,
            "not retained"
        );
    }
}

#[test]
fn releasing_the_last_reference_destroys_the_context() {
    let cu = init();
    let mut ctx = null_mut();
    let mut p: CUdeviceptr = 0;
    let mut s: CUstream = null_mut();
    // SAFETY: valid output pointers; handles are the library's.
    unsafe {
        assert_eq!((cu.cuCtxPushCurrent_v2)(null_mut()), INVALID_VALUE);
        assert_eq!((cu.cuDevicePrimaryCtxRetain)(&mut ctx, 3), OK);
        assert_eq!((cu.cuCtxPushCurrent_v2)(ctx), OK);
        assert_eq!((cu.cuMemAlloc_v2)(&mut p, 4 * KIB), OK);
        assert_eq!((cu.cuStreamCreate)(&mut s, 0), OK);
        assert_eq!((cu.cuDevicePrimaryCtxRelease_v2)(3), OK);
        // Still current on this thread, but inactive.
        assert_eq!(current(), ctx);
        assert_eq!((cu.cuMemAlloc_v2)(&mut p, 4 * KIB), INVALID_CONTEXT);
        assert_eq!((cu.cuDevicePrimaryCtxRetain)(&mut ctx, 3), OK);
        assert_eq!(
            (cu.cuMemFree_v2)(p),
            INVALID_VALUE,
            "freed with its context"
        );
        assert_eq!(
            (cu.cuStreamSynchronize)(s),
            INVALID_HANDLE,
            "destroyed with its context"
        );
        assert_eq!((cu.cuCtxPopCurrent_v2)(null_mut()), OK);
        assert_eq!((cu.cuDevicePrimaryCtxRelease_v2)(3), OK);
    }
}

#[test]
fn memory_copies_and_ranges() {
    let cu = init();
    let (mut a, mut b, mut m) = (0 as CUdeviceptr, 0 as CUdeviceptr, 0 as CUdeviceptr);
    let mut host: *mut c_void = null_mut();
    // SAFETY: valid output pointers and host buffers of the lengths given.
    unsafe {
        assert_eq!(
            (cu.cuMemAlloc_v2)(&mut a, 4 * KIB),
            INVALID_CONTEXT,
            "no context"
        );
        let _ctx = Current::on(0);
        assert_eq!((cu.cuMemAlloc_v2)(&mut a, 0), INVALID_VALUE);
        assert_eq!((cu.cuMemAlloc_v2)(null_mut(), 16), INVALID_VALUE);
        assert_eq!((cu.cuMemAlloc_v2)(&mut a, 8 * KIB), OK);
        assert_eq!((cu.cuMemAlloc_v2)(&mut b, 8 * KIB), OK);
        assert_ne!(a, 0);
        assert_ne!(a, b);

        // Host to device at base + offset, device to device, back to the host.
        let data = *b"stand-in libcuda";
        assert_eq!(
            (cu.cuMemcpyHtoD_v2)(a + 100, data.as_ptr().cast(), data.len()),
            OK
        );
        assert_eq!((cu.cuMemcpyDtoD_v2)(b + 4096, a + 100, data.len()), OK);
        let mut out = [0u8; 16];
        assert_eq!(
            (cu.cuMemcpyDtoH_v2)(out.as_mut_ptr().cast(), b + 4096, 16),
            OK
        );
        assert_eq!(out, data);
        // Past the end of the allocation, or nowhere.
        assert_eq!(
            (cu.cuMemcpyHtoD_v2)(a + 8 * KIB as u64 - 4, data.as_ptr().cast(), 16),
            INVALID_VALUE
        );
        assert_eq!(
            (cu.cuMemcpyDtoH_v2)(out.as_mut_ptr().cast(), 16, 16),
            INVALID_VALUE
        );
        assert_eq!(
            (cu.cuMemcpyDtoD_v2)(b, a + 8 * KIB as u64, 1),
            INVALID_VALUE
        );
        assert_eq!((cu.cuMemcpyHtoD_v2)(a, null(), 16), INVALID_VALUE);
        assert_eq!((cu.cuMemcpyDtoH_v2)(null_mut(), a, 16), INVALID_VALUE);
        assert_eq!((cu.cuMemcpyHtoD_v2)(a, null(), 0), OK, "nothing to copy");

        // Address ranges, from inside the allocation.
        let (mut base, mut size) = (0 as CUdeviceptr, 0usize);
        assert_eq!(
            (cu.cuMemGetAddressRange_v2)(&mut base, &mut size, a + 5000),
            OK
        );
        assert_eq!((base, size), (a, 8 * KIB));
        assert_eq!((cu.cuMemGetAddressRange_v2)(null_mut(), &mut size, b), OK);
        assert_eq!(
            (cu.cuMemGetAddressRange_v2)(&mut base, null_mut(), b + 1),
            OK
        );
        assert_eq!(base, b);
        assert_eq!(
            (cu.cuMemGetAddressRange_v2)(&mut base, &mut size, 8),
            NOT_FOUND
        );

        // Pinned host memory: a host pointer, and copies to and from it.
        assert_eq!((cu.cuMemAllocHost_v2)(&mut host, 4 * KIB), OK);
        assert!(!host.is_null());
        host.cast::<u8>().write_bytes(0x5a, 64);
        assert_eq!((cu.cuMemcpyHtoD_v2)(a, host, 64), OK);
        assert_eq!(
            (cu.cuMemcpyDtoH_v2)(out.as_mut_ptr().cast(), a + 48, 16),
            OK
        );
        assert_eq!(out, [0x5a; 16]);
        assert_eq!(
            (cu.cuMemFree_v2)(host.addr() as u64),
            INVALID_VALUE,
            "not device memory"
        );
        assert_eq!(
            (cu.cuMemFreeHost)(host.cast::<u8>().add(1).cast()),
            INVALID_VALUE,
            "not a base"
        );
        assert_eq!((cu.cuMemFreeHost)(host), OK);
        assert_eq!((cu.cuMemFreeHost)(host), INVALID_VALUE, "freed twice");
        assert_eq!((cu.cuMemAllocHost_v2)(null_mut(), 64), INVALID_VALUE);

        // Managed memory.
        assert_eq!((cu.cuMemAllocManaged)(&mut m, 4 * KIB, 0), INVALID_VALUE);
        assert_eq!((cu.cuMemAllocManaged)(&mut m, 4 * KIB, 3), INVALID_VALUE);
        assert_eq!((cu.cuMemAllocManaged)(&mut m, 4 * KIB, 1), OK);
        assert_eq!((cu.cuMemcpyDtoD_v2)(m + 10, a + 100, 16), OK);
        assert_eq!(
            (cu.cuMemcpyDtoH_v2)(out.as_mut_ptr().cast(), m + 10, 16),
            OK
        );
        assert_eq!(out, data);
        assert_eq!((cu.cuMemFree_v2)(m), OK);

        assert_eq!((cu.cuMemFree_v2)(a + 1), INVALID_VALUE, "not a base");
        assert_eq!((cu.cuMemFree_v2)(a), OK);
        assert_eq!((cu.cuMemFree_v2)(a), INVALID_VALUE, "freed twice");
        assert_eq!(
            (cu.cuMemFreeHost)(b as usize as *mut c_void),
            INVALID_VALUE,
            "not host memory"
        );
        assert_eq!((cu.cuMemFree_v2)(b), OK);
    }
}

#[test]
fn streams_events_and_async_copies() {
    let cu = init();
    let mut s: CUstream = null_mut();
    let mut e: CUevent = null_mut();
    let mut a: CUdeviceptr = 0;
    let mut pinned: *mut c_void = null_mut();
    // SAFETY: valid output pointers and host buffers of the lengths given;
    // handles are the library's.
    unsafe {
        assert_eq!(
            (cu.cuStreamCreate)(&mut s, 0),
            INVALID_CONTEXT,
            "no context"
        );
        let _ctx = Current::on(2);
        assert_eq!((cu.cuStreamCreate)(&mut s, 2), INVALID_VALUE);
        assert_eq!((cu.cuStreamCreate)(null_mut(), 0), INVALID_VALUE);
        assert_eq!((cu.cuStreamCreate)(&mut s, 1), OK);
        assert!(!s.is_null());
        assert_eq!((cu.cuMemAlloc_v2)(&mut a, 64 * KIB), OK);
        assert_eq!((cu.cuMemAllocHost_v2)(&mut pinned, 4 * KIB), OK);

        // Pageable source, memset, copies into pageable and pinned memory.
        let data = vec![7u8; 32 * KIB];
        assert_eq!(
            (cu.cuMemcpyHtoDAsync_v2)(a, data.as_ptr().cast(), data.len(), s),
            OK
        );
        assert_eq!((cu.cuMemsetD8Async)(a + 16, 0xee, 8, s), OK);
        let mut out = [0u8; 32];
        assert_eq!(
            (cu.cuMemcpyDtoHAsync_v2)(out.as_mut_ptr().cast(), a, 32, s),
            OK
        );
        assert_eq!((cu.cuMemcpyDtoHAsync_v2)(pinned, a + 8, 16, s), OK);
        assert_eq!((cu.cuEventCreate)(&mut e, 0), OK);
        assert_eq!((cu.cuEventRecord)(e, s), OK);
        assert_eq!((cu.cuEventSynchronize)(e), OK);
        assert_eq!((cu.cuEventQuery)(e), OK);
        assert_eq!((cu.cuStreamSynchronize)(s), OK);
        assert_eq!((cu.cuStreamQuery)(s), OK);
        assert_eq!(&out[..16], &[7; 16]);
        assert_eq!(&out[16..24], &[0xee; 8]);
        assert_eq!(&out[24..], &[7; 8]);
        let p = std::slice::from_raw_parts(pinned.cast::<u8>(), 16);
        assert_eq!(&p[..8], &[7; 8]);
        assert_eq!(&p[8..], &[0xee; 8]);
        // A pinned source is read when the copy runs.
        pinned.cast::<u8>().write_bytes(3, 16);
        assert_eq!(
            (cu.cuMemcpyHtoDAsync_v2)(a + 1000, pinned, 16, null_mut()),
            OK
        );
        assert_eq!((cu.cuStreamSynchronize)(null_mut()), OK);
        assert_eq!(
            (cu.cuMemcpyDtoH_v2)(out.as_mut_ptr().cast(), a + 1000, 16),
            OK
        );
        assert_eq!(&out[..16], &[3; 16]);

        // The legacy and per-thread handles are the default stream.
        for _ in 0..4 {
            assert_eq!(
                (cu.cuMemsetD8Async)(a, 1, 64 * KIB, std::ptr::without_provenance_mut(1)),
                OK
            );
        }
        assert_eq!((cu.cuEventRecord)(e, null_mut()), OK);
        assert_eq!((cu.cuEventSynchronize)(e), OK);
        assert_eq!((cu.cuEventQuery)(e), OK);
        assert_eq!((cu.cuCtxSynchronize)(), OK);
        assert_eq!((cu.cuStreamQuery)(std::ptr::without_provenance_mut(2)), OK);

        // Out of range and bad handles.
        assert_eq!(
            (cu.cuMemsetD8Async)(a + 64 * KIB as u64, 0, 1, s),
            INVALID_VALUE
        );
        assert_eq!((cu.cuMemcpyHtoDAsync_v2)(a, null(), 1, s), INVALID_VALUE);
        assert_eq!(
            (cu.cuMemcpyDtoHAsync_v2)(null_mut(), a, 1, s),
            INVALID_VALUE
        );
        let bogus = std::ptr::without_provenance_mut(0xdead_0000);
        assert_eq!((cu.cuStreamSynchronize)(bogus), INVALID_HANDLE);
        assert_eq!((cu.cuStreamQuery)(bogus), INVALID_HANDLE);
        assert_eq!((cu.cuEventRecord)(e, bogus), INVALID_HANDLE);
        assert_eq!((cu.cuEventQuery)(bogus.cast()), INVALID_HANDLE);
        assert_eq!(
            (cu.cuEventRecord)(s.cast(), s),
            INVALID_HANDLE,
            "a stream is no event"
        );

        // Event flags: IPC needs DISABLE_TIMING (measured), unknown bits.
        let mut ipc: CUevent = null_mut();
        assert_eq!((cu.cuEventCreate)(&mut ipc, 4), INVALID_VALUE);
        assert_eq!((cu.cuEventCreate)(&mut ipc, 8), INVALID_VALUE);
        assert_eq!((cu.cuEventCreate)(null_mut(), 0), INVALID_VALUE);
        assert_eq!((cu.cuEventCreate)(&mut ipc, 4 | 2 | 1), OK);
        assert_eq!((cu.cuEventQuery)(ipc), OK, "never recorded");
        assert_eq!((cu.cuEventDestroy_v2)(ipc), OK);
        assert_eq!((cu.cuEventDestroy_v2)(ipc), INVALID_HANDLE);

        assert_eq!((cu.cuEventDestroy_v2)(e), OK);
        assert_eq!((cu.cuStreamDestroy_v2)(s), OK);
        assert_eq!((cu.cuStreamDestroy_v2)(s), INVALID_HANDLE);
        assert_eq!((cu.cuStreamDestroy_v2)(null_mut()), INVALID_HANDLE);
        assert_eq!((cu.cuMemFreeHost)(pinned), OK);
        assert_eq!((cu.cuMemFree_v2)(a), OK);
    }
}

#[test]
fn pending_work_is_not_ready() {
    // Queue 1 GiB of memset and ask at once: the simulator's stream runs
    // it on its worker, so the query nearly always finds it pending; a few
    // tries make a descheduled test thread harmless.
    let cu = init();
    let _ctx = Current::on(1);
    let mut s: CUstream = null_mut();
    let mut e: CUevent = null_mut();
    let mut a: CUdeviceptr = 0;
    let size = 64 << 20;
    // SAFETY: valid output pointers; handles are the library's.
    unsafe {
        assert_eq!((cu.cuStreamCreate)(&mut s, 0), OK);
        assert_eq!((cu.cuEventCreate)(&mut e, 2), OK);
        assert_eq!((cu.cuMemAlloc_v2)(&mut a, size), OK);
        let mut seen = (false, false);
        for _ in 0..5 {
            for v in 0..16 {
                assert_eq!((cu.cuMemsetD8Async)(a, v, size, s), OK);
            }
            assert_eq!((cu.cuEventRecord)(e, s), OK);
            let (sq, eq) = ((cu.cuStreamQuery)(s), (cu.cuEventQuery)(e));
            assert!(matches!(sq, OK | NOT_READY), "{sq:?}");
            assert!(matches!(eq, OK | NOT_READY), "{eq:?}");
            seen.0 |= sq == NOT_READY;
            seen.1 |= eq == NOT_READY;
            assert_eq!((cu.cuStreamSynchronize)(s), OK);
            assert_eq!((cu.cuStreamQuery)(s), OK);
            assert_eq!((cu.cuEventQuery)(e), OK);
            if seen == (true, true) {
                break;
            }
        }
        assert_eq!(seen, (true, true), "pending work was never NOT_READY");
        assert_eq!((cu.cuMemFree_v2)(a), OK);
        assert_eq!((cu.cuEventDestroy_v2)(e), OK);
        assert_eq!((cu.cuStreamDestroy_v2)(s), OK);
    }
}

#[test]
fn destroying_a_waiting_stream_returns_and_its_work_runs_on() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};
    // As the driver does: cuStreamDestroy returns at once, and work still
    // queued runs when it can.
    let cu = init();
    let _ctx = Current::on(3);
    let mut s: CUstream = null_mut();
    let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
    let mut dev: CUdeviceptr = 0;
    // SAFETY: valid output pointers; handles are the library's; the two
    // words are in the registered page, which outlives every use of them.
    unsafe {
        let host = std::alloc::alloc_zeroed(layout).cast::<c_void>();
        assert!(!host.is_null());
        // PORTABLE | DEVICEMAP.
        assert_eq!((cu.cuMemHostRegister_v2)(host, 4096, 3), OK);
        assert_eq!((cu.cuMemHostGetDevicePointer_v2)(&mut dev, host, 0), OK);
        let gate = &*host.cast::<AtomicU32>();
        let done = &*host.cast::<AtomicU32>().add(1);
        assert_eq!((cu.cuStreamCreate)(&mut s, 0), OK);
        // EQ 1 on the gate, then 1 into `done`.
        assert_eq!((cu.cuStreamWaitValue32_v2)(s, dev, 1, 1), OK);
        assert_eq!((cu.cuStreamWriteValue32_v2)(s, dev + 4, 1, 0), OK);
        assert_eq!(
            (cu.cuStreamDestroy_v2)(s),
            OK,
            "returns while its work waits"
        );
        assert_eq!((cu.cuStreamQuery)(s), INVALID_HANDLE, "the handle is gone");
        assert_eq!(
            done.load(Ordering::Acquire),
            0,
            "the write is behind the wait"
        );
        gate.store(1, Ordering::Release);
        let end = Instant::now() + Duration::from_secs(20);
        while done.load(Ordering::Acquire) == 0 {
            assert!(
                Instant::now() < end,
                "the destroyed stream's work never ran"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!((cu.cuMemHostUnregister)(host), OK);
        std::alloc::dealloc(host.cast(), layout);
    }
}

/// The host function of the test below: stores 7 into the word it is given.
unsafe extern "C" fn store_seven(word: *mut c_void) {
    // SAFETY: the test gives a live, aligned word that outlives the call.
    unsafe { &*word.cast::<std::sync::atomic::AtomicU32>() }
        .store(7, std::sync::atomic::Ordering::Release);
}

#[test]
fn a_host_function_runs_in_stream_order() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let cu = init();
    let _ctx = Current::on(3);
    let mut s: CUstream = null_mut();
    let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
    let mut dev: CUdeviceptr = 0;
    // SAFETY: valid output pointers; handles are the library's; the words
    // are in the registered page, which outlives the stream's work.
    unsafe {
        let host = std::alloc::alloc_zeroed(layout).cast::<c_void>();
        assert!(!host.is_null());
        assert_eq!((cu.cuMemHostRegister_v2)(host, 4096, 3), OK);
        assert_eq!((cu.cuMemHostGetDevicePointer_v2)(&mut dev, host, 0), OK);
        let gate = &*host.cast::<AtomicU32>();
        let ran = host.cast::<AtomicU32>().add(1);
        assert_eq!((cu.cuStreamCreate)(&mut s, 0), OK);
        assert_eq!(
            (cu.cuLaunchHostFunc)(s, None, ran.cast()),
            INVALID_VALUE,
            "no function"
        );
        assert_eq!((cu.cuStreamWaitValue32_v2)(s, dev, 1, 1), OK);
        assert_eq!((cu.cuLaunchHostFunc)(s, Some(store_seven), ran.cast()), OK);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!((*ran).load(Ordering::Acquire), 0, "behind the wait");
        gate.store(1, Ordering::Release);
        assert_eq!((cu.cuStreamSynchronize)(s), OK);
        assert_eq!(
            (*ran).load(Ordering::Acquire),
            7,
            "ran once the wait passed"
        );
        assert_eq!((cu.cuStreamDestroy_v2)(s), OK);
        assert_eq!((cu.cuMemHostUnregister)(host), OK);
        std::alloc::dealloc(host.cast(), layout);
    }
}
