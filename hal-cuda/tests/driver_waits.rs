//! Which driver calls wait for a stream that waits for a host word nobody
//! has written yet, and which of them hold the process's other driver
//! calls meanwhile: the facts `hal-cuda/src/quiet.rs` is built on, asked
//! of the driver itself with plain driver calls.
//!
//! For each call: a stream waits (`cuStreamWaitValue32_v2`) for a word of
//! registered host memory; a thread makes the call; if it has not returned
//! after [`LOOK`], another thread asks the stream (`cuStreamQuery`), a call
//! that never waits; then the word is written and both must return.
//!
//! On the stand-in the answers must be the stand-in's model of driver 580
//! (`hal-mock/libcuda/src/held.rs`): the frees wait and hold, a context
//! synchronize waits, nothing else waits (VMM's unmap, release and range
//! free among them). On the real driver
//! (`HAL_CUDA_CONFORMANCE_DRIVER=1`, the GPU smoke run) the answers are
//! printed as `driver-waits:` lines, past the test harness's capture, for
//! the run's log: a measurement, not a check.

use std::ffi::c_void;
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

mod common;

/// How long a call may take before it is said to wait.
const LOOK: Duration = Duration::from_millis(300);
/// How long a call may take once the word is written.
const AFTER: Duration = Duration::from_secs(20);

type Ptr = *mut c_void;
type Status = u32;

/// The driver's entry points the probe calls.
struct Driver {
    _lib: libloading::Library,
    ctx: usize,
    push: unsafe extern "C" fn(Ptr) -> Status,
    pop: unsafe extern "C" fn(*mut Ptr) -> Status,
    release: unsafe extern "C" fn(i32) -> Status,
    stream_create: unsafe extern "C" fn(*mut Ptr, u32) -> Status,
    stream_destroy: unsafe extern "C" fn(Ptr) -> Status,
    stream_query: unsafe extern "C" fn(Ptr) -> Status,
    stream_sync: unsafe extern "C" fn(Ptr) -> Status,
    wait_value: unsafe extern "C" fn(Ptr, u64, u32, u32) -> Status,
    host_register: unsafe extern "C" fn(Ptr, usize, u32) -> Status,
    host_device_ptr: unsafe extern "C" fn(*mut u64, Ptr, u32) -> Status,
    host_unregister: unsafe extern "C" fn(Ptr) -> Status,
    alloc: unsafe extern "C" fn(*mut u64, usize) -> Status,
    free: unsafe extern "C" fn(u64) -> Status,
    alloc_host: unsafe extern "C" fn(*mut Ptr, usize) -> Status,
    free_host: unsafe extern "C" fn(Ptr) -> Status,
    ctx_sync: unsafe extern "C" fn() -> Status,
    event_create: unsafe extern "C" fn(*mut Ptr, u32) -> Status,
    event_destroy: unsafe extern "C" fn(Ptr) -> Status,
    htod: unsafe extern "C" fn(u64, *const c_void, usize) -> Status,
    dtoh: unsafe extern "C" fn(Ptr, u64, usize) -> Status,
    mem_create: unsafe extern "C" fn(*mut u64, usize, *const Prop, u64) -> Status,
    mem_release: unsafe extern "C" fn(u64) -> Status,
    reserve: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> Status,
    address_free: unsafe extern "C" fn(u64, usize) -> Status,
    map: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> Status,
    unmap: unsafe extern "C" fn(u64, usize) -> Status,
}

type Prop = cudarc::driver::sys::CUmemAllocationProp;

/// VMM pieces are this long: 2 MiB, the H200's granularity (and a
/// multiple of the stand-in's).
const GRANULE: usize = 2 << 20;

// SAFETY: entry points of a thread-safe driver and a context handle, used
// by each thread with the context pushed.
unsafe impl Send for Driver {}
// SAFETY: see `Send`.
unsafe impl Sync for Driver {}

macro_rules! sym {
    ($lib:expr, $name:literal) => {
        // SAFETY: the driver's entry point of this name has the signature
        // of the field it fills (CUDA driver API, `cuda.h`).
        *unsafe { $lib.get($name.as_bytes()) }.expect($name)
    };
}

impl Driver {
    fn load() -> Driver {
        type Init = unsafe extern "C" fn(u32) -> Status;
        type Retain = unsafe extern "C" fn(*mut Ptr, i32) -> Status;
        // SAFETY: the library hal-cuda loads; its initialisers set up
        // statics only.
        let lib = unsafe { libloading::Library::new(common::library_path()) }.unwrap();
        let init: Init = sym!(lib, "cuInit");
        let retain: Retain = sym!(lib, "cuDevicePrimaryCtxRetain");
        let mut ctx: Ptr = std::ptr::null_mut();
        // SAFETY: plain calls with valid out-pointers.
        unsafe {
            assert_eq!(init(0), 0, "cuInit");
            assert_eq!(retain(&mut ctx, 0), 0, "cuDevicePrimaryCtxRetain");
        }
        Driver {
            ctx: ctx as usize,
            push: sym!(lib, "cuCtxPushCurrent_v2"),
            pop: sym!(lib, "cuCtxPopCurrent_v2"),
            release: sym!(lib, "cuDevicePrimaryCtxRelease_v2"),
            stream_create: sym!(lib, "cuStreamCreate"),
            stream_destroy: sym!(lib, "cuStreamDestroy_v2"),
            stream_query: sym!(lib, "cuStreamQuery"),
            stream_sync: sym!(lib, "cuStreamSynchronize"),
            wait_value: sym!(lib, "cuStreamWaitValue32_v2"),
            host_register: sym!(lib, "cuMemHostRegister_v2"),
            host_device_ptr: sym!(lib, "cuMemHostGetDevicePointer_v2"),
            host_unregister: sym!(lib, "cuMemHostUnregister"),
            alloc: sym!(lib, "cuMemAlloc_v2"),
            free: sym!(lib, "cuMemFree_v2"),
            alloc_host: sym!(lib, "cuMemAllocHost_v2"),
            free_host: sym!(lib, "cuMemFreeHost"),
            ctx_sync: sym!(lib, "cuCtxSynchronize"),
            event_create: sym!(lib, "cuEventCreate"),
            event_destroy: sym!(lib, "cuEventDestroy_v2"),
            htod: sym!(lib, "cuMemcpyHtoD_v2"),
            dtoh: sym!(lib, "cuMemcpyDtoH_v2"),
            mem_create: sym!(lib, "cuMemCreate"),
            mem_release: sym!(lib, "cuMemRelease"),
            reserve: sym!(lib, "cuMemAddressReserve"),
            address_free: sym!(lib, "cuMemAddressFree"),
            map: sym!(lib, "cuMemMap"),
            unmap: sym!(lib, "cuMemUnmap"),
            _lib: lib,
        }
    }

    /// Run `f` with the context pushed on this thread.
    fn entered<R>(&self, f: impl FnOnce() -> R) -> R {
        // SAFETY: the retained primary context, pushed and popped here.
        unsafe { assert_eq!((self.push)(self.ctx as Ptr), 0, "cuCtxPushCurrent_v2") };
        let r = f();
        let mut popped: Ptr = std::ptr::null_mut();
        // SAFETY: pops what was pushed above.
        unsafe { assert_eq!((self.pop)(&mut popped), 0, "cuCtxPopCurrent_v2") };
        r
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // SAFETY: the one retain of `load`.
        unsafe { (self.release)(0) };
    }
}

/// A page of host memory registered with the device.
#[repr(C, align(65536))]
struct Page([AtomicU32; 16384]);

fn page() -> Box<Page> {
    Box::new(Page(std::array::from_fn(|_| AtomicU32::new(0))))
}

/// Register `page`; its device address.
fn register(d: &Driver, page: &Page) -> u64 {
    let p = page.0.as_ptr() as Ptr;
    let mut dev = 0u64;
    // SAFETY: the page is page-aligned heap memory that outlives its
    // registration (unregistered before it drops).
    d.entered(|| unsafe {
        assert_eq!((d.host_register)(p, size_of::<Page>(), 3), 0, "register");
        assert_eq!((d.host_device_ptr)(&mut dev, p, 0), 0, "device pointer");
    });
    dev
}

/// What a call did beside a stream that waits for an unwritten word.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    /// It had not returned after [`LOOK`].
    waits: bool,
    /// Meanwhile, `cuStreamQuery` of another thread had not returned either.
    holds: bool,
    /// What it returned once the word was written.
    status: Status,
}

/// Run `call` (made with the context pushed) beside a stream waiting for
/// an unwritten word.
fn probe(d: &Arc<Driver>, call: impl FnOnce(&Driver) -> Status + Send + 'static) -> Answer {
    let gate = page();
    let word = register(d, &gate);
    let mut stream: Ptr = std::ptr::null_mut();
    // SAFETY: plain calls with the context pushed and valid arguments; the
    // wait reads the registered word, which lives until after the sync.
    d.entered(|| unsafe {
        assert_eq!((d.stream_create)(&mut stream, 1), 0, "cuStreamCreate");
        assert_eq!((d.wait_value)(stream, word, 1, 1), 0, "wait");
    });
    let (done_tx, done) = mpsc::channel();
    let caller = Arc::clone(d);
    std::thread::spawn(move || {
        let status = caller.entered(|| call(&caller));
        let _ = done_tx.send(status);
    });
    let mut status = done.recv_timeout(LOOK).ok();
    let waits = status.is_none();
    let mut holds = false;
    let stream_addr = stream as usize;
    let (query_tx, queried) = mpsc::channel();
    if waits {
        let asker = Arc::clone(d);
        std::thread::spawn(move || {
            // SAFETY: a live stream of the pushed context.
            let s = asker.entered(|| unsafe { (asker.stream_query)(stream_addr as Ptr) });
            let _ = query_tx.send(s);
        });
        holds = queried.recv_timeout(LOOK).is_err();
    }
    gate.0[0].store(1, Ordering::Release);
    if status.is_none() {
        status = done.recv_timeout(AFTER).ok();
    }
    if holds {
        queried
            .recv_timeout(AFTER)
            .expect("cuStreamQuery after the word was written");
    }
    let status = status.expect("the call returned after the word was written");
    // SAFETY: the stream is drained, then destroyed; the page unregistered
    // before it drops.
    d.entered(|| unsafe {
        assert_eq!((d.stream_sync)(stream), 0, "cuStreamSynchronize");
        assert_eq!((d.stream_destroy)(stream), 0, "cuStreamDestroy_v2");
        assert_eq!((d.host_unregister)(gate.0.as_ptr() as Ptr), 0, "unregister");
    });
    Answer {
        waits,
        holds,
        status,
    }
}

/// The probed calls, each with the context pushed by the caller, on
/// memory, events and streams made for it and used by nothing else.
impl Driver {
    fn mem_free(&self, p: u64) -> Status {
        // SAFETY: `p` came from cuMemAlloc_v2 and is freed once.
        unsafe { (self.free)(p) }
    }

    fn mem_free_host(&self, p: usize) -> Status {
        // SAFETY: `p` came from cuMemAllocHost_v2 and is freed once.
        unsafe { (self.free_host)(p as Ptr) }
    }

    fn synchronize(&self) -> Status {
        // SAFETY: no argument; the context is current.
        unsafe { (self.ctx_sync)() }
    }

    fn unregister(&self, p: usize) -> Status {
        // SAFETY: `p` is a page this test registered, unregistered once,
        // before it drops.
        unsafe { (self.host_unregister)(p as Ptr) }
    }

    fn register_at(&self, p: usize) -> Status {
        // SAFETY: `p` is a live page of this test, unregistered before it
        // drops.
        unsafe { (self.host_register)(p as Ptr, size_of::<Page>(), 3) }
    }

    fn allocate(&self, len: usize) -> (Status, u64) {
        let mut p = 0u64;
        // SAFETY: a valid out-pointer.
        let s = unsafe { (self.alloc)(&mut p, len) };
        (s, p)
    }

    fn allocate_host(&self, len: usize) -> usize {
        let mut p: Ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { (self.alloc_host)(&mut p, len) }, 0);
        p as usize
    }

    fn new_event(&self) -> usize {
        let mut e: Ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; 2 is CU_EVENT_DISABLE_TIMING.
        assert_eq!(unsafe { (self.event_create)(&mut e, 2) }, 0);
        e as usize
    }

    fn destroy_event(&self, e: usize) -> Status {
        // SAFETY: `e` came from cuEventCreate and is destroyed once.
        unsafe { (self.event_destroy)(e as Ptr) }
    }

    fn stream_round(&self) -> Status {
        let mut s: Ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer, then the stream just made, once.
        unsafe {
            let made = (self.stream_create)(&mut s, 1);
            if made != 0 {
                return made;
            }
            (self.stream_destroy)(s)
        }
    }

    fn write(&self, to: u64, bytes: &[u8]) -> Status {
        // SAFETY: `to` is device memory of at least `bytes.len()` bytes.
        unsafe { (self.htod)(to, bytes.as_ptr().cast(), bytes.len()) }
    }

    /// Physical memory of one granule on device 0, mapped into a range of
    /// its own: (range, physical handle).
    fn mapped(&self) -> (u64, u64) {
        use cudarc::driver::sys::{CUmemAllocationType, CUmemLocationType};
        // SAFETY: plain C data whose all-zero value is its default.
        let mut prop: Prop = unsafe { std::mem::zeroed() };
        prop.type_ = CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        let (mut handle, mut range) = (0u64, 0u64);
        // SAFETY: valid out-pointers and a filled-in property structure;
        // the range is reserved for the one mapping made here.
        unsafe {
            assert_eq!(
                (self.mem_create)(&mut handle, GRANULE, &prop, 0),
                0,
                "cuMemCreate"
            );
            assert_eq!((self.reserve)(&mut range, GRANULE, 0, 0, 0), 0, "reserve");
            assert_eq!((self.map)(range, GRANULE, 0, handle, 0), 0, "cuMemMap");
        }
        (range, handle)
    }

    fn vmm_unmap(&self, range: u64) -> Status {
        // SAFETY: the one mapping of `range`, unmapped once.
        unsafe { (self.unmap)(range, GRANULE) }
    }

    fn vmm_release(&self, handle: u64) -> Status {
        // SAFETY: a handle of cuMemCreate, released once.
        unsafe { (self.mem_release)(handle) }
    }

    fn vmm_address_free(&self, range: u64) -> Status {
        // SAFETY: a range of cuMemAddressReserve with nothing mapped, freed once.
        unsafe { (self.address_free)(range, GRANULE) }
    }

    fn read(&self, from: u64, bytes: &mut [u8]) -> Status {
        // SAFETY: `from` is device memory of at least `bytes.len()` bytes.
        unsafe { (self.dtoh)(bytes.as_mut_ptr().cast(), from, bytes.len()) }
    }
}

#[test]
fn which_driver_calls_wait_for_a_stream_that_waits_for_a_word() {
    let d = Arc::new(Driver::load());
    let mut answers: Vec<(&str, Answer)> = Vec::new();

    let (s, mem) = d.entered(|| d.allocate(1 << 20));
    assert_eq!(s, 0);
    answers.push(("cuMemFree_v2", probe(&d, move |d| d.mem_free(mem))));

    let host = d.entered(|| d.allocate_host(1 << 20));
    answers.push(("cuMemFreeHost", probe(&d, move |d| d.mem_free_host(host))));

    answers.push(("cuCtxSynchronize", probe(&d, Driver::synchronize)));

    let other = page();
    register(&d, &other);
    let other_addr = other.0.as_ptr() as usize;
    answers.push((
        "cuMemHostUnregister",
        probe(&d, move |d| d.unregister(other_addr)),
    ));

    let third = page();
    let third_addr = third.0.as_ptr() as usize;
    answers.push((
        "cuMemHostRegister_v2",
        probe(&d, move |d| d.register_at(third_addr)),
    ));
    assert_eq!(d.entered(|| d.unregister(third_addr)), 0);

    let (tx, rx) = mpsc::channel();
    answers.push((
        "cuMemAlloc_v2",
        probe(&d, move |d| {
            let (s, p) = d.allocate(1 << 20);
            let _ = tx.send(p);
            s
        }),
    ));
    let allocated = rx.recv().unwrap();
    assert_eq!(d.entered(|| d.mem_free(allocated)), 0);

    let event = d.entered(|| d.new_event());
    answers.push((
        "cuEventDestroy_v2",
        probe(&d, move |d| d.destroy_event(event)),
    ));

    answers.push((
        "cuStreamCreate + cuStreamDestroy_v2",
        probe(&d, Driver::stream_round),
    ));

    let (s, target) = d.entered(|| d.allocate(4096));
    assert_eq!(s, 0);
    answers.push((
        "cuMemcpyHtoD_v2 (pageable)",
        probe(&d, move |d| d.write(target, &[7u8; 4096])),
    ));
    answers.push((
        "cuMemcpyDtoH_v2 (pageable)",
        probe(&d, move |d| d.read(target, &mut [0u8; 4096])),
    ));
    assert_eq!(d.entered(|| d.mem_free(target)), 0);

    let (range, handle) = d.entered(|| d.mapped());
    answers.push(("cuMemUnmap", probe(&d, move |d| d.vmm_unmap(range))));
    answers.push(("cuMemRelease", probe(&d, move |d| d.vmm_release(handle))));
    answers.push((
        "cuMemAddressFree",
        probe(&d, move |d| d.vmm_address_free(range)),
    ));
    drop(other);
    drop(third);

    for (call, a) in &answers {
        assert_eq!(a.status, 0, "{call} failed: {}", a.status);
    }
    if common::on_driver() {
        let mut err = std::io::stderr();
        for (call, a) in &answers {
            let _ = writeln!(
                err,
                "driver-waits: {call}: waits for the stream: {}, holds other calls: {}",
                a.waits, a.holds
            );
        }
        return;
    }
    // The stand-in's model of driver 580.
    for (call, a) in &answers {
        let frees = call.starts_with("cuMemFree");
        let waits = frees || *call == "cuCtxSynchronize";
        assert_eq!(
            (a.waits, a.holds),
            (waits, frees),
            "{call} on the stand-in: waits {}, holds {}",
            a.waits,
            a.holds
        );
    }
}
