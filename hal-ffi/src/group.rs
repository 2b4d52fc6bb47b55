//! Groups: a rendezvous of N processes by name (`hal::group`) for C.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use hal_facade::group::{Group, GroupOptions};
use hal_facade::objects::{Collective, GroupObj};

use crate::device::{need, put};
use crate::last_error::call;
use crate::memory::timeout;
use crate::status::{hal_status, Failure};
use crate::table::{Kind, Table};
use crate::text::str_arg;

/// A membership of a group (opaque): `hal_group_join`, released (left)
/// with `hal_group_release`.
#[allow(non_camel_case_types)]
pub struct hal_group {
    _private: [u8; 0],
}

static GROUPS: Table<GroupObj<Group>> = Table::new(Kind::Group);

/// Join the group `name` of `size` processes of this user, and wait until
/// all joined: ranks follow the order of joining. Every wait of the group
/// lasts at most `timeout_ns` (negative: no limit); a member that dies
/// makes the others' calls answer `HAL_ERR_CLOSED` naming it. Every member
/// passes the same `size` and `max_payload` (the most bytes a member posts
/// a round; 0: 4096).
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string; `out` is NULL or valid for a
/// write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_group_join(
    name: *const c_char,
    size: u32,
    timeout_ns: i64,
    max_payload: u32,
    out: *mut *mut hal_group,
) -> hal_status {
    call("hal_group_join", || {
        need(out, "out")?;
        // SAFETY: per the contract.
        let name = unsafe { str_arg(name, "name") }?;
        let mut options = GroupOptions::default();
        if let Some(t) = timeout(timeout_ns) {
            options = options.timeout(t);
        } else {
            options = options.timeout(std::time::Duration::from_secs(u64::from(u32::MAX)));
        }
        if max_payload > 0 {
            options = options.max_payload(max_payload as usize);
        }
        let group = Group::join(name, size as usize, &options)?;
        let token = GROUPS.insert(Arc::new(GroupObj::new(group, "this group")));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_group, "out") }
    })
}

/// This member's rank, and the group's size.
///
/// # Safety
///
/// `out_rank` and `out_size` are NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_group_rank(
    group: *const hal_group,
    out_rank: *mut u32,
    out_size: *mut u32,
) -> hal_status {
    call("hal_group_rank", || {
        // SAFETY: per the contract.
        unsafe { rank_out(&GROUPS, group as usize, out_rank, out_size) }
    })
}

/// This member's rank and the group's size of the group `token` of
/// `table`, at `out_rank` and `out_size`.
///
/// # Safety
///
/// `out_rank` and `out_size` are NULL or valid for a write.
pub(crate) unsafe fn rank_out<G: Collective>(
    table: &Table<GroupObj<G>>,
    token: usize,
    out_rank: *mut u32,
    out_size: *mut u32,
) -> Result<(), Failure> {
    need(out_rank, "out_rank")?;
    need(out_size, "out_size")?;
    let g = table.get(token, "group")?;
    // SAFETY: checked not NULL above.
    unsafe {
        put(out_rank, g.rank() as u32, "out_rank")?;
        put(out_size, g.size() as u32, "out_size")
    }
}

/// The process id of the member of rank `rank`.
///
/// # Safety
///
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_group_member_pid(
    group: *const hal_group,
    rank: u32,
    out: *mut u32,
) -> hal_status {
    call("hal_group_member_pid", || {
        need(out, "out")?;
        let g = GROUPS.get(group as usize, "group")?;
        let pid = g.member(rank as usize)?.pid;
        // SAFETY: checked not NULL above.
        unsafe { put(out, pid, "out") }
    })
}

/// Post `len` bytes of `data` and receive every member's: member `i`'s
/// bytes are written at `out + i * stride` and their length at
/// `out_lens[i]`. `out` holds `size * stride` bytes and `out_lens` `size`
/// lengths; a payload longer than `stride` is `HAL_ERR_INVALID_ARGUMENT`
/// (pass the group's `max_payload` as `stride` to fit every one).
///
/// # Safety
///
/// `data` is valid for `len` bytes (or `len` is 0); `out` for
/// `size * stride` bytes and `out_lens` for `size` lengths, `size` the
/// group's.
#[no_mangle]
pub unsafe extern "C" fn hal_group_all_gather(
    group: *mut hal_group,
    data: *const c_void,
    len: usize,
    out: *mut c_void,
    stride: usize,
    out_lens: *mut usize,
) -> hal_status {
    call("hal_group_all_gather", || {
        // SAFETY: per the contract.
        unsafe { all_gather(&GROUPS, group as usize, data, len, out, stride, out_lens) }
    })
}

/// Post `len` bytes of `data` in the group `token` of `table` and write
/// every member's to `out` and `out_lens` ([`put_gathered`]).
///
/// # Safety
///
/// `data` is valid for `len` bytes (or `len` is 0); `out` for
/// `size * stride` bytes and `out_lens` for `size` lengths, `size` the
/// group's.
pub(crate) unsafe fn all_gather<G: Collective>(
    table: &Table<GroupObj<G>>,
    token: usize,
    data: *const c_void,
    len: usize,
    out: *mut c_void,
    stride: usize,
    out_lens: *mut usize,
) -> Result<(), Failure> {
    need(out, "out")?;
    need(out_lens, "out_lens")?;
    let g = table.get(token, "group")?;
    // SAFETY: per the contract.
    let data = unsafe { bytes_arg(data, len, "data") }?;
    let all = g.all_gather(data)?;
    // SAFETY: per the contract, `all` holding `size` payloads.
    unsafe { put_gathered(&all, out, stride, out_lens) }
}

/// Write the payloads `all` of an all-gather: payload `i` at
/// `out + i * stride`, its length at `out_lens[i]`; a payload longer than
/// `stride` is `HAL_ERR_INVALID_ARGUMENT`, and nothing is written.
///
/// # Safety
///
/// `out` is valid for `all.len() * stride` bytes and `out_lens` for
/// `all.len()` lengths.
pub(crate) unsafe fn put_gathered(
    all: &[Vec<u8>],
    out: *mut c_void,
    stride: usize,
    out_lens: *mut usize,
) -> Result<(), Failure> {
    if let Some((i, long)) = all.iter().enumerate().find(|(_, p)| p.len() > stride) {
        return Err(Failure::invalid(format!(
            "member {i} posted {} bytes, over the stride of {stride}",
            long.len()
        )));
    }
    for (i, payload) in all.iter().enumerate() {
        // SAFETY: `out` holds `size * stride` bytes and `payload` fits
        // in `stride` (checked above); `out_lens` holds `size` lengths.
        unsafe {
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                out.cast::<u8>().add(i * stride),
                payload.len(),
            );
            out_lens.add(i).write(payload.len());
        }
    }
    Ok(())
}

/// Receive what the member of rank `root` posts: `data` (`len` bytes) at
/// `root`, ignored elsewhere. Up to `cap` bytes are written to `out` and
/// the length to `out_len`; a longer payload is `HAL_ERR_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `data` is valid for `len` bytes (or `len` is 0); `out` for `cap` bytes;
/// `out_len` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_group_broadcast(
    group: *mut hal_group,
    root: u32,
    data: *const c_void,
    len: usize,
    out: *mut c_void,
    cap: usize,
    out_len: *mut usize,
) -> hal_status {
    call("hal_group_broadcast", || {
        // SAFETY: per the contract.
        unsafe { broadcast(&GROUPS, group as usize, root, data, len, out, cap, out_len) }
    })
}

/// Receive in the group `token` of `table` what the member of rank `root`
/// posts (`len` bytes of `data` at `root`), written to `out` and
/// `out_len` ([`put_received`]).
///
/// # Safety
///
/// `data` is valid for `len` bytes (or `len` is 0); `out` for `cap` bytes;
/// `out_len` NULL or valid for a write.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn broadcast<G: Collective>(
    table: &Table<GroupObj<G>>,
    token: usize,
    root: u32,
    data: *const c_void,
    len: usize,
    out: *mut c_void,
    cap: usize,
    out_len: *mut usize,
) -> Result<(), Failure> {
    need(out_len, "out_len")?;
    let g = table.get(token, "group")?;
    // SAFETY: per the contract.
    let data = unsafe { bytes_arg(data, len, "data") }?;
    let got = g.broadcast(root as usize, data)?;
    // SAFETY: per the contract; `out_len` checked not NULL above.
    unsafe { put_received(&got, out, cap, out_len) }
}

/// Write the payload `got` of a broadcast to `out` (`cap` bytes) and its
/// length to `out_len`; a longer payload is `HAL_ERR_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `out` is NULL or valid for `cap` bytes; `out_len` is not NULL and valid
/// for a write.
pub(crate) unsafe fn put_received(
    got: &[u8],
    out: *mut c_void,
    cap: usize,
    out_len: *mut usize,
) -> Result<(), Failure> {
    if got.len() > cap {
        return Err(Failure::invalid(format!(
            "the broadcast carries {} bytes, over `cap` ({cap})",
            got.len()
        )));
    }
    if !got.is_empty() {
        need(out, "out")?;
        // SAFETY: `out` holds `cap` bytes, and `got` fits (checked).
        unsafe { std::ptr::copy_nonoverlapping(got.as_ptr(), out.cast::<u8>(), got.len()) };
    }
    // SAFETY: not NULL per the contract.
    unsafe { put(out_len, got.len(), "out_len") }
}

/// Wait until every member called `hal_group_barrier`.
#[no_mangle]
pub extern "C" fn hal_group_barrier(group: *mut hal_group) -> hal_status {
    call("hal_group_barrier", || {
        Ok(GROUPS.get(group as usize, "group")?.barrier()?)
    })
}

/// Leave the group. A second release is `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_group_release(group: *mut hal_group) -> hal_status {
    call("hal_group_release", || {
        GROUPS.remove(group as usize, "group").map(drop)
    })
}

/// `len` bytes at `data` as a slice (empty for `len` 0, whatever `data`).
///
/// # Safety
///
/// `data` is valid for `len` bytes when `len` is not 0.
pub(crate) unsafe fn bytes_arg<'a>(
    data: *const c_void,
    len: usize,
    argument: &str,
) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(Failure::null(argument));
    }
    // SAFETY: not NULL and `len` bytes readable per the contract.
    Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) })
}
