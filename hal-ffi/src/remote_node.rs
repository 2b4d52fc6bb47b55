//! Nodes: this process on the network, one UCX context and worker with a
//! listener and a progress thread (`libucp.so.0`, loaded when the first
//! node is made; feature `ucx`). Exports to other hosts
//! (`hal_remote_exported`) and connections to theirs (`hal_remote_memory`,
//! `hal_remote_notify`) are made from a node.

use std::ffi::c_char;
use std::net::SocketAddr;
use std::sync::Arc;

use hal_facade::remote::Node;

use crate::device::{need, put};
use crate::last_error::call;
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

/// The address `addr` ("IP:PORT") a node listens on, which handles name.
fn listen_address(addr: &str) -> Result<SocketAddr, Failure> {
    let parsed: SocketAddr = addr.trim().parse().map_err(|e| {
        Failure::invalid(format!(
            "`addr` {addr:?} is no IP:PORT address ({e}): give an address of this host that \
             the others reach, such as \"192.0.2.1:0\" (port 0 takes a free port)"
        ))
    })?;
    if parsed.ip().is_unspecified() {
        return Err(Failure::invalid(format!(
            "`addr` {addr:?} listens on every address, and the handles must name one other \
             hosts reach: give this host's address on their network instead"
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
        let node = Node::bind(listen_address(addr)?)?;
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
            listen_address(" 127.0.0.1:0 ").unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert_eq!(
            listen_address("[::1]:5").unwrap(),
            "[::1]:5".parse().unwrap()
        );
        for bad in ["", "127.0.0.1", "localhost:1", "1.2.3.4:99999"] {
            let e = listen_address(bad).unwrap_err();
            assert_eq!(e.status, hal_status::HAL_ERR_INVALID_ARGUMENT, "{bad}");
            assert!(e.message.contains("no IP:PORT address"), "{}", e.message);
        }
        let e = listen_address("0.0.0.0:0").unwrap_err();
        assert_eq!(e.status, hal_status::HAL_ERR_INVALID_ARGUMENT);
        assert!(e.message.contains("every address"), "{}", e.message);
    }
}
