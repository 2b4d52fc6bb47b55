//! Across machines: the backend's memory exported to other hosts with
//! hal-ucx, and read and written there, as any backend's must be. Two
//! nodes in this process over the loopback address stand for the two
//! hosts (hal-ucx's own tests put them in separate processes and network
//! namespaces; here the point is the backend's memory).
//!
//! Host-visible memory (an allocation on the host, or the device's own
//! memory where it is host memory) is registered as it is. Device memory
//! that the host cannot address is registered as CUDA memory where the
//! loaded UCX has CUDA support, and refused with `Unsupported` otherwise.
//! Where UCX is not installed, the case says it did not run.

use std::time::Duration;

use hal_core::{AllocDesc, Backend, Device, Error, Location, Memory};
use hal_ucx::{Node, RemoteOptions};

use crate::support::{alloc_filled, assert_bytes, pattern, Suite};

/// A node on the loopback address, or `None` (the case did not run) where
/// UCX cannot be loaded.
fn node() -> Option<Node> {
    match Node::bind("127.0.0.1:0".parse().expect("an address")) {
        Ok(n) => Some(n),
        Err(e @ (Error::Unavailable { .. } | Error::Unsupported { .. })) => {
            hal_core::testing::not_run(&format!("UCX cannot be used here: {e}"));
            None
        }
        Err(e) => panic!("making a UCX node failed: {e}"),
    }
}

/// Export `mem` from `a`, connect from `b`, and check reads and writes
/// both ways against the memory itself.
fn round_trip<M: Memory>(a: &Node, b: &Node, mem: &M, seed: u8, what: &str) {
    let len = mem.len();
    let export = match a.export(mem, RemoteOptions::default()) {
        Ok(e) => e,
        Err(e) => panic!("exporting {what} to other hosts failed: {e}"),
    };
    let remote = b
        .connect(&export.text())
        .unwrap_or_else(|e| panic!("connecting to the export of {what} failed: {e}"));
    assert_eq!(remote.len(), len, "the remote size of {what}");
    let mut got = vec![0u8; len as usize];
    remote.read(0, &mut got).unwrap();
    assert!(
        got == pattern(seed, len),
        "{what} read remotely differs from the memory"
    );
    let new = pattern(seed.wrapping_add(1), len / 2);
    remote.write(len / 4, &new).unwrap();
    remote.flush().unwrap();
    assert_bytes(mem, len / 4, &new, &format!("{what} after a remote write"));
    export
        .wait_importers(1, Duration::from_secs(30))
        .expect("the exporter counts its remote importer");
    drop(remote);
    export
        .wait_unused(Duration::from_secs(30))
        .expect("the count goes back to 0 once the importer is gone");
}

/// The device's memory, and host memory where the device allocates it,
/// read and written from another node.
pub fn remote_memory_over_ucx<B: Backend>(s: &Suite<B>) {
    let Some(a) = node() else { return };
    let Some(b) = node() else { return };
    let dev = s.device();
    let mem = alloc_filled(&dev, 2, 41);
    if mem.host_visible() {
        round_trip(&a, &b, &mem, 41, "the device's memory");
    } else {
        match a.export(&mem, RemoteOptions::default()) {
            // A UCX with CUDA support: the device memory is served from
            // where it is, read into and written from host memory here.
            Ok(export) => {
                let len = mem.len();
                let remote = b
                    .connect(&export.text())
                    .unwrap_or_else(|e| panic!("connecting to exported device memory failed: {e}"));
                let mut got = vec![0u8; len as usize];
                remote.read(0, &mut got).unwrap();
                assert!(
                    got == pattern(41, len),
                    "device memory read remotely differs"
                );
                let new = pattern(43, len / 2);
                remote.write(len / 4, &new).unwrap();
                assert_bytes(&mem, len / 4, &new, "device memory after a remote write");
            }
            Err(Error::Unsupported { detail, .. }) => assert!(
                detail.contains("memory"),
                "the refusal of device memory says why: {detail}"
            ),
            Err(e) => panic!("exporting device memory failed otherwise than Unsupported: {e}"),
        }
    }
    // Host memory of the device (pinned, where it has such a thing).
    let page = dev.info().page_size();
    let desc = AllocDesc {
        location: Location::Host,
        align: page,
        ..AllocDesc::host(2 * page)
    };
    match dev.allocate(&desc) {
        Ok(host) if host.host_visible() => {
            host.write(0, &pattern(42, 2 * page)).unwrap();
            round_trip(&a, &b, &host, 42, "the device's host memory");
        }
        Ok(_) | Err(Error::Unsupported { .. }) => {}
        Err(e) => panic!("allocating host memory failed: {e}"),
    }
}
