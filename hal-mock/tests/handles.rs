//! What a memory import checks before it maps: that the handle's range is
//! the window its vendor payload names, and that the data descriptor's open
//! mode allows the mapping the handle asks for.

mod common;

use hal_core::{Vmm, VmmExt};
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd};

use common::aligned;
use hal_core::{
    AllocDesc, Allocation, Backend, ByteRange, Device, Error, ExportOptions, Handle, HandleError,
    ImportOptions, Importers, Mapping, Memory, SharedHandle,
};
use hal_mock::{MockAllocation, MockBackend, MockDevice, Profile};

const PAGE: u64 = 4096;

fn devices() -> Vec<(MockBackend, MockDevice)> {
    [Profile::cuda(), Profile::ascend()]
        .into_iter()
        .map(|p| {
            let backend = MockBackend::new(p);
            let dev = backend.open(0).unwrap();
            (backend, dev)
        })
        .collect()
}

/// Export pages 1 and 2 of `a` to anyone.
fn export_middle(dev: &MockDevice, a: &MockAllocation) -> hal_core::Exported {
    dev.export_memory(
        a,
        &ExportOptions {
            range: Some(ByteRange::new(PAGE, 2 * PAGE)),
            importers: Importers::Anyone,
            ..ExportOptions::default()
        },
    )
    .unwrap()
}

/// Four pages, each filled with its own number. On Ascend a small
/// allocation first, so that this one is carved from a pool chunk at a
/// non-zero offset.
fn four_pages(dev: &MockDevice) -> (Option<MockAllocation>, MockAllocation) {
    let before = (dev.profile().suballocation.is_some())
        .then(|| dev.allocate(&AllocDesc::device(0, 512)).unwrap());
    let a = dev.allocate(&aligned(0, 4 * PAGE)).unwrap();
    for page in 0..4u8 {
        a.write(u64::from(page) * PAGE, &[page; PAGE as usize])
            .unwrap();
    }
    (before, a)
}

/// The handle text with its `offset` and `size` replaced; the codec
/// recomputes the checksum.
fn forge(text: &str, offset: u64, size: u64) -> SharedHandle {
    let mut h = Handle::from_text(text).unwrap();
    h.offset = offset;
    h.size = size;
    SharedHandle::from(Handle::from_text(&h.to_text()).unwrap())
}

#[track_caller]
fn assert_payload_refused(r: hal_core::Result<hal_mock::MockMapping>, what: &str) {
    match r {
        Err(Error::InvalidHandle(HandleError::Malformed { field, detail })) => {
            assert_eq!(field, "payload", "{what}: {detail}");
        }
        other => panic!("{what}: expected Malformed payload, got {other:?}"),
    }
}

#[test]
fn forged_handle_offset_is_refused() {
    for (_b, dev) in devices() {
        let name = dev.profile().name.clone();
        let (_before, a) = four_pages(&dev);
        let exported = export_middle(&dev, &a);
        let text = exported.to_text();

        // The honest handle maps pages 1 and 2, and says so.
        let m = dev
            .import_memory(
                SharedHandle::from(Handle::from_text(&text).unwrap()),
                &ImportOptions::default(),
            )
            .unwrap();
        assert_eq!((m.handle().offset, m.handle().size), (PAGE, 2 * PAGE));
        let mut out = [0u8; 1];
        m.read(0, &mut out).unwrap();
        assert_eq!(out, [1], "{name}: first byte of the export");
        m.read(PAGE, &mut out).unwrap();
        assert_eq!(out, [2], "{name}: second page of the export");
        drop(m);

        // Another offset with the same payload: refused, from the text alone
        // (the broker serves the descriptors) and with them attached.
        for offset in [0, 2 * PAGE, PAGE + 512, PAGE - PAGE / 2] {
            assert_payload_refused(
                dev.import_memory(forge(&text, offset, 2 * PAGE), &ImportOptions::default()),
                &format!("{name}: text with offset {offset:#x}"),
            );
            let mut shared = exported.share().unwrap();
            shared.handle.offset = offset;
            assert_payload_refused(
                dev.import_memory(shared, &ImportOptions::default()),
                &format!("{name}: attached descriptors, offset {offset:#x}"),
            );
        }
        assert_eq!(
            a.importers().unwrap(),
            0,
            "{name}: a refused import holds no lease"
        );
    }
}

#[test]
fn ascend_forged_handle_size_is_refused() {
    // The Ascend-like key names exactly the exported range; the CUDA-like
    // handle names the base allocation, in which a smaller size is a
    // smaller window.
    let backend = MockBackend::ascend();
    let dev = backend.open(0).unwrap();
    let (_before, a) = four_pages(&dev);
    let exported = export_middle(&dev, &a);
    let text = exported.to_text();
    for size in [PAGE, 3 * PAGE] {
        assert_payload_refused(
            dev.import_memory(forge(&text, PAGE, size), &ImportOptions::default()),
            &format!("size {size:#x}"),
        );
    }
}

/// The handle's descriptors with the data descriptor reopened through
/// `/proc/self/fd` with `options` (a new open file description of the same
/// memfd, with another access mode).
fn reopened_data(exported: &hal_core::Exported, options: &OpenOptions) -> SharedHandle {
    let mut shared = exported.share().unwrap();
    let path = format!("/proc/self/fd/{}", shared.fds[0].as_raw_fd());
    let reopened: File = options.open(path).unwrap();
    shared.fds[0] = OwnedFd::from(reopened);
    shared
}

#[test]
fn read_only_descriptor_for_writable_handle_is_permission_denied() {
    for (_b, dev) in devices() {
        let name = dev.profile().name.clone();
        let (_before, a) = four_pages(&dev);
        let exported = export_middle(&dev, &a);
        let mut read = OpenOptions::new();
        read.read(true);
        match dev.import_memory(reopened_data(&exported, &read), &ImportOptions::default()) {
            Err(Error::PermissionDenied { reason, .. }) => {
                assert!(
                    reason.contains("read-only") && reason.contains("writable"),
                    "{name}: {reason}"
                );
            }
            other => panic!("{name}: expected PermissionDenied, got {other:?}"),
        }
        let mut write = OpenOptions::new();
        write.write(true);
        match dev.import_memory(reopened_data(&exported, &write), &ImportOptions::default()) {
            Err(Error::PermissionDenied { reason, .. }) => {
                assert!(reason.contains("write-only"), "{name}: {reason}");
            }
            other => panic!("{name}: expected PermissionDenied, got {other:?}"),
        }
        assert_eq!(
            a.importers().unwrap(),
            0,
            "{name}: a refused import holds no lease"
        );
        // The read-write descriptors import.
        let m = dev
            .import_memory(exported.share().unwrap(), &ImportOptions::default())
            .unwrap();
        m.write(0, b"writable").unwrap();
    }
}

/// A physical handle always maps read-write, so a read-only descriptor sent
/// with one is refused at import with `PermissionDenied`, not later at `map`.
#[test]
fn read_only_descriptor_for_a_physical_handle_is_permission_denied() {
    use hal_core::Granularity;
    for (_b, dev) in devices() {
        let name = dev.profile().name.clone();
        let size = dev.granularity(Granularity::Minimum).unwrap();
        let phys = dev.allocate_physical(size).unwrap();
        let exported = dev
            .export_physical(
                &phys,
                &ExportOptions {
                    importers: Importers::Anyone,
                    ..Default::default()
                },
            )
            .unwrap();
        let mut read = OpenOptions::new();
        read.read(true);
        match dev.import_physical(reopened_data(&exported, &read), &ImportOptions::default()) {
            Err(Error::PermissionDenied { reason, .. }) => {
                assert!(reason.contains("read-only"), "{name}: {reason}");
            }
            other => panic!("{name}: expected PermissionDenied, got {other:?}"),
        }
        // The exporter's own read-write descriptor imports and maps.
        let imported = dev
            .import_physical(exported.share().unwrap(), &ImportOptions::default())
            .unwrap();
        let r = dev.reserve(size, size).unwrap();
        dev.map(&r, 0, &imported).unwrap();
    }
}
