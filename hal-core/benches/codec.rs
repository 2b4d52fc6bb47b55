//! The handle codec: encoding and decoding a typical memory handle, as bytes
//! and as text. Run with `cargo bench -p hal-core`.

use divan::{black_box, Bencher};
use hal_core::{BackendId, FdSource, Handle, HandleFlags, HandleKind, Location};

fn main() {
    divan::main();
}

/// A memory handle as a CPU export makes it: one importer pid, the
/// descriptors at the exporter's broker.
fn handle() -> Handle {
    let (pid, start) = hal_core::kit::os::self_identity();
    Handle {
        kind: HandleKind::Memory,
        backend: BackendId::CpuShm,
        device: 0,
        device_uuid: [7; 16],
        location: Location::Host,
        size: 1 << 20,
        offset: 0,
        address: 0x7f00_0000_0000,
        creator_pid: pid,
        creator_start: start,
        creator_pid_ns: hal_core::kit::os::pid_namespace(),
        object_id: hal_core::kit::os::random_id(),
        flags: HandleFlags::HAS_ADDRESS,
        pid_kind: hal_core::PidKind::Os,
        allowed_pids: vec![pid + 1],
        fds: FdSource::Broker {
            count: 2,
            name: format!("hal-{pid}-0123456789abcdef"),
        },
        payload: Vec::new(),
    }
}

#[divan::bench]
fn encode_bytes(b: Bencher<'_, '_>) {
    let h = handle();
    b.bench_local(|| black_box(&h).to_bytes());
}

#[divan::bench]
fn decode_bytes(b: Bencher<'_, '_>) {
    let bytes = handle().to_bytes();
    b.bench_local(|| Handle::from_bytes(black_box(&bytes)));
}

#[divan::bench]
fn encode_text(b: Bencher<'_, '_>) {
    let h = handle();
    b.bench_local(|| black_box(&h).to_text());
}

#[divan::bench]
fn decode_text(b: Bencher<'_, '_>) {
    let text = handle().to_text();
    b.bench_local(|| Handle::from_text(black_box(&text)));
}
