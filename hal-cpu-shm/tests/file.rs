//! File-backed regions.

mod common;

use common::unique;
use hal_core::kit::os;
use hal_core::{Device, Error, ExportOptions, Memory};
use hal_cpu_shm::{create_file_backed, open_file_backed, open_file_backed_read_only, RegionKind};
use std::os::unix::fs::MetadataExt;

/// A path in the temporary directory, removed on drop.
struct TempPath(std::path::PathBuf);

impl TempPath {
    fn new(tag: &str) -> TempPath {
        TempPath(std::env::temp_dir().join(unique(tag)))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn create_write_sync_reopen() {
    let p = TempPath::new("file");
    let a = create_file_backed(&p.0, 10_000).unwrap();
    assert_eq!(a.kind(), RegionKind::FileBacked);
    assert_eq!(a.path(), Some(p.0.as_path()));
    assert_eq!(a.len(), 10_000);
    assert_eq!(std::fs::metadata(&p.0).unwrap().mode() & 0o777, 0o600);
    a.write(9_000, b"persisted").unwrap();
    a.sync().unwrap();
    drop(a);
    let bytes = std::fs::read(&p.0).unwrap();
    assert_eq!(&bytes[9_000..9_009], b"persisted");

    let b = open_file_backed(&p.0).unwrap();
    let c = open_file_backed_read_only(&p.0).unwrap();
    b.write(0, b"both").unwrap();
    let mut buf = [0u8; 4];
    c.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"both");
    assert!(matches!(
        c.write(0, b"x"),
        Err(Error::PermissionDenied { .. })
    ));

    assert!(matches!(
        create_file_backed(&p.0, 10),
        Err(Error::AlreadyExists { .. })
    ));
    let missing = TempPath::new("missing");
    assert!(matches!(
        open_file_backed(&missing.0),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        create_file_backed(&missing.0, 0),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn export_is_refused_and_truncation_never_faults() {
    let p = TempPath::new("file-trunc");
    let a = create_file_backed(&p.0, 64 * 1024).unwrap();
    let e = hal_cpu_shm::CpuDevice::new()
        .export_memory(&a, &ExportOptions::default())
        .unwrap_err();
    assert!(e.is_unsupported(), "{e}");
    // Another writer truncates the file under the mapping.
    os::set_len(a.fd(), 100).unwrap();
    let mut buf = [0u8; 16];
    a.read(0, &mut buf).unwrap();
    let e = a.read(8192, &mut buf).unwrap_err();
    assert!(matches!(e, Error::Closed { .. }), "{e}");
    assert!(matches!(a.write(60_000, &buf), Err(Error::Closed { .. })));
}
