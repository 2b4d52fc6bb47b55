//! Remote memory: another host's export, connected to from a node, read
//! and written here (each operation served and checked by the exporter,
//! the bytes moved zero-copy by UCX), into and from caller buffers or
//! local hal memory.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use hal_facade::remote::RemoteMemory;

use crate::device::{need, put};
use crate::last_error::call;
use crate::memory::{hal_memory, slice_arg, MEMORIES};
use crate::remote_node::{hal_remote_node, NODES};
use crate::status::{hal_status, Failure};
use crate::table::{Kind, Table};
use crate::text::str_arg;

/// Another host's memory (opaque), connected to with `hal_remote_connect`.
/// The exporter counts this process among its importers until it is
/// released with `hal_remote_memory_release`.
#[allow(non_camel_case_types)]
pub struct hal_remote_memory {
    _private: [u8; 0],
}

static REMOTES: Table<RemoteMemory> = Table::new(Kind::RemoteMemory);

/// Connect `node` to the memory export whose handle text is `text`
/// (`hal1r.` ..., from `hal_remote_export_text` on the other host): the
/// exporter and this node prove to each other that they hold the handle's
/// secret. A wrong secret is `HAL_ERR_PERMISSION_DENIED`; an export that
/// ended `HAL_ERR_NOT_FOUND`; malformed text, or a notify's,
/// `HAL_ERR_INVALID_HANDLE`.
///
/// # Safety
///
/// `text` is NULL or a NUL-terminated string; `out` is NULL or valid for a
/// write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_connect(
    node: *const hal_remote_node,
    text: *const c_char,
    out: *mut *mut hal_remote_memory,
) -> hal_status {
    call("hal_remote_connect", || {
        need(out, "out")?;
        let node = NODES.get(node as usize, "node")?;
        // SAFETY: per the contract.
        let text = unsafe { str_arg(text, "text") }?;
        let remote = node.connect(text)?;
        let token = REMOTES.insert(Arc::new(remote));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_remote_memory, "out") }
    })
}

/// The size of the remote memory in bytes.
///
/// # Safety
///
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_size(
    remote: *const hal_remote_memory,
    out: *mut u64,
) -> hal_status {
    call("hal_remote_size", || {
        need(out, "out")?;
        let remote = REMOTES.get(remote as usize, "remote")?;
        // SAFETY: checked not NULL above.
        unsafe { put(out, remote.len(), "out") }
    })
}

/// Read `len` bytes at `offset` of the remote memory into `dst`. Out of
/// range is `HAL_ERR_INVALID_ARGUMENT` (nothing is sent); an exporter that
/// went away `HAL_ERR_CLOSED`.
///
/// # Safety
///
/// `dst` is NULL (only when `len` is 0) or valid for `len` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_read(
    remote: *const hal_remote_memory,
    offset: u64,
    dst: *mut c_void,
    len: usize,
) -> hal_status {
    call("hal_remote_read", || {
        let remote = REMOTES.get(remote as usize, "remote")?;
        if len == 0 {
            return Ok(remote.read(offset, &mut [])?);
        }
        if dst.is_null() {
            return Err(Failure::null("dst"));
        }
        // SAFETY: not NULL and `len` bytes writable per the contract.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), len) };
        Ok(remote.read(offset, dst)?)
    })
}

/// Write `len` bytes of `src` at `offset` of the remote memory. Done when
/// `src` may be reused; `hal_remote_flush` (or `hal_remote_write_signal`)
/// for the bytes to be in the remote memory. A read-only export refuses
/// (`HAL_ERR_PERMISSION_DENIED`, nothing is sent).
///
/// # Safety
///
/// `src` is NULL (only when `len` is 0) or valid for `len` bytes of reads.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_write(
    remote: *const hal_remote_memory,
    offset: u64,
    src: *const c_void,
    len: usize,
) -> hal_status {
    call("hal_remote_write", || {
        let remote = REMOTES.get(remote as usize, "remote")?;
        let src = slice_arg(src, len, "src")?;
        Ok(remote.write(offset, src)?)
    })
}

/// Write `len` bytes of `src` at `offset`, then tell the exporter they are
/// there, in that order: its `hal_remote_export_wait_signal` returns once
/// the bytes are in its memory.
///
/// # Safety
///
/// `src` is NULL (only when `len` is 0) or valid for `len` bytes of reads.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_write_signal(
    remote: *const hal_remote_memory,
    offset: u64,
    src: *const c_void,
    len: usize,
) -> hal_status {
    call("hal_remote_write_signal", || {
        let remote = REMOTES.get(remote as usize, "remote")?;
        let src = slice_arg(src, len, "src")?;
        Ok(remote.write_signal(offset, src)?)
    })
}

/// Read `len` bytes at remote `offset` straight into local hal memory
/// `local` at `local_offset`: host memory of any backend, or device memory
/// where the loaded UCX was built with CUDA.
#[no_mangle]
pub extern "C" fn hal_remote_read_into(
    remote: *const hal_remote_memory,
    offset: u64,
    local: *const hal_memory,
    local_offset: u64,
    len: u64,
) -> hal_status {
    call("hal_remote_read_into", || {
        let remote = REMOTES.get(remote as usize, "remote")?;
        let local = MEMORIES.get(local as usize, "local")?;
        Ok(remote.read_into(offset, &*local, local_offset, len)?)
    })
}

/// Write `len` bytes of local hal memory `local` at `local_offset` to
/// remote `offset` (then `hal_remote_flush`, as for `hal_remote_write`).
#[no_mangle]
pub extern "C" fn hal_remote_write_from(
    remote: *const hal_remote_memory,
    offset: u64,
    local: *const hal_memory,
    local_offset: u64,
    len: u64,
) -> hal_status {
    call("hal_remote_write_from", || {
        let remote = REMOTES.get(remote as usize, "remote")?;
        let local = MEMORIES.get(local as usize, "local")?;
        Ok(remote.write_from(offset, &*local, local_offset, len)?)
    })
}

/// Block until every write issued so far is in the remote memory.
#[no_mangle]
pub extern "C" fn hal_remote_flush(remote: *const hal_remote_memory) -> hal_status {
    call("hal_remote_flush", || {
        let remote = REMOTES.get(remote as usize, "remote")?;
        Ok(remote.flush()?)
    })
}

/// Release remote memory: what was written is flushed, and the exporter
/// stops counting this process among its importers. A second release is
/// `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_remote_memory_release(remote: *mut hal_remote_memory) -> hal_status {
    call("hal_remote_memory_release", || {
        REMOTES.remove(remote as usize, "remote").map(drop)
    })
}
