//! Two nodes in one process, over loopback: the quickest check that
//! export, connect, read and write work at all.

use std::time::Duration;

use hal_core::{AllocDesc, Device, Memory};
use hal_cpu_shm::CpuShm;
use hal_ucx::{Node, RemoteOptions};

#[test]
fn read_and_write_over_loopback() {
    let dev = CpuShm::new().host();
    let mem = dev.allocate(&AllocDesc::host(1 << 16)).unwrap();
    mem.write(0, b"hello from the exporter").unwrap();
    let a = Node::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let b = Node::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let exp = a.export(&mem, RemoteOptions::default()).unwrap();
    let r = b.connect(&exp.text()).unwrap();
    exp.wait_importers(1, Duration::from_secs(10)).unwrap();
    let mut buf = [0u8; 23];
    r.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"hello from the exporter");
    r.write_signal(100, b"and back").unwrap();
    exp.wait_signal(Duration::from_secs(10)).unwrap();
    let mut back = [0u8; 8];
    mem.read(100, &mut back).unwrap();
    assert_eq!(&back, b"and back");
    drop(r);
    exp.wait_unused(Duration::from_secs(10)).unwrap();
}
