//! Legacy IPC of device memory through the C ABI: handles of inner
//! pointers, opens refused in the exporting process, reference-counted
//! opens and closes in another process (a child running this executable),
//! and the buffer id. Tests that run in parallel use devices of their own.

mod common;

use std::ffi::c_void;

use common::{cu, protection, Current, OK};
use cudarc::driver::sys::{
    CUdeviceptr, CUipcMemHandle, CUmemorytype, CUpointer_attribute, CUresult,
};

use CUresult::{
    CUDA_ERROR_INVALID_CONTEXT as INVALID_CONTEXT, CUDA_ERROR_INVALID_VALUE as INVALID_VALUE,
    CUDA_ERROR_NOT_SUPPORTED as NOT_SUPPORTED,
};

/// `CU_POINTER_ATTRIBUTE_BUFFER_ID`.
const BUFFER_ID: i32 = CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID as i32;
/// The variable that hands the child the handle, in hex.
const HANDLE_VAR: &str = "HAL_LIBCUDA_IPC_TEST_HANDLE";
const PAGE: usize = 4096;

fn alloc(size: usize) -> CUdeviceptr {
    let mut p = 0;
    // SAFETY: valid output pointer.
    assert_eq!(unsafe { (cu().cuMemAlloc_v2)(&mut p, size) }, OK);
    p
}

fn handle_of(ptr: CUdeviceptr) -> Result<[u8; 64], CUresult> {
    let mut h = CUipcMemHandle { reserved: [0; 64] };
    // SAFETY: valid output pointer.
    match unsafe { (cu().cuIpcGetMemHandle)(&mut h, ptr) } {
        OK => Ok(h.reserved.map(|b| b as u8)),
        e => Err(e),
    }
}

fn open(bytes: [u8; 64]) -> Result<CUdeviceptr, CUresult> {
    let h = CUipcMemHandle {
        reserved: bytes.map(|b| b as _),
    };
    let mut p = 0;
    // SAFETY: valid output pointer; the handle is passed by value.
    match unsafe { (cu().cuIpcOpenMemHandle_v2)(&mut p, h, 1) } {
        OK => Ok(p),
        e => Err(e),
    }
}

fn close(ptr: CUdeviceptr) -> CUresult {
    // SAFETY: plain call.
    unsafe { (cu().cuIpcCloseMemHandle)(ptr) }
}

fn buffer_id(ptr: CUdeviceptr) -> Result<u64, CUresult> {
    let mut id = 0u64;
    // SAFETY: valid output pointer for an unsigned long long.
    match unsafe { (cu().cuPointerGetAttribute)((&raw mut id).cast::<c_void>(), BUFFER_ID, ptr) } {
        OK => Ok(id),
        e => Err(e),
    }
}

/// A 4-byte attribute of the memory at `ptr`.
fn attribute(ptr: CUdeviceptr, which: CUpointer_attribute) -> Result<u32, CUresult> {
    let mut v = 0u32;
    // SAFETY: valid output pointer for an int, a CUmemorytype or a flag.
    match unsafe { (cu().cuPointerGetAttribute)((&raw mut v).cast::<c_void>(), which as i32, ptr) }
    {
        OK => Ok(v),
        e => Err(e),
    }
}

fn write(ptr: CUdeviceptr, bytes: &[u8]) {
    // SAFETY: `bytes` is readable for its length.
    let r = unsafe { (cu().cuMemcpyHtoD_v2)(ptr, bytes.as_ptr().cast(), bytes.len()) };
    assert_eq!(r, OK);
}

fn read(ptr: CUdeviceptr, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    // SAFETY: `out` is writable for `len` bytes.
    let r = unsafe { (cu().cuMemcpyDtoH_v2)(out.as_mut_ptr().cast(), ptr, len) };
    assert_eq!(r, OK);
    out
}

fn free(ptr: CUdeviceptr) {
    // SAFETY: plain call.
    assert_eq!(unsafe { (cu().cuMemFree_v2)(ptr) }, OK);
}

#[test]
fn an_inner_pointers_handle_is_the_bases_and_the_exporter_cannot_open_it() {
    let _ctx = Current::on(0);
    let a = alloc(4 * PAGE);
    let b = alloc(PAGE);
    let h = handle_of(a).unwrap();
    assert_eq!(
        handle_of(a + 2 * PAGE as u64).unwrap(),
        h,
        "the offset is not in it"
    );
    assert_eq!(handle_of(a).unwrap(), h, "the same handle again");
    assert_ne!(
        handle_of(b).unwrap(),
        h,
        "another allocation, another handle"
    );
    assert_eq!(
        open(h),
        Err(INVALID_CONTEXT),
        "open in the exporting process"
    );
    let mut damaged = h;
    damaged[40] ^= 1;
    assert_eq!(open(damaged), Err(INVALID_VALUE), "bytes no exporter wrote");
    assert_eq!(close(a), INVALID_VALUE, "a pointer that was not opened");
    assert_eq!(handle_of(0x10), Err(INVALID_VALUE), "no allocation there");

    let id = buffer_id(a).unwrap();
    assert_eq!(buffer_id(a + 100).unwrap(), id, "one id per allocation");
    assert_ne!(buffer_id(b).unwrap(), id);
    let mut v = 0u64;
    // SAFETY: valid output pointer.
    let other = unsafe { (cu().cuPointerGetAttribute)((&raw mut v).cast(), 1, a) };
    assert_eq!(other, NOT_SUPPORTED, "attributes beyond the buffer id");
    assert_eq!(buffer_id(0x10), Err(INVALID_VALUE), "no allocation there");
    free(b);
    free(a);
}

#[test]
fn managed_and_pinned_host_memory_have_no_ipc_handle() {
    let _ctx = Current::on(1);
    let cu = cu();
    let mut m = 0;
    let mut h: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid output pointers.
    unsafe {
        assert_eq!((cu.cuMemAllocManaged)(&mut m, PAGE, 1), OK);
        assert_eq!((cu.cuMemAllocHost_v2)(&mut h, PAGE), OK);
    }
    assert_eq!(
        handle_of(m),
        Err(INVALID_VALUE),
        "managed memory (measured)"
    );
    assert_eq!(
        handle_of(h as u64),
        Err(INVALID_VALUE),
        "pinned host memory"
    );
    let d = alloc(PAGE);
    use CUpointer_attribute::{
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL as ORDINAL, CU_POINTER_ATTRIBUTE_IS_MANAGED as MANAGED,
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE as TYPE,
    };
    let (host, device) = (
        CUmemorytype::CU_MEMORYTYPE_HOST as u32,
        CUmemorytype::CU_MEMORYTYPE_DEVICE as u32,
    );
    for (p, what, managed, kind) in [
        (m + 8, "managed", 1, device),
        (h as u64 + 8, "pinned host", 0, host),
        (d + 8, "device", 0, device),
    ] {
        assert_eq!(attribute(p, ORDINAL), Ok(1), "{what}: made on device 1");
        assert_eq!(attribute(p, MANAGED), Ok(managed), "{what}: managed?");
        assert_eq!(attribute(p, TYPE), Ok(kind), "{what}: memory type");
    }
    assert_eq!(
        attribute(0x10, ORDINAL),
        Err(INVALID_VALUE),
        "no allocation there"
    );
    free(d);
    for (p, what) in [(m, "managed"), (h as u64, "pinned host")] {
        let perms = protection(p).unwrap_or_default();
        assert!(
            perms.starts_with("rw"),
            "{what} memory is host memory: {perms}"
        );
    }
    // SAFETY: plain calls on live allocations.
    unsafe {
        assert_eq!((cu.cuMemFree_v2)(m), OK);
        assert_eq!((cu.cuMemFreeHost)(h), OK);
    }
}

#[test]
fn another_process_opens_the_memory_by_its_64_bytes() {
    let _ctx = Current::on(2);
    let a = alloc(2 * PAGE);
    assert_eq!(
        protection(a + PAGE as u64).as_deref(),
        Some("---p"),
        "a device pointer has no host access"
    );
    let pattern: Vec<u8> = (0..2 * PAGE).map(|i| (i * 7 % 251) as u8).collect();
    write(a, &pattern);
    let h = handle_of(a + PAGE as u64).unwrap();
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    let out = hal_core::testing::child("child_opens_the_handle")
        .env(HANDLE_VAR, hex)
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
    assert_eq!(read(a + 100, 14), b"from the child", "the child's write");
    assert_eq!(read(a + PAGE as u64, 16), &pattern[PAGE..PAGE + 16]);
    free(a);
}

/// The child of `another_process_opens_the_memory_by_its_64_bytes`.
#[test]
#[ignore = "child entry point: run by its parent"]
fn child_opens_the_handle() {
    let Ok(hex) = std::env::var(HANDLE_VAR) else {
        panic!("a child entry point: run by its parent, which sets its variables");
    };
    let mut h = [0u8; 64];
    for (i, b) in h.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    let _ctx = Current::on(2);
    let p = open(h).unwrap();
    assert_eq!(open(h), Ok(p), "a second open returns the same pointer");
    assert_eq!(
        protection(p).as_deref(),
        Some("---p"),
        "an opened device pointer has no host access"
    );
    let pattern: Vec<u8> = (0..2 * PAGE).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(
        read(p, 2 * PAGE),
        pattern,
        "the whole allocation, from its base"
    );
    write(p + 100, b"from the child");
    assert!(buffer_id(p).is_ok());
    assert_eq!(close(p), OK);
    assert_eq!(read(p, 4), &pattern[..4], "still open after one close");
    assert_eq!(close(p), OK);
    assert_eq!(close(p), INVALID_VALUE, "closed twice already");
    println!("child done");
}
