//! Nodes: this process on the network, one UCX context and worker with a
//! listener and a progress thread (`libucp.so.0`, loaded when the first
//! node is made; feature `ucx`). Exports to other hosts
//! (`hal_remote_exported`) and connections to theirs (`hal_remote_memory`,
//! `hal_remote_notify`) are made from a node.

use std::ffi::c_char;
use std::net::SocketAddr;
use std::sync::Arc;

use hal_facade::remote::{Node, NodeOptions};

use crate::device::{need, put};
use crate::last_error::call;
use crate::options::read_sized;
use crate::status::{hal_status, Failure};
use crate::table::{Kind, Table};
use crate::text::{give_text, str_arg};

/// A node (opaque): this process on the network (`hal_remote_node_bind`).
/// Release it with `hal_remote_node_release`; its exports and connections
/// keep it running until they are released too.
#[allow(non_camel_case_types)]
pub struct hal_remote_node {
    _private: [u8; 0],
}

pub(crate) static NODES: Table<Node> = Table::new(Kind::RemoteNode);

/// Options of `hal_remote_node_bind_with`. NULL options, and zero fields,
/// mean the defaults.
///
/// ```c
/// hal_remote_node_options opts = {sizeof opts, "192.0.2.1", 0, 0};
/// hal_remote_node_bind_with("0.0.0.0:7000", &opts, &node);
/// ```
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct hal_remote_node_options {
    /// `sizeof(hal_remote_node_options)`: fields past it are taken as zero.
    pub size: u32,
    /// The address ("IP") the handles name, for a node that listens on
    /// every address (`"0.0.0.0:PORT"`, `"[::]:PORT"`); NULL: the address
    /// listened on.
    pub advertise: *const c_char,
    /// How long a connection's handshake, and each remote operation, may
    /// take, in nanoseconds, before it fails with `HAL_ERR_TIMEOUT`; 0 (or
    /// less): 30 seconds.
    pub timeout_ns: i64,
    /// How long a call that waits for an answer (a signal's wait, a read,
    /// a remote subscriber's receive) drives the worker itself, and the
    /// node's progress thread polls after its last work, before either
    /// sleeps, in nanoseconds; 0 (or less): not at all, sleep at once. A
    /// ping-pong across hosts then wakes no thread, where the waiting
    /// thread may keep a CPU busy.
    pub spin_ns: i64,
}

/// The options of `addr` and `opts` (NULL: the defaults).
///
/// # Safety
///
/// `opts` is NULL or points to a `hal_remote_node_options` of at least its
/// `size` bytes whose `advertise` is NULL or a NUL-terminated string.
unsafe fn node_options(
    addr: &str,
    opts: *const hal_remote_node_options,
) -> Result<NodeOptions, Failure> {
    let raw: hal_remote_node_options = if opts.is_null() {
        hal_remote_node_options {
            size: 0,
            advertise: std::ptr::null(),
            timeout_ns: 0,
            spin_ns: 0,
        }
    } else {
        // SAFETY: per this function's contract; the structure holds only
        // integers and a raw pointer.
        unsafe { read_sized(opts.cast(), "hal_remote_node_options") }?
    };
    let advertise = if raw.advertise.is_null() {
        None
    } else {
        // SAFETY: per this function's contract.
        let text = unsafe { str_arg(raw.advertise, "hal_remote_node_options.advertise") }?;
        Some(text.trim().parse().map_err(|e| {
            Failure::invalid(format!(
                "`hal_remote_node_options.advertise` {text:?} is no IP address ({e})"
            ))
        })?)
    };
    let listen = listen_address(addr, advertise.is_some())?;
    let mut options = NodeOptions::new(listen);
    options.advertise = advertise;
    if let Ok(ns @ 1..) = u64::try_from(raw.timeout_ns) {
        options.timeout = std::time::Duration::from_nanos(ns);
    }
    if let Ok(ns @ 1..) = u64::try_from(raw.spin_ns) {
        options.spin = std::time::Duration::from_nanos(ns);
    }
    Ok(options)
}

/// The address `addr` ("IP:PORT") a node listens on; every address only
/// when another is `advertised` for the handles to name.
fn listen_address(addr: &str, advertised: bool) -> Result<SocketAddr, Failure> {
    let parsed: SocketAddr = addr.trim().parse().map_err(|e| {
        Failure::invalid(format!(
            "`addr` {addr:?} is no IP:PORT address ({e}): give an address of this host that \
             the others reach, such as \"192.0.2.1:0\" (port 0 takes a free port)"
        ))
    })?;
    if parsed.ip().is_unspecified() && !advertised {
        return Err(Failure::invalid(format!(
            "`addr` {addr:?} listens on every address, and the handles must name one other \
             hosts reach: give this host's address on their network instead, or name it in \
             hal_remote_node_options.advertise (hal_remote_node_bind_with)"
        )));
    }
    Ok(parsed)
}

/// Make a node listening on `addr`, "IP:PORT" (`"192.0.2.1:0"`, `"[::1]:0"`;
/// port 0 takes a free port): an address of this host that other hosts
/// reach, which the handles of its exports name. UCX (`libucp.so.0`, or
/// the library `HAL_UCX_LIBRARY` names) is loaded now: without it the
/// answer is `HAL_ERR_UNAVAILABLE`, naming every path tried.
///
/// A node must listen only on a network whose hosts are trusted (a
/// cluster's fabric): UCX's connections are neither encrypted nor
/// authenticated.
///
/// # Safety
///
/// `addr` is NULL or a NUL-terminated string; `out` is NULL or valid for a
/// write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_node_bind(
    addr: *const c_char,
    out: *mut *mut hal_remote_node,
) -> hal_status {
    call("hal_remote_node_bind", || {
        need(out, "out")?;
        // SAFETY: per the contract.
        let addr = unsafe { str_arg(addr, "addr") }?;
        // SAFETY: NULL options.
        let opts = unsafe { node_options(addr, std::ptr::null()) }?;
        let node = Node::with_options(opts)?;
        let token = NODES.insert(Arc::new(node));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_remote_node, "out") }
    })
}

/// `hal_remote_node_bind` with `options` (NULL: the defaults): the address
/// the handles name when `addr` is every address, and the timeout of
/// handshakes and remote operations.
///
/// # Safety
///
/// `addr` is NULL or a NUL-terminated string; `options` is NULL or a valid
/// `hal_remote_node_options`; `out` is NULL or valid for a write of a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_node_bind_with(
    addr: *const c_char,
    options: *const hal_remote_node_options,
    out: *mut *mut hal_remote_node,
) -> hal_status {
    call("hal_remote_node_bind_with", || {
        need(out, "out")?;
        // SAFETY: per the contract.
        let addr = unsafe { str_arg(addr, "addr") }?;
        // SAFETY: per the contract.
        let opts = unsafe { node_options(addr, options) }?;
        let node = Node::with_options(opts)?;
        let token = NODES.insert(Arc::new(node));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_remote_node, "out") }
    })
}

/// The address the node's handles name, "IP:PORT" (with the port taken
/// when it was bound with port 0). Free the text with `hal_string_free`.
///
/// # Safety
///
/// `out_text` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_node_address(
    node: *const hal_remote_node,
    out_text: *mut *mut c_char,
) -> hal_status {
    call("hal_remote_node_address", || {
        need(out_text, "out_text")?;
        let node = NODES.get(node as usize, "node")?;
        // SAFETY: checked not NULL above.
        unsafe { give_text(out_text, node.address().to_string()) };
        Ok(())
    })
}

/// Release a node. It stops (its listener closes, its progress thread
/// ends) once its exports and connections are released too. A second
/// release is `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_remote_node_release(node: *mut hal_remote_node) -> hal_status {
    call("hal_remote_node_release", || {
        NODES.remove(node as usize, "node").map(drop)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_ip_and_port_and_names_one_host() {
        assert_eq!(
            listen_address(" 127.0.0.1:0 ", false).unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert_eq!(
            listen_address("[::1]:5", false).unwrap(),
            "[::1]:5".parse().unwrap()
        );
        for bad in ["", "127.0.0.1", "localhost:1", "1.2.3.4:99999"] {
            let e = listen_address(bad, false).unwrap_err();
            assert_eq!(e.status, hal_status::HAL_ERR_INVALID_ARGUMENT, "{bad}");
            assert!(e.message.contains("no IP:PORT address"), "{}", e.message);
        }
        let e = listen_address("0.0.0.0:0", false).unwrap_err();
        assert_eq!(e.status, hal_status::HAL_ERR_INVALID_ARGUMENT);
        assert!(e.message.contains("every address"), "{}", e.message);
        assert!(listen_address("0.0.0.0:0", true).is_ok());
    }

    #[test]
    fn options_name_the_address_and_the_timeout_and_zero_is_the_default() {
        // SAFETY: NULL options.
        let plain = unsafe { node_options("127.0.0.1:0", std::ptr::null()) }.unwrap();
        assert_eq!(
            (plain.advertise, plain.timeout),
            (None, NodeOptions::new(plain.listen).timeout)
        );
        let opts = hal_remote_node_options {
            size: std::mem::size_of::<hal_remote_node_options>() as u32,
            advertise: c"192.0.2.7".as_ptr(),
            timeout_ns: 2_000_000_000,
            spin_ns: 50_000,
        };
        // SAFETY: valid options with a NUL-terminated address.
        let every = unsafe { node_options("0.0.0.0:0", &opts) }.unwrap();
        assert_eq!(every.advertise, Some("192.0.2.7".parse().unwrap()));
        assert_eq!(every.timeout, std::time::Duration::from_secs(2));
        assert_eq!(every.spin, std::time::Duration::from_micros(50));
        // A caller built against the header before `spin_ns`: no spin.
        let older = hal_remote_node_options {
            size: std::mem::offset_of!(hal_remote_node_options, spin_ns) as u32,
            ..opts
        };
        // SAFETY: as above; only `size` bytes are read.
        let before = unsafe { node_options("0.0.0.0:0", &older) }.unwrap();
        assert_eq!(before.spin, std::time::Duration::ZERO);
        // A caller built against a header with the size field alone.
        let short = hal_remote_node_options { size: 8, ..opts };
        // SAFETY: as above; only `size` bytes are read.
        let e = unsafe { node_options("0.0.0.0:0", &short) }.unwrap_err();
        assert!(e.message.contains("every address"), "{}", e.message);
        let bad = hal_remote_node_options {
            advertise: c"somewhere".as_ptr(),
            ..opts
        };
        // SAFETY: as above.
        let e = unsafe { node_options("0.0.0.0:0", &bad) }.unwrap_err();
        assert_eq!(e.status, hal_status::HAL_ERR_INVALID_ARGUMENT);
        assert!(e.message.contains("no IP address"), "{}", e.message);
    }
}
