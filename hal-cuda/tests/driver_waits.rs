//! Which driver calls wait for a stream that waits for a host word nobody
//! has written yet, and which other calls of the process wait behind them
//! meanwhile: the facts `hal-cuda/src/sync/quiet.rs` is built on, asked of the
//! driver itself with plain driver calls.
//!
//! For each call: a stream waits (`cuStreamWaitValue32_v2`) for a word of
//! registered host memory; a thread makes the call; if it has not returned
//! after [`LOOK`], other threads make each of [`OTHERS`] (on objects of
//! their own) and those that have not returned after [`LOOK`] more are
//! held by it; then the word is written and every call must return.
//!
//! On the stand-in the answers must be the stand-in's model of driver 580
//! (`hal-mock/libcuda/src/held.rs`). On the real driver
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
    write_value: unsafe extern "C" fn(Ptr, u64, u32, u32) -> Status,
    event_record: unsafe extern "C" fn(Ptr, Ptr) -> Status,
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
            write_value: sym!(lib, "cuStreamWriteValue32_v2"),
            event_record: sym!(lib, "cuEventRecord"),
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
    /// Where it waits: the [`OTHERS`] that did not return meanwhile.
    holds: Vec<&'static str>,
    /// What it returned once the word was written.
    status: Status,
}

/// What one of [`OTHERS`] leaves to undo once the word is written.
type Undo = Box<dyn FnOnce(&Driver) + Send>;

/// An other call: made with the context pushed, on objects of its own
/// (`gate` is the waiting stream, `word` a registered word nobody waits
/// for); what it returned and what to undo.
type Other = fn(&Driver, gate: usize, word: u64) -> (Status, Undo);

/// The calls asked whether a waiting call holds them.
const OTHERS: [(&str, Other); 8] = [
    ("cuStreamQuery", |d, gate, _| {
        (d.query(gate), Box::new(|_| ()))
    }),
    ("cuMemHostRegister_v2", |d, _, _| {
        let fresh = page();
        let at = fresh.0.as_ptr() as usize;
        let s = d.register_at(at);
        (
            s,
            Box::new(move |d| {
                if s == 0 {
                    assert_eq!(d.entered(|| d.unregister(at)), 0, "unregister");
                }
                drop(fresh);
            }),
        )
    }),
    ("cuEventCreate", |d, _, _| {
        let (s, e) = d.try_new_event();
        (
            s,
            Box::new(move |d| assert_eq!(d.entered(|| d.destroy_event(e)), 0)),
        )
    }),
    ("cuEventDestroy_v2", |d, _, _| {
        let e = d.new_event();
        (d.destroy_event(e), Box::new(|_| ()))
    }),
    ("cuMemAlloc_v2", |d, _, _| {
        let (s, p) = d.allocate(1 << 20);
        (
            s,
            Box::new(move |d| assert_eq!(d.entered(|| d.mem_free(p)), 0)),
        )
    }),
    ("cuStreamCreate + cuStreamDestroy_v2", |d, _, _| {
        (d.stream_round(), Box::new(|_| ()))
    }),
    ("cuStreamWriteValue32_v2", |d, _, word| {
        let (s, stream) = d.stream_write(word);
        (s, Box::new(move |d| d.entered(|| d.drain(stream))))
    }),
    ("cuEventRecord", |d, _, _| {
        let (s, stream, e) = d.record_event();
        (
            s,
            Box::new(move |d| {
                let s = d.entered(|| {
                    d.drain(stream);
                    d.destroy_event(e)
                });
                assert_eq!(s, 0, "cuEventDestroy_v2");
            }),
        )
    }),
];

/// Run `call` (made with the context pushed) beside a stream waiting for
/// an unwritten word; where it waits, ask [`OTHERS`] meanwhile.
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
    let stream_addr = stream as usize;
    let mut asked = Vec::new();
    if waits {
        for (name, other) in OTHERS {
            let (tx, rx) = mpsc::channel();
            let asker = Arc::clone(d);
            // The second word of the gate's page: nobody waits for it.
            let spare = word + 4;
            std::thread::spawn(move || {
                let answer = asker.entered(|| other(&asker, stream_addr, spare));
                let _ = tx.send(answer);
            });
            asked.push((name, rx));
        }
        std::thread::sleep(LOOK);
    }
    // What returned meanwhile, and which are held.
    let early: Vec<_> = asked.iter().map(|(_, rx)| rx.try_recv().ok()).collect();
    let holds = asked
        .iter()
        .zip(&early)
        .filter(|(_, a)| a.is_none())
        .map(|((name, _), _)| *name)
        .collect::<Vec<_>>();
    gate.0[0].store(1, Ordering::Release);
    if status.is_none() {
        status = done.recv_timeout(AFTER).ok();
    }
    let status = status.expect("the call returned after the word was written");
    // Every other call returns too; what it made is undone.
    for ((name, rx), answer) in asked.into_iter().zip(early) {
        let (s, undo) = answer.unwrap_or_else(|| {
            rx.recv_timeout(AFTER)
                .unwrap_or_else(|_| panic!("{name} after the word was written"))
        });
        assert_eq!(s, 0, "{name} failed: {s}");
        undo(d);
    }
    // SAFETY: the stream is drained, then destroyed; the page unregistered
    // before it drops.
    d.entered(|| unsafe {
        d.drain(stream as usize);
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
        let (s, e) = self.try_new_event();
        assert_eq!(s, 0, "cuEventCreate");
        e
    }

    fn try_new_event(&self) -> (Status, usize) {
        let mut e: Ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; 2 is CU_EVENT_DISABLE_TIMING.
        let s = unsafe { (self.event_create)(&mut e, 2) };
        (s, e as usize)
    }

    fn query(&self, stream: usize) -> Status {
        // SAFETY: a live stream of this context; not ready (600) is an
        // answer, not a failure.
        match unsafe { (self.stream_query)(stream as Ptr) } {
            600 => 0,
            s => s,
        }
    }

    /// A new stream and, on it, a write of 1 to the registered `word`.
    fn stream_write(&self, word: u64) -> (Status, usize) {
        let mut s: Ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; `word` is registered host memory
        // that outlives the stream (drained before the page drops).
        unsafe {
            assert_eq!((self.stream_create)(&mut s, 1), 0, "cuStreamCreate");
            ((self.write_value)(s, word, 1, 0), s as usize)
        }
    }

    /// A new stream and event, the event recorded on the stream.
    fn record_event(&self) -> (Status, usize, usize) {
        let e = self.new_event();
        let mut s: Ptr = std::ptr::null_mut();
        // SAFETY: a valid out-pointer, then the stream and event just made.
        unsafe {
            assert_eq!((self.stream_create)(&mut s, 1), 0, "cuStreamCreate");
            ((self.event_record)(e as Ptr, s), s as usize, e)
        }
    }

    /// Wait for `stream`'s work, then destroy it.
    fn drain(&self, stream: usize) {
        // SAFETY: a live stream of this context, destroyed once.
        unsafe {
            assert_eq!((self.stream_sync)(stream as Ptr), 0, "cuStreamSynchronize");
            assert_eq!(
                (self.stream_destroy)(stream as Ptr),
                0,
                "cuStreamDestroy_v2"
            );
        }
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
            let holds = if !a.waits {
                String::new()
            } else if a.holds.is_empty() {
                ", holds: none".to_string()
            } else {
                format!(", holds: {}", a.holds.join(", "))
            };
            let _ = writeln!(
                err,
                "driver-waits: {call}: waits for the stream: {}{holds}",
                a.waits
            );
        }
        return;
    }
    // The stand-in's model of driver 580 (`held.rs`).
    for (call, a) in &answers {
        let holder = HOLDERS.contains(call);
        let waits = holder || *call == "cuCtxSynchronize";
        let holds: Vec<&str> = if holder { HELD.to_vec() } else { Vec::new() };
        assert_eq!(
            (a.waits, &a.holds),
            (waits, &holds),
            "{call} on the stand-in: waits {}, holds {:?}",
            a.waits,
            a.holds
        );
    }
}

/// The calls that wait for the device and hold others meanwhile, on the
/// stand-in.
const HOLDERS: [&str; 3] = ["cuMemFree_v2", "cuMemFreeHost", "cuMemHostUnregister"];

/// What they hold there, among [`OTHERS`]: all but `cuStreamQuery`, as on
/// driver 580 (measured).
const HELD: [&str; 7] = [
    "cuMemHostRegister_v2",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuMemAlloc_v2",
    "cuStreamCreate + cuStreamDestroy_v2",
    "cuStreamWriteValue32_v2",
    "cuEventRecord",
];
