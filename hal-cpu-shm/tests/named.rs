//! Named regions: create / open / exclusive / permission / name validation,
//! unlink semantics, truncation by a peer, export by handle, interplay with
//! Python's multiprocessing.shared_memory, listing and cleanup.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::process::Command;

use common::*;
use hal_core::{
    os, Device, Error, ExportOptions, FdSource, HandleFlags, ImportOptions, Importers, Memory,
    SharedHandle,
};
use hal_cpu_shm::named::{self, META_PREFIX, SHM_DIR};
use hal_cpu_shm::{
    collect_garbage_prefix, create_named, list_regions, open_named, open_named_read_only,
    region_id, unlink_named, CpuDevice, NamedOptions, RegionKind,
};
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

/// Removes a region and its metadata whatever happens to the test.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = nix::sys::mman::shm_unlink(format!("/{}", self.0).as_str());
        let _ = std::fs::remove_file(format!("{SHM_DIR}/{META_PREFIX}{}", self.0));
    }
}

fn gone(name: &str) -> bool {
    shm_entries(name).is_empty()
}

#[test]
fn create_open_exclusive_and_drop() {
    let name = unique("basic");
    let _c = Cleanup(name.clone());
    let a = create_named(&name, 10_000, &NamedOptions::default()).unwrap();
    assert_eq!(a.kind(), RegionKind::Named);
    assert_eq!(a.name(), Some(name.as_str()));
    assert_eq!(a.len(), 10_000);
    let meta = std::fs::metadata(format!("{SHM_DIR}/{name}")).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600, "mode 0600 whatever the umask");
    assert_eq!(meta.len(), 10_000);
    let m = std::fs::metadata(format!("{SHM_DIR}/{META_PREFIX}{name}")).unwrap();
    assert_eq!(m.mode() & 0o777, 0o600);

    a.write(9_990, b"0123456789").unwrap();
    let b = open_named(&name, Some(10_000)).unwrap();
    let mut buf = [0u8; 10];
    b.read(9_990, &mut buf).unwrap();
    assert_eq!(&buf, b"0123456789");
    // The mappings share the bytes.
    // SAFETY: both pointers map 10_000 live bytes of the same object.
    unsafe { *b.host_ptr().unwrap().add(5) = 0xee };
    a.read(5, &mut buf[..1]).unwrap();
    assert_eq!(buf[0], 0xee);

    let e = create_named(&name, 4096, &NamedOptions::default()).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
    let e = open_named(&name, Some(4096)).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { what } if what.contains("10000")),
        "{e}"
    );
    let e = open_named(&unique("missing"), None).unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
    assert!(matches!(
        create_named(&unique("zero"), 0, &NamedOptions::default()),
        Err(Error::InvalidArgument { .. })
    ));

    let ro = open_named_read_only(&name, None).unwrap();
    assert!(ro.is_read_only());
    ro.read(9_990, &mut buf).unwrap();
    assert_eq!(&buf, b"0123456789");
    assert!(matches!(
        ro.write(0, b"x"),
        Err(Error::PermissionDenied { .. })
    ));

    drop((b, ro));
    drop(a);
    assert!(
        gone(&name),
        "the creator's drop unlinks region and metadata"
    );
    assert!(matches!(
        open_named(&name, None),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn names_are_validated() {
    let long = "n".repeat(named::MAX_NAME_LEN + 1);
    for bad in [
        "",
        "a/b",
        "/lead",
        "..",
        "a..b",
        ".hidden",
        "nul\0byte",
        "tab\there",
        "é",
        &long,
    ] {
        let e = create_named(bad, 4096, &NamedOptions::default()).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{bad:?}: {e}");
        assert!(matches!(
            open_named(bad, None),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            unlink_named(bad),
            Err(Error::InvalidArgument { .. })
        ));
    }
    // The longest name is fine.
    let prefix = unique("long");
    let name = format!("{prefix}{}", "x".repeat(named::MAX_NAME_LEN - prefix.len()));
    let _c = Cleanup(name.clone());
    let a = create_named(&name, 4096, &NamedOptions::default()).unwrap();
    assert_eq!(a.name().unwrap().len(), named::MAX_NAME_LEN);
}

#[test]
fn region_ids_are_stable_integers() {
    assert_eq!(region_id("a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(region_id("graph-node-0"), region_id("graph-node-0"));
    assert_ne!(region_id("graph-node-0"), region_id("graph-node-1"));
}

#[test]
fn a_region_of_another_user_is_refused() {
    // Made with plain shm_open, as another program would, then given to
    // uid 65534 (nobody). Only root can give a file away; without root there
    // is no other user to test against.
    if nix::unistd::geteuid().as_raw() != 0 {
        eprintln!("not root: cannot create a region owned by another uid; skipped");
        return;
    }
    let name = unique("foreign");
    let _c = Cleanup(name.clone());
    let fd = nix::sys::mman::shm_open(
        format!("/{name}").as_str(),
        OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL,
        Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    os::set_len(std::os::fd::AsFd::as_fd(&fd), 4096).unwrap();
    nix::unistd::fchown(fd.as_raw_fd(), Some(65534.into()), None).unwrap();
    for e in [
        open_named(&name, None).unwrap_err(),
        open_named_read_only(&name, Some(4096)).unwrap_err(),
        unlink_named(&name).unwrap_err(),
    ] {
        assert!(
            matches!(&e, Error::PermissionDenied { reason, .. } if reason.contains("65534")),
            "{e}"
        );
    }
    // Not the library's: never listed, never collected.
    assert!(!list_regions().unwrap().iter().any(|r| r.name == name));
    assert!(!collect_garbage_prefix(&name, false)
        .unwrap()
        .iter()
        .any(|r| r.name == name));
    assert!(!gone(&name));
}

#[test]
fn unlink_removes_the_name_and_mappings_stay_valid() {
    let name = unique("unlink");
    let _c = Cleanup(name.clone());
    let a = create_named(&name, 8192, &NamedOptions::default()).unwrap();
    let b = open_named(&name, None).unwrap();
    a.write(0, b"before unlink").unwrap();
    unlink_named(&name).unwrap();
    assert!(gone(&name));
    assert!(matches!(
        open_named(&name, None),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(unlink_named(&name), Err(Error::NotFound { .. })));
    let mut buf = [0u8; 13];
    b.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"before unlink");
    b.write(100, b"after").unwrap();
    a.read(100, &mut buf[..5]).unwrap();
    assert_eq!(&buf[..5], b"after");
    // The name can be taken again: a new, independent region.
    let c = create_named(&name, 4096, &NamedOptions::default()).unwrap();
    c.read(0, &mut buf).unwrap();
    assert_eq!(buf, [0; 13]);
    // Dropping the first creator leaves the new region alone.
    drop((a, b));
    assert!(!gone(&name));
    assert!(open_named(&name, Some(4096)).is_ok());
    drop(c);
    assert!(gone(&name));
}

#[test]
fn keep_leaves_the_region_after_drop() {
    let name = unique("keep");
    let _c = Cleanup(name.clone());
    let opts = NamedOptions {
        keep: true,
        allocate_now: true,
        ..Default::default()
    };
    let a = create_named(&name, 4096, &opts).unwrap();
    a.write(0, b"kept").unwrap();
    drop(a);
    let b = open_named(&name, Some(4096)).unwrap();
    let mut buf = [0u8; 4];
    b.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"kept");
    let info = list_regions()
        .unwrap()
        .into_iter()
        .find(|r| r.name == name)
        .unwrap();
    assert!(info.alive && info.present, "{info:?}");
    assert_eq!(info.owner_pid, std::process::id());
    assert_eq!(info.size, 4096);
    assert_eq!(info.id, region_id(&name));
    assert_eq!(info.uid, nix::unistd::geteuid().as_raw());
    assert!(
        !collect_garbage_prefix(&name, false)
            .unwrap()
            .iter()
            .any(|r| r.name == name),
        "live owner"
    );
    unlink_named(&name).unwrap();
    assert!(gone(&name));
}

#[test]
fn truncation_by_a_peer_never_faults_the_library() {
    let name = unique("trunc");
    let _c = Cleanup(name.clone());
    let a = create_named(&name, 64 * 1024, &NamedOptions::default()).unwrap();
    a.write(0, &[7; 1024]).unwrap();
    let b = open_named(&name, None).unwrap();
    // A peer (anyone of this user) truncates the object under both mappings.
    os::set_len(b.fd(), 4096).unwrap();
    let mut buf = vec![0u8; 1024];
    a.read(0, &mut buf).unwrap();
    assert_eq!(buf, vec![7; 1024], "the part still there reads fine");
    let e = a.read(8192, &mut buf).unwrap_err();
    assert!(
        matches!(&e, Error::Closed { what } if what.contains("truncated")),
        "{e}"
    );
    let e = b.write(60 * 1024, &buf).unwrap_err();
    assert!(matches!(e, Error::Closed { .. }), "{e}");
    assert_eq!(
        os::fstat(a.fd()).unwrap().st_size,
        4096,
        "a refused write does not regrow it"
    );
    // Re-opening checks the size before mapping.
    let e = open_named(&name, Some(64 * 1024)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}

#[test]
fn named_regions_export_by_name() {
    let d = CpuDevice::new();
    let name = unique("export");
    let _c = Cleanup(name.clone());
    let a = d
        .create_named(&name, 3 * 4096, &NamedOptions::default())
        .unwrap();
    a.write(4096, b"second page").unwrap();
    let ex = d
        .export_memory(
            &a,
            &ExportOptions {
                range: Some(hal_core::ByteRange::new(4096, 8192)),
                ..Default::default()
            },
        )
        .unwrap();
    let h = ex.handle().clone();
    assert!(h.flags.contains(HandleFlags::NAMED));
    assert_eq!(h.payload, name.as_bytes());
    assert_eq!(h.fds, FdSource::None);
    assert_eq!((h.offset, h.size), (4096, 8192));
    // The text alone is enough: it names the region.
    let text = h.to_text();
    let h2 = hal_core::Handle::from_text(&text).unwrap();
    let m = d
        .import_memory(SharedHandle::from(h2), &ImportOptions::default())
        .unwrap();
    let mut buf = [0u8; 11];
    m.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"second page");
    m.write(4096, b"third").unwrap();
    a.read(8192, &mut buf[..5]).unwrap();
    assert_eq!(&buf[..5], b"third");
    // Leases are not counted for regions opened by name: said, not faked.
    assert!(hal_core::Allocation::importers(&a)
        .unwrap_err()
        .is_unsupported());

    // Read-only export: the importer opens read-only.
    let ro = d
        .export_memory(
            &a,
            &ExportOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
    let m = d
        .import_memory(
            SharedHandle::from(ro.handle().clone()),
            &ImportOptions::default(),
        )
        .unwrap();
    assert!(m.is_read_only());
    assert!(matches!(
        m.write(0, b"x"),
        Err(Error::PermissionDenied { .. })
    ));

    // A pid allow-list cannot be enforced on a name: refused.
    let e = d
        .export_memory(
            &a,
            &ExportOptions {
                importers: Importers::Pids(vec![1]),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(e.is_unsupported(), "{e}");

    // A handle naming a region that is gone.
    drop(m);
    let mut h3 = h.clone();
    h3.object_id = os::random_id();
    h3.payload = unique("never").into_bytes();
    let e = d
        .import_memory(SharedHandle::from(h3), &ImportOptions::default())
        .unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
}

const PY_OPEN: &str = r#"
import sys
from multiprocessing import shared_memory, resource_tracker
def attach(name, create=False, size=0):
    try:
        return shared_memory.SharedMemory(name=name, create=create, size=size, track=False)
    except TypeError:
        shm = shared_memory.SharedMemory(name=name, create=create, size=size)
        # Before Python 3.13 the tracker would unlink the region at exit.
        resource_tracker.unregister(shm._name, "shared_memory")
        return shm
"#;

fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("python3")
        .arg("-c")
        .arg(format!("{PY_OPEN}\n{script}"))
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn python_reads_a_region_written_here() {
    let name = unique("py-read");
    let _c = Cleanup(name.clone());
    let a = create_named(&name, 4096, &NamedOptions::default()).unwrap();
    let data = pattern(64, 3);
    a.write(0, &data).unwrap();
    let hex = python(
        "shm = attach(sys.argv[1])\nprint(bytes(shm.buf[:int(sys.argv[2])]).hex())\nshm.close()",
        &[&name, "64"],
    );
    let expected: String = data.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(hex, expected);
    // Python wrote nothing and removed nothing: the region is still ours.
    assert!(!gone(&name));
    drop(a);
    assert!(gone(&name));
}

#[test]
fn a_region_created_by_python_opens_here() {
    let name = unique("py-made");
    let _c = Cleanup(name.clone());
    python(
        "shm = attach(sys.argv[1], True, 5000)\nshm.buf[:5] = b'hello'\nshm.buf[4999] = 42\nshm.close()",
        &[&name],
    );
    let a = open_named(&name, Some(5000)).unwrap();
    let mut buf = [0u8; 5];
    a.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"hello");
    a.read(4999, &mut buf[..1]).unwrap();
    assert_eq!(buf[0], 42);
    // No metadata: not the library's, so not listed and never collected.
    assert!(!list_regions().unwrap().iter().any(|r| r.name == name));
    assert!(!collect_garbage_prefix(&name, false)
        .unwrap()
        .iter()
        .any(|r| r.name == name));
    drop(a);
    assert!(!gone(&name), "opening does not unlink");
    unlink_named(&name).unwrap();
    assert!(gone(&name));
}
