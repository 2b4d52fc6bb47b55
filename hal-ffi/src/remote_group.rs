//! Groups across hosts: N processes on M hosts join a group by name at
//! one address (`hal::remote::RemoteGroup`), for C: the calls of the
//! group on one host (`hal_group_*`), and each member's node.

use std::ffi::{c_char, c_void};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hal_facade::objects::GroupObj;
use hal_facade::remote::group::parse_secret;
use hal_facade::remote::{RemoteGroup, RemoteGroupOptions};

use crate::device::{need, put};
use crate::group::{all_gather, broadcast, rank_out};
use crate::last_error::call;
use crate::options::read_sized;
use crate::remote_node::{hal_remote_node, NODES};
use crate::status::{hal_status, Failure};
use crate::table::{Kind, Table};
use crate::text::{give_text, str_arg};

/// A membership of a group across hosts (opaque):
/// `hal_remote_group_join_at`, released (left) with
/// `hal_remote_group_release`.
#[allow(non_camel_case_types)]
pub struct hal_remote_group {
    _private: [u8; 0],
}

static GROUPS: Table<GroupObj<RemoteGroup>> = Table::new(Kind::RemoteGroup);

/// Options of `hal_remote_group_join_at`. NULL options, and zero fields,
/// mean the defaults; every member passes the same `secret` and
/// `max_payload`.
///
/// ```c
/// hal_remote_group_options opts = {sizeof opts, 0, "00112233445566778899aabbccddeeff", 0, NULL};
/// hal_remote_group_join_at("192.0.2.1:29500", "shards", 8, &opts, &group);
/// ```
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct hal_remote_group_options {
    /// `sizeof(hal_remote_group_options)`: fields past it are taken as zero.
    pub size: u32,
    /// The most bytes a member posts a round; 0: 4096.
    pub max_payload: u32,
    /// The secret every member proves on every connection, 32 hex digits;
    /// NULL: the environment's `HAL_GROUP_SECRET`.
    pub secret: *const c_char,
    /// How long the join, each round and each connection may wait, in
    /// nanoseconds, before `HAL_ERR_TIMEOUT`; 0 (or less): 60 seconds.
    pub timeout_ns: i64,
    /// The address ("IP") of this host that this member's node listens on
    /// when it does not serve the group; NULL: the address this host
    /// reaches the group's address from.
    pub listen: *const c_char,
}

/// The options of `opts` (NULL: the defaults).
///
/// # Safety
///
/// `opts` is NULL or points to a `hal_remote_group_options` of at least its
/// `size` bytes whose `secret` and `listen` are NULL or NUL-terminated
/// strings.
unsafe fn group_options(
    opts: *const hal_remote_group_options,
) -> Result<RemoteGroupOptions, Failure> {
    let mut options = RemoteGroupOptions::default();
    if opts.is_null() {
        return Ok(options);
    }
    // SAFETY: per this function's contract; the structure holds only
    // integers and raw pointers.
    let raw: hal_remote_group_options =
        unsafe { read_sized(opts.cast(), "hal_remote_group_options") }?;
    if raw.max_payload > 0 {
        options = options.max_payload(raw.max_payload as usize);
    }
    if !raw.secret.is_null() {
        let what = "`hal_remote_group_options.secret`";
        // SAFETY: per this function's contract.
        let text = unsafe { str_arg(raw.secret, what) }?;
        options = options.secret(parse_secret(text, what)?);
    }
    if let Ok(ns @ 1..) = u64::try_from(raw.timeout_ns) {
        options = options.timeout(std::time::Duration::from_nanos(ns));
    }
    if !raw.listen.is_null() {
        // SAFETY: per this function's contract.
        let text = unsafe { str_arg(raw.listen, "hal_remote_group_options.listen") }?;
        let ip: IpAddr = text.trim().parse().map_err(|e| {
            Failure::invalid(format!(
                "`hal_remote_group_options.listen` {text:?} is no IP address ({e})"
            ))
        })?;
        options = options.listen(ip);
    }
    Ok(options)
}

/// Join the group `name` of `size` processes at `addr`, "IP:PORT" (an
/// address of one of the hosts, the same for every member), and wait until
/// all joined. The process that binds `addr` serves the group and is rank
/// 0; the others connect to it, trying again until it is there or the
/// timeout passes. Every member proves the group's secret
/// (`hal_remote_group_options.secret`, or `HAL_GROUP_SECRET`).
///
/// Statuses: `HAL_ERR_INVALID_ARGUMENT` (bad name, size, address or
/// payload limit; no secret; a group of that name with another size),
/// `HAL_ERR_PERMISSION_DENIED` (the secrets differ), `HAL_ERR_BUSY`
/// (another group is served at `addr`, or every rank is taken),
/// `HAL_ERR_CLOSED` (a member died before the group formed),
/// `HAL_ERR_TIMEOUT`, `HAL_ERR_UNAVAILABLE` (no UCX).
///
/// # Safety
///
/// `addr` and `name` are NULL or NUL-terminated strings; `opts` is NULL or
/// a valid `hal_remote_group_options`; `out` is NULL or valid for a write
/// of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_group_join_at(
    addr: *const c_char,
    name: *const c_char,
    size: u32,
    opts: *const hal_remote_group_options,
    out: *mut *mut hal_remote_group,
) -> hal_status {
    call("hal_remote_group_join_at", || {
        need(out, "out")?;
        // SAFETY: per the contract.
        let addr = unsafe { str_arg(addr, "addr") }?;
        // SAFETY: per the contract.
        let name = unsafe { str_arg(name, "name") }?;
        // SAFETY: per the contract.
        let options = unsafe { group_options(opts) }?;
        let at: SocketAddr = addr.trim().parse().map_err(|e| {
            Failure::invalid(format!(
                "`addr` {addr:?} is no IP:PORT address ({e}): give the group's address, one \
                 address of one host and a port, such as \"192.0.2.1:29500\""
            ))
        })?;
        let group = RemoteGroup::join_at(at, name, size as usize, &options)?;
        let token = GROUPS.insert(Arc::new(GroupObj::new(group, "this group")));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_remote_group, "out") }
    })
}

/// This member's rank, and the group's size.
///
/// # Safety
///
/// `out_rank` and `out_size` are NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_group_rank(
    group: *const hal_remote_group,
    out_rank: *mut u32,
    out_size: *mut u32,
) -> hal_status {
    call("hal_remote_group_rank", || {
        // SAFETY: per the contract.
        unsafe { rank_out(&GROUPS, group as usize, out_rank, out_size) }
    })
}

/// The member of rank `rank`: its process id (on its host) at `out_pid`,
/// and its node's address ("IP:PORT", what its exports' handles name) at
/// `out_address`, to free with `hal_string_free`. Either may be NULL.
///
/// # Safety
///
/// `out_pid` is NULL or valid for a write; `out_address` NULL or valid for
/// a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_group_member(
    group: *const hal_remote_group,
    rank: u32,
    out_pid: *mut u32,
    out_address: *mut *mut c_char,
) -> hal_status {
    call("hal_remote_group_member", || {
        let g = GROUPS.get(group as usize, "group")?;
        let m = g.member(rank as usize)?;
        if !out_pid.is_null() {
            // SAFETY: not NULL, valid per the contract.
            unsafe { put(out_pid, m.pid, "out_pid") }?;
        }
        if !out_address.is_null() {
            // SAFETY: not NULL, valid per the contract.
            unsafe { give_text(out_address, m.address.to_string()) };
        }
        Ok(())
    })
}

/// This member's node: what it exports from it (`hal_remote_export`), its
/// handles name, and it connects to the other members' exports
/// (`hal_remote_connect`). Each call gives a new reference, to release
/// with `hal_remote_node_release`; the node runs while the group or a
/// reference holds it (rank 0's node listens on the group's address:
/// release its references with the group, so that the address is free
/// for the next group).
///
/// # Safety
///
/// `out` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_group_node(
    group: *const hal_remote_group,
    out: *mut *mut hal_remote_node,
) -> hal_status {
    call("hal_remote_group_node", || {
        need(out, "out")?;
        let g = GROUPS.get(group as usize, "group")?;
        let node = g.with(|g| Ok(g.node().clone()))?;
        let token = NODES.insert(Arc::new(node));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_remote_node, "out") }
    })
}

/// Post `len` bytes of `data` and receive every member's, as
/// `hal_group_all_gather` does: member `i`'s bytes at `out + i * stride`,
/// their length at `out_lens[i]` (pass the group's `max_payload` as
/// `stride` to fit every one). A member that died or left is named with
/// `HAL_ERR_CLOSED`, and the group is broken: leave and join again. In a
/// child forked from the member: `HAL_ERR_FORKED`.
///
/// # Safety
///
/// `data` is valid for `len` bytes (or `len` is 0); `out` for
/// `size * stride` bytes and `out_lens` for `size` lengths, `size` the
/// group's.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_group_all_gather(
    group: *mut hal_remote_group,
    data: *const c_void,
    len: usize,
    out: *mut c_void,
    stride: usize,
    out_lens: *mut usize,
) -> hal_status {
    call("hal_remote_group_all_gather", || {
        // SAFETY: per the contract.
        unsafe { all_gather(&GROUPS, group as usize, data, len, out, stride, out_lens) }
    })
}

/// Receive what the member of rank `root` posts, as `hal_group_broadcast`
/// does: `data` (`len` bytes) at `root`, ignored elsewhere; up to `cap`
/// bytes written to `out`, the length to `out_len`.
///
/// # Safety
///
/// `data` is valid for `len` bytes (or `len` is 0); `out` for `cap` bytes;
/// `out_len` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_group_broadcast(
    group: *mut hal_remote_group,
    root: u32,
    data: *const c_void,
    len: usize,
    out: *mut c_void,
    cap: usize,
    out_len: *mut usize,
) -> hal_status {
    call("hal_remote_group_broadcast", || {
        // SAFETY: per the contract.
        unsafe { broadcast(&GROUPS, group as usize, root, data, len, out, cap, out_len) }
    })
}

/// Wait until every member called `hal_remote_group_barrier`.
#[no_mangle]
pub extern "C" fn hal_remote_group_barrier(group: *mut hal_remote_group) -> hal_status {
    call("hal_remote_group_barrier", || {
        Ok(GROUPS.get(group as usize, "group")?.barrier()?)
    })
}

/// Leave the group (the member of rank 0 ends it: the others' calls then
/// answer `HAL_ERR_CLOSED`). In a forked child it sends nothing: the
/// membership is the parent's. A second release is
/// `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_remote_group_release(group: *mut hal_remote_group) -> hal_status {
    call("hal_remote_group_release", || {
        GROUPS.remove(group as usize, "group").map(drop)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_name_the_secret_the_timeout_the_payload_and_the_listen_address() {
        // SAFETY: NULL options.
        let plain = unsafe { group_options(std::ptr::null()) }.unwrap();
        let default = RemoteGroupOptions::default();
        assert_eq!(
            (plain.secret, plain.timeout, plain.max_payload, plain.listen),
            (None, default.timeout, default.max_payload, None)
        );
        let opts = hal_remote_group_options {
            size: std::mem::size_of::<hal_remote_group_options>() as u32,
            max_payload: 100,
            secret: c"000102030405060708090a0b0c0d0e0f".as_ptr(),
            timeout_ns: 2_000_000_000,
            listen: c"192.0.2.7".as_ptr(),
        };
        // SAFETY: valid options with NUL-terminated texts.
        let set = unsafe { group_options(&opts) }.unwrap();
        assert_eq!(set.secret.unwrap()[15], 15);
        assert_eq!(set.timeout, std::time::Duration::from_secs(2));
        assert_eq!(set.max_payload, 100);
        assert_eq!(set.listen, Some("192.0.2.7".parse().unwrap()));
        // A caller built against a header with the first two fields alone.
        let short = hal_remote_group_options { size: 8, ..opts };
        // SAFETY: as above; only `size` bytes are read.
        let old = unsafe { group_options(&short) }.unwrap();
        assert_eq!((old.max_payload, old.secret), (100, None));
        for (bad, says) in [
            (
                hal_remote_group_options {
                    secret: c"0011".as_ptr(),
                    ..opts
                },
                "32 hex digits",
            ),
            (
                hal_remote_group_options {
                    listen: c"somewhere".as_ptr(),
                    ..opts
                },
                "no IP address",
            ),
        ] {
            // SAFETY: as above.
            let e = unsafe { group_options(&bad) }.unwrap_err();
            assert_eq!(e.status, hal_status::HAL_ERR_INVALID_ARGUMENT);
            assert!(e.message.contains(says), "{}", e.message);
        }
    }
}
