//! IPC events through the C ABI: which events have a handle, timing
//! refused on IPC events, an open in another process (a child running
//! this executable) that queries, waits on and destroys the event, and the
//! exporter's destroy, which does not wait for such an opener and makes
//! its later calls fail. Tests that run in parallel use devices of their
//! own.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use common::{cu, Current, OK};
use cudarc::driver::sys::{CUevent, CUipcEventHandle, CUresult, CUstream};

use CUresult::{
    CUDA_ERROR_INVALID_HANDLE as INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE as INVALID_VALUE,
    CUDA_ERROR_UNKNOWN as UNKNOWN,
};

/// `CU_EVENT_DISABLE_TIMING`.
const DISABLE_TIMING: u32 = 2;
/// `CU_EVENT_INTERPROCESS`.
const INTERPROCESS: u32 = 4;
/// The variable that hands the child the handle, in hex.
const HANDLE_VAR: &str = "HAL_LIBCUDA_IPC_EVENT_TEST_HANDLE";
/// The same, for the child that outlives the exporter's destroy.
const OUTLIVES_VAR: &str = "HAL_LIBCUDA_IPC_EVENT_TEST_OUTLIVES";

fn hex(bytes: [u8; 64]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(hex: &str) -> [u8; 64] {
    let mut h = [0u8; 64];
    for (i, b) in h.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    h
}

fn event(flags: u32) -> Result<CUevent, CUresult> {
    let mut e = std::ptr::null_mut();
    // SAFETY: valid output pointer.
    match unsafe { (cu().cuEventCreate)(&mut e, flags) } {
        OK => Ok(e),
        r => Err(r),
    }
}

fn stream() -> CUstream {
    let mut s = std::ptr::null_mut();
    // SAFETY: valid output pointer.
    assert_eq!(unsafe { (cu().cuStreamCreate)(&mut s, 0) }, OK);
    s
}

fn handle_of(e: CUevent) -> Result<[u8; 64], CUresult> {
    let mut h = CUipcEventHandle { reserved: [0; 64] };
    // SAFETY: valid output pointer.
    match unsafe { (cu().cuIpcGetEventHandle)(&mut h, e) } {
        OK => Ok(h.reserved.map(|b| b as u8)),
        r => Err(r),
    }
}

fn open(bytes: [u8; 64]) -> Result<CUevent, CUresult> {
    let h = CUipcEventHandle {
        reserved: bytes.map(|b| b as _),
    };
    let mut e = std::ptr::null_mut();
    // SAFETY: valid output pointer; the handle is passed by value.
    match unsafe { (cu().cuIpcOpenEventHandle)(&mut e, h) } {
        OK => Ok(e),
        r => Err(r),
    }
}

fn elapsed(a: CUevent, b: CUevent) -> Result<f32, CUresult> {
    let mut ms = -1.0f32;
    // SAFETY: valid output pointer.
    match unsafe { (cu().cuEventElapsedTime)(&mut ms, a, b) } {
        OK => Ok(ms),
        r => Err(r),
    }
}

fn record_and_sync(e: CUevent, s: CUstream) {
    // SAFETY: live handles.
    unsafe {
        assert_eq!((cu().cuEventRecord)(e, s), OK);
        assert_eq!((cu().cuStreamSynchronize)(s), OK);
    }
}

fn destroy(e: CUevent) -> CUresult {
    // SAFETY: plain call.
    unsafe { (cu().cuEventDestroy_v2)(e) }
}

#[test]
fn only_interprocess_events_without_timing_have_a_handle_and_none_is_timed() {
    let _ctx = Current::on(0);
    assert_eq!(
        event(INTERPROCESS).err(),
        Some(INVALID_VALUE),
        "INTERPROCESS without DISABLE_TIMING (measured)"
    );
    let plain = event(0).unwrap();
    let untimed = event(DISABLE_TIMING).unwrap();
    let ipc = event(INTERPROCESS | DISABLE_TIMING).unwrap();
    assert_eq!(handle_of(plain), Err(INVALID_VALUE), "a timing event");
    assert_eq!(handle_of(untimed), Err(INVALID_VALUE), "no INTERPROCESS");
    let h = handle_of(ipc).unwrap();
    assert_eq!(handle_of(ipc), Ok(h), "the same bytes again");
    let mut damaged = h;
    damaged[40] ^= 1;
    assert_eq!(
        open(damaged).err(),
        Some(INVALID_VALUE),
        "bytes no one wrote"
    );

    let s = stream();
    let plain2 = event(0).unwrap();
    record_and_sync(plain, s);
    record_and_sync(plain2, s);
    record_and_sync(ipc, s);
    assert!(elapsed(plain, plain2).unwrap() >= 0.0, "two timing events");
    assert_eq!(elapsed(plain, ipc), Err(INVALID_HANDLE), "an IPC event");
    assert_eq!(elapsed(untimed, plain), Err(INVALID_HANDLE), "no timing");
    assert_eq!(elapsed(plain, std::ptr::null_mut()), Err(INVALID_HANDLE));
    for e in [plain, plain2, untimed, ipc] {
        assert_eq!(destroy(e), OK);
    }
    // SAFETY: a live stream.
    assert_eq!(unsafe { (cu().cuStreamDestroy_v2)(s) }, OK);
}

#[test]
fn another_process_opens_queries_waits_on_and_destroys_the_event() {
    let _ctx = Current::on(1);
    let e = event(INTERPROCESS | DISABLE_TIMING).unwrap();
    let s = stream();
    record_and_sync(e, s);
    let out = hal_core::testing::child("child_opens_the_event")
        .env(HANDLE_VAR, hex(handle_of(e).unwrap()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("child done"),
        "the child ran: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // SAFETY: live handles.
    unsafe {
        assert_eq!((cu().cuEventQuery)(e), OK, "the exporter's event lives on");
        assert_eq!((cu().cuStreamDestroy_v2)(s), OK);
    }
    assert_eq!(destroy(e), OK);
}

/// The child of `another_process_opens_queries_waits_on_and_destroys_the_event`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_opens_the_event() {
    let Ok(hex) = std::env::var(HANDLE_VAR) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let _ctx = Current::on(1);
    let e = open(unhex(&hex)).unwrap();
    let s = stream();
    // SAFETY: live handles.
    unsafe {
        assert_eq!((cu().cuEventQuery)(e), OK, "query of an opened event");
        assert_eq!(
            (cu().cuStreamWaitEvent)(s, e, 0),
            OK,
            "a stream waits on it"
        );
        assert_eq!((cu().cuEventSynchronize)(e), OK);
        assert_eq!((cu().cuStreamSynchronize)(s), OK);
    }
    let timed = event(0).unwrap();
    record_and_sync(timed, s);
    assert_eq!(elapsed(e, timed), Err(INVALID_HANDLE), "measured");
    assert_eq!(elapsed(timed, e), Err(INVALID_HANDLE), "measured");
    assert_eq!(destroy(e), OK, "an opened event is released");
    assert_eq!(destroy(e), INVALID_HANDLE, "once");
    assert_eq!(destroy(timed), OK);
    // SAFETY: a live stream.
    assert_eq!(unsafe { (cu().cuStreamDestroy_v2)(s) }, OK);
    println!("child done");
}

/// The driver's destroy of an IPC event does not wait for the processes
/// that opened it, and their use of it afterwards is undefined
/// (`cuIpcOpenEventHandle`): here it answers `CUDA_ERROR_UNKNOWN`, so that
/// a backend that destroys an exported event under its importers fails.
/// Work the exporter queued before its destroy still completes.
#[test]
fn the_exporters_destroy_does_not_wait_for_an_opener_whose_later_calls_fail() {
    let _ctx = Current::on(2);
    let e = event(INTERPROCESS | DISABLE_TIMING).unwrap();
    let s = stream();
    record_and_sync(e, s);
    let mut child = hal_core::testing::child("child_outlives_the_exporters_destroy")
        .env(OUTLIVES_VAR, hex(handle_of(e).unwrap()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.ends_with("opened")),
        "the child opened the event"
    );
    // SAFETY: live handles; the record is queued before the destroy.
    unsafe {
        assert_eq!((cu().cuEventRecord)(e, s), OK);
    }
    assert_eq!(destroy(e), OK, "the destroy returns with an opener alive");
    // SAFETY: a live stream.
    unsafe {
        assert_eq!((cu().cuStreamSynchronize)(s), OK, "queued work completes");
        assert_eq!((cu().cuStreamDestroy_v2)(s), OK);
    }
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "destroyed").unwrap();
    drop(stdin);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(child.wait().unwrap().success(), "child: {rest:?}");
    assert!(rest.iter().any(|l| l.contains("child done")), "{rest:?}");
}

/// The child of
/// `the_exporters_destroy_does_not_wait_for_an_opener_whose_later_calls_fail`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_outlives_the_exporters_destroy() {
    let Ok(hex) = std::env::var(OUTLIVES_VAR) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let _ctx = Current::on(2);
    let e = open(unhex(&hex)).unwrap();
    let s = stream();
    // SAFETY: a live event.
    assert_eq!(unsafe { (cu().cuEventQuery)(e) }, OK, "before the destroy");
    println!("opened");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "destroyed");
    // SAFETY: handles this process holds; the stand-in answers for the
    // exporter's destroyed event.
    unsafe {
        assert_eq!((cu().cuEventQuery)(e), UNKNOWN, "query after the destroy");
        assert_eq!((cu().cuEventSynchronize)(e), UNKNOWN, "wait after it");
        assert_eq!((cu().cuEventRecord)(e, s), UNKNOWN, "record after it");
        assert_eq!((cu().cuStreamSynchronize)(s), OK, "nothing was queued");
    }
    assert_eq!(destroy(e), OK, "the opened event is still released");
    // SAFETY: a live stream.
    assert_eq!(unsafe { (cu().cuStreamDestroy_v2)(s) }, OK);
    println!("child done");
}
