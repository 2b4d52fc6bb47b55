//! Named regions: create / open / exclusive / permission / name validation,
//! unlink semantics, truncation by a peer, export by handle, interplay with
//! Python's multiprocessing.shared_memory, listing and cleanup.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::process::Command;

use common::*;
use hal_core::kit::os;
use hal_core::{
    Device, Error, ExportOptions, FdSource, HandleFlags, ImportOptions, Importers, Memory,
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

/// Removes every region (and metadata) whose name starts with its prefix
/// whatever happens to the test: a child's objects when it is killed.
struct Sweep(String);

impl Drop for Sweep {
    fn drop(&mut self) {
        for n in shm_entries(&self.0) {
            if n.starts_with(&self.0) || n.starts_with(&format!("{META_PREFIX}{}", self.0)) {
                let _ = std::fs::remove_file(format!("{SHM_DIR}/{n}"));
            }
        }
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
        hal_core::testing::not_run("cannot create a region owned by another uid without root");
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
    // Dropping the first creator leaves the new region alone, metadata and all.
    drop((a, b));
    assert!(!gone(&name));
    assert!(open_named(&name, Some(4096)).is_ok());
    let info = list_regions()
        .unwrap()
        .into_iter()
        .find(|r| r.name == name)
        .expect("the new region keeps its metadata");
    assert!(info.present && info.alive, "{info:?}");
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

// --- hostile files in /dev/shm, other users, racing creators ------------------

/// The unprivileged uid the cross-user tests switch to (nobody), and a third
/// uid that owns victims' objects.
const NOBODY: u32 = 65534;
const THIRD: u32 = 65533;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The fields of a metadata object, laid out as the module documentation
/// of `named` says (128 bytes, little-endian), so that tests can plant what
/// another program or user could write.
#[derive(Debug, Clone, Copy)]
struct Planted {
    uid: u32,
    pid: u32,
    start: u64,
    size: u64,
    ino: u64,
    dev: u64,
    pidns: u64,
}

impl Planted {
    /// Metadata that describes the object at `/dev/shm/NAME` as `uid`'s,
    /// created by a process that is gone.
    fn describing(name: &str, uid: u32) -> Planted {
        let m = std::fs::symlink_metadata(format!("{SHM_DIR}/{name}")).unwrap();
        Planted {
            uid,
            pid: dead_pid(),
            start: 0,
            size: m.len(),
            ino: m.ino(),
            dev: m.dev(),
            pidns: 0,
        }
    }

    fn bytes(&self, name: &str) -> Vec<u8> {
        let mut b = vec![0u8; 128];
        b[0..8].copy_from_slice(b"HALSHMD1");
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        b[12..16].copy_from_slice(&self.uid.to_le_bytes());
        b[16..20].copy_from_slice(&self.pid.to_le_bytes());
        b[24..32].copy_from_slice(&self.start.to_le_bytes());
        b[32..40].copy_from_slice(&self.size.to_le_bytes());
        b[40..48].copy_from_slice(&1_700_000_000u64.to_le_bytes());
        b[48..56].copy_from_slice(&self.ino.to_le_bytes());
        b[56..64].copy_from_slice(&self.dev.to_le_bytes());
        b[64..72].copy_from_slice(&self.pidns.to_le_bytes());
        b[72..80].copy_from_slice(&region_id(name).to_le_bytes());
        b
    }

    /// Write it at `/dev/shm/.hal-meta.NAME` (replacing what is there), mode
    /// `mode`, owned by whoever runs this.
    fn plant(&self, name: &str, mode: u32) {
        plant_bytes(name, &self.bytes(name), mode);
    }
}

fn meta_file(name: &str) -> String {
    format!("{SHM_DIR}/{META_PREFIX}{name}")
}

fn plant_bytes(name: &str, bytes: &[u8], mode: u32) {
    try_plant_bytes(name, bytes, mode).unwrap();
}

fn try_plant_bytes(name: &str, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = meta_file(name);
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&path)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    std::io::Write::write_all(&mut f, bytes)
}

/// The pid of a process that has exited and been reaped.
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().expect("running `true`");
    let pid = c.id();
    c.wait().unwrap();
    pid
}

/// A plain object at `/dev/shm/NAME` (as C or Python make them, no
/// metadata), owned by `uid`; returns its inode.
fn plain_object(name: &str, uid: u32) -> u64 {
    let fd = nix::sys::mman::shm_open(
        format!("/{name}").as_str(),
        OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL,
        Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    os::set_len(std::os::fd::AsFd::as_fd(&fd), 4096).unwrap();
    if uid != nix::unistd::geteuid().as_raw() {
        nix::unistd::fchown(fd.as_raw_fd(), Some(uid.into()), Some(uid.into())).unwrap();
    }
    os::fstat(std::os::fd::AsFd::as_fd(&fd)).unwrap().st_ino
}

fn ino_of(name: &str) -> Option<u64> {
    std::fs::symlink_metadata(format!("{SHM_DIR}/{name}"))
        .ok()
        .map(|m| m.ino())
}

fn listed(name: &str) -> Option<hal_cpu_shm::RegionInfo> {
    list_regions().unwrap().into_iter().find(|r| r.name == name)
}

#[test]
fn gc_as_root_spares_other_users_objects() {
    if let Some(r) = role() {
        if r == "planter" {
            planter();
        }
        return;
    }
    if !is_root() {
        hal_core::testing::not_run(
            "the objects of other users, and a process of another uid that plants metadata \
             beside them, need root here (fchown, setuid)",
        );
        return;
    }
    let scope = unique("gc-victims-");
    // Victims: objects of root and of a third user, made by other programs
    // (no metadata), and a region the library made for root.
    let names: Vec<String> = (0..6).map(|i| format!("{scope}{i}")).collect();
    let _c: Vec<Cleanup> = names.iter().map(|n| Cleanup(n.clone())).collect();
    let inos = [
        plain_object(&names[0], 0),
        plain_object(&names[1], 0),
        plain_object(&names[2], THIRD),
        plain_object(&names[3], THIRD),
        plain_object(&names[4], 0),
    ];
    // The planter's own region of a dead creator: root's gc removes it (as
    // that user), which shows the cleanup of other users' regions still works.
    let own = names[5].clone();
    let mut planter = Peer::spawn_as(
        "gc_as_root_spares_other_users_objects",
        "planter",
        &[("HAL_TEST_NAMES", names.join(" "))],
        NOBODY,
    );
    assert_eq!(planter.recv(), "planted");
    let before = shm_entries(&scope).len();
    assert_eq!(before, 12, "{:?}", shm_entries(&scope));
    // The metadata the planter wrote about its own uid is listed (root sees
    // every user's), but its object is not the one it describes.
    for n in [&names[0], &names[2]] {
        let info = listed(n).expect("the planter's metadata is listed");
        assert_eq!(info.uid, NOBODY);
        assert!(!info.alive && !info.present, "{info:?}");
    }
    // Metadata the planter wrote in root's or the third user's name is not.
    assert!(listed(&names[1]).is_none());
    assert!(listed(&names[3]).is_none());
    let removed = collect_garbage_prefix(&scope, false).unwrap();
    // Each entry tells a removed region from metadata removed alone: beside
    // the victims' objects, only the planted metadata went.
    let mut removed: Vec<(String, hal_cpu_shm::Collected)> = removed
        .into_iter()
        .map(|r| (r.name.clone(), r.collected()))
        .collect();
    removed.sort_by(|a, b| a.0.cmp(&b.0));
    let stale = hal_cpu_shm::Collected::StaleMetadataOnly;
    assert_eq!(
        removed,
        vec![
            (names[0].clone(), stale),
            (names[2].clone(), stale),
            (names[4].clone(), stale),
            (own.clone(), hal_cpu_shm::Collected::RegionAndMetadata),
        ]
    );
    for (i, ino) in inos.iter().enumerate() {
        assert_eq!(ino_of(&names[i]), Some(*ino), "victim {i} survives");
    }
    // Only the planter's own files went.
    assert!(!std::path::Path::new(&meta_file(&names[0])).exists());
    assert!(std::path::Path::new(&meta_file(&names[1])).exists());
    assert_eq!(
        ino_of(&own),
        None,
        "the planter's own dead region is collected"
    );
    assert!(!std::path::Path::new(&meta_file(&own)).exists());

    // The race: metadata rewritten in place between the listing and the
    // removal, back and forth between the planter's uid (the file owner's,
    // so it is listed) and root's (the victim's). No interleaving gets the
    // victim removed.
    planter.send("flip");
    assert_eq!(planter.recv(), "flipping");
    for _ in 0..300 {
        let _ = collect_garbage_prefix(&names[4], false).unwrap();
        let _ = hal_cpu_shm::collect_garbage_named(&[names[4].clone()], false).unwrap();
        assert_eq!(ino_of(&names[4]), Some(inos[4]), "the victim survives");
    }
    planter.send("stop");
    assert_eq!(planter.recv(), "stopped");
    assert!(planter.finish().success());
    for (i, ino) in inos.iter().enumerate() {
        assert_eq!(ino_of(&names[i]), Some(*ino), "victim {i} survives");
    }
    drop(_c);
    assert!(shm_entries(&scope).is_empty(), "{:?}", shm_entries(&scope));
}

/// As uid 65534: plant metadata beside other users' objects.
fn planter() {
    become_user();
    let names: Vec<String> = std::env::var("HAL_TEST_NAMES")
        .unwrap()
        .split(' ')
        .map(str::to_string)
        .collect();
    let me = nix::unistd::geteuid().as_raw();
    assert_eq!(me, NOBODY);
    // Beside root's object: in this user's name, and in root's.
    Planted::describing(&names[0], me).plant(&names[0], 0o600);
    Planted::describing(&names[1], 0).plant(&names[1], 0o600);
    // Beside the third user's object: in this user's name, and in theirs.
    Planted::describing(&names[2], me).plant(&names[2], 0o600);
    Planted::describing(&names[3], THIRD).plant(&names[3], 0o600);
    // Beside root's object, for the race: this user's name for now.
    Planted::describing(&names[4], me).plant(&names[4], 0o644);
    // Its own object, with metadata of a dead creator.
    plain_object(&names[5], me);
    Planted::describing(&names[5], me).plant(&names[5], 0o600);
    say("planted");
    assert_eq!(hear(), "flip");
    let victim = Planted::describing(&names[4], 0);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let name = names[4].clone();
        std::thread::spawn(move || {
            use std::os::unix::fs::FileExt;
            let mine = Planted { uid: me, ..victim };
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Rewritten in place (the same file), and planted again
                // whenever the gc removed it.
                match std::fs::OpenOptions::new()
                    .write(true)
                    .open(meta_file(&name))
                {
                    Ok(f) => {
                        let uid = if n % 2 == 0 { 0 } else { me };
                        let _ = f.write_all_at(&uid.to_le_bytes(), 12);
                    }
                    // (The gc may remove it again at any moment.)
                    Err(_) => {
                        let _ = try_plant_bytes(&name, &mine.bytes(&name), 0o644);
                    }
                }
                n += 1;
            }
            let _ = std::fs::remove_file(meta_file(&name));
        })
    };
    say("flipping");
    assert_eq!(hear(), "stop");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flipper.join().unwrap();
    for n in &names[..4] {
        let _ = std::fs::remove_file(meta_file(n));
    }
    say("stopped");
}

/// Run `f` on a thread and return its result; a guard against hangs only:
/// after 30 s it gives up and fails the test (after `unblock`).
fn guarded<T: Send + 'static>(
    what: &str,
    unblock: impl FnOnce(),
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(30)) {
        Ok(v) => v,
        Err(_) => {
            unblock();
            panic!("{what} hung");
        }
    }
}

#[test]
fn fifo_in_dev_shm_fails_fast() {
    let d = CpuDevice::new();
    // A genuine read-only named export, as a template for handles.
    let template_name = unique("fifo-template");
    let _t = Cleanup(template_name.clone());
    let template = d
        .create_named(&template_name, 4096, &NamedOptions::default())
        .unwrap();
    let ro = d
        .export_memory(
            &template,
            &ExportOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
    let name = unique("fifo");
    let _c = Cleanup(name.clone());
    let path = format!("{SHM_DIR}/{name}");
    nix::unistd::mkfifo(path.as_str(), Mode::from_bits_truncate(0o600)).unwrap();
    // If an open hangs, opening the other end for writing releases it.
    let unblock = || {
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path);
    };
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let mut handle = ro.handle().clone();
    handle.payload = name.clone().into_bytes();
    handle.object_id = os::random_id();
    let n = name.clone();
    let results: Vec<(&str, Result<(), Error>)> = vec![
        ("open_named_read_only", {
            let n = n.clone();
            guarded("open_named_read_only", unblock, move || {
                open_named_read_only(&n, None).map(drop)
            })
        }),
        ("open_named", {
            let n = n.clone();
            guarded("open_named", unblock, move || {
                open_named(&n, None).map(drop)
            })
        }),
        ("unlink_named", {
            let n = n.clone();
            guarded("unlink_named", unblock, move || unlink_named(&n))
        }),
        ("import of a read-only named handle", {
            guarded("the import", unblock, move || {
                CpuDevice::new()
                    .import_memory(SharedHandle::from(handle), &ImportOptions::default())
                    .map(drop)
            })
        }),
    ];
    for (what, r) in results {
        match r {
            Err(Error::InvalidArgument { what: why }) => {
                assert!(why.contains("FIFO") && why.contains(&path), "{what}: {why}")
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    // Creating over it: the name is taken.
    let e = create_named(&name, 4096, &NamedOptions::default()).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
    assert!(std::fs::symlink_metadata(&path)
        .unwrap()
        .file_type()
        .is_fifo());
    std::fs::remove_file(&path).unwrap();
    drop((ro, template));
    assert!(gone(&name) && gone(&template_name));
}

#[test]
fn named_handles_bind_the_region_to_their_creators_user() {
    if let Some(r) = role() {
        if r == "forger" {
            forger();
        }
        return;
    }
    if !is_root() {
        hal_core::testing::not_run(
            "a handle from a process of another uid needs root here (setuid) to start that \
             process",
        );
        return;
    }
    let d = CpuDevice::new();
    let name = unique("handle-victim");
    let _c = Cleanup(name.clone());
    let region = d
        .create_named(&name, 4096, &NamedOptions::default())
        .unwrap();
    region.write(0, b"root's bytes").unwrap();
    let mut forger = Peer::spawn_as(
        "named_handles_bind_the_region_to_their_creators_user",
        "forger",
        &[("HAL_TEST_NAMES", name.clone())],
        NOBODY,
    );
    let forger_pid = forger.pid();
    let prefix = format!("hal-t-{forger_pid}-");
    let _sweep = Sweep(prefix.clone());
    let forged = forger.recv();
    let h = hal_core::Handle::from_text(&forged).unwrap();
    assert_eq!(h.creator_pid, forger_pid, "the forger names itself");
    assert_eq!(h.payload, name.as_bytes());
    for read_only in [false, true] {
        let mut h = h.clone();
        if read_only {
            h.flags.insert(HandleFlags::READ_ONLY);
        }
        let e = d
            .import_memory(SharedHandle::from(h), &ImportOptions::default())
            .unwrap_err();
        match &e {
            Error::PermissionDenied { pid, reason } => {
                assert_eq!(*pid, Some(forger_pid), "{e}");
                assert!(
                    reason.contains("uid 65534") && reason.contains("uid 0"),
                    "{e}"
                );
            }
            _ => panic!("{e}"),
        }
    }
    let mut b = [0u8; 12];
    region.read(0, &mut b).unwrap();
    assert_eq!(&b, b"root's bytes");
    // A handle of this user's process for the same region imports.
    let own = d.export_memory(&region, &ExportOptions::default()).unwrap();
    let m = d
        .import_memory(
            SharedHandle::from(own.handle().clone()),
            &ImportOptions::default(),
        )
        .unwrap();
    m.read(0, &mut b).unwrap();
    assert_eq!(&b, b"root's bytes");
    drop(m);
    // Once the forger is gone, only the owner check is left (see
    // `open_for_import`): the region is this user's, so it imports.
    forger.send("done");
    assert!(forger.finish().success());
    let m = d
        .import_memory(SharedHandle::from(h), &ImportOptions::default())
        .unwrap();
    m.read(0, &mut b).unwrap();
    assert_eq!(&b, b"root's bytes");
    drop((m, own, region));
    assert!(gone(&name));
    assert!(shm_entries(&prefix).is_empty());
}

/// As uid 65534: export a region of its own, and hand out a handle that
/// names root's region instead.
fn forger() {
    become_user();
    let d = CpuDevice::new();
    let name = unique("forger");
    let region = d
        .create_named(&name, 4096, &NamedOptions::default())
        .unwrap();
    let ex = d.export_memory(&region, &ExportOptions::default()).unwrap();
    let mut h = ex.handle().clone();
    h.payload = std::env::var("HAL_TEST_NAMES").unwrap().into_bytes();
    h.object_id = os::random_id();
    say(&h.to_text());
    assert_eq!(hear(), "done");
    drop((ex, region));
}

#[test]
fn racing_creators_on_a_stale_name_leave_every_region_its_metadata() {
    const PROCS: usize = 8;
    const ROUNDS: usize = 50;
    if let Some(r) = role() {
        if r == "racer" {
            racer();
        }
        return;
    }
    let scope = unique("stale-race-");
    let me = nix::unistd::geteuid().as_raw();
    let mut racers: Vec<Peer> = (0..PROCS)
        .map(|_| {
            Peer::spawn(
                "racing_creators_on_a_stale_name_leave_every_region_its_metadata",
                "racer",
                &[],
            )
        })
        .collect();
    let pids: Vec<u32> = racers.iter().map(Peer::pid).collect();
    for round in 0..ROUNDS {
        let name = format!("{scope}{round}");
        let _c = Cleanup(name.clone());
        // Stale metadata: its creator is dead and its region is gone.
        Planted {
            uid: me,
            pid: dead_pid(),
            start: 0,
            size: 4096,
            ino: 1,
            dev: 1,
            pidns: 0,
        }
        .plant(&name, 0o600);
        for r in &mut racers {
            r.send(&name);
        }
        let results: Vec<String> = racers.iter_mut().map(Peer::recv).collect();
        let winners: Vec<usize> = (0..PROCS).filter(|&i| results[i] == "ok").collect();
        for r in &results {
            assert!(
                r == "ok" || r == "already-exists",
                "round {round}: {results:?}"
            );
        }
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        // The region that stands has its metadata, which names its creator.
        let info = listed(&name).unwrap_or_else(|| panic!("round {round}: no metadata"));
        assert!(info.present && info.alive, "round {round}: {info:?}");
        assert_eq!(info.owner_pid, pids[winners[0]], "round {round}");
        for r in &mut racers {
            r.send("drop");
        }
        for r in &mut racers {
            assert_eq!(r.recv(), "dropped");
        }
        assert!(gone(&name), "round {round}: {:?}", shm_entries(&name));
    }
    for r in racers {
        assert!(r.finish().success());
    }
    assert!(shm_entries(&scope).is_empty());
}

/// Create each name the parent sends, all racers at once; hold what was
/// created until the parent says `drop`.
fn racer() {
    loop {
        let name = hear();
        if name.is_empty() {
            break;
        }
        let r = create_named(&name, 4096, &NamedOptions::default());
        say(match &r {
            Ok(_) => "ok",
            Err(e) => e.kind_name(),
        });
        assert_eq!(hear(), "drop");
        drop(r);
        say("dropped");
    }
}

// --- metadata that must not be trusted ------------------------------------------

fn our_pid_namespace() -> u64 {
    let link = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let s = link.to_string_lossy().into_owned();
    s.trim_start_matches("pid:[")
        .trim_end_matches(']')
        .parse()
        .unwrap()
}

fn collected(prefix: &str) -> Vec<(String, bool)> {
    let mut v: Vec<(String, bool)> = collect_garbage_prefix(prefix, false)
        .unwrap()
        .into_iter()
        .map(|r| (r.name, r.present))
        .collect();
    v.sort();
    v
}

#[test]
fn metadata_naming_another_object_or_a_live_creator() {
    let me = nix::unistd::geteuid().as_raw();
    let scope = unique("meta-other-");
    let _sweep = Sweep(scope.clone());
    let name = |i: usize| format!("{scope}{i}");
    let mut inos = Vec::new();
    for i in 0..5 {
        inos.push(plain_object(&name(i), me));
    }
    // 0: the object it names, creator dead: both go.
    Planted::describing(&name(0), me).plant(&name(0), 0o600);
    // 1: another inode; 2: another device: only the metadata goes.
    let p = Planted::describing(&name(1), me);
    Planted {
        ino: p.ino + 1,
        ..p
    }
    .plant(&name(1), 0o600);
    let p = Planted::describing(&name(2), me);
    Planted {
        dev: p.dev + 1,
        ..p
    }
    .plant(&name(2), 0o600);
    // 3: a creator in another pid namespace: never judged dead from here.
    let p = Planted::describing(&name(3), me);
    Planted {
        pidns: our_pid_namespace() + 1,
        ..p
    }
    .plant(&name(3), 0o600);
    // 4: a live creator (this process) in this namespace, then the same pid
    // with another start time (a recycled pid): dead.
    let own_start = os::process_start_time(std::process::id()).unwrap();
    let p = Planted::describing(&name(4), me);
    let live = Planted {
        pid: std::process::id(),
        start: own_start,
        pidns: our_pid_namespace(),
        size: 100,
        ..p
    };
    live.plant(&name(4), 0o600);
    let info = |i: usize| listed(&name(i)).unwrap();
    assert!(info(0).present && !info(0).alive);
    assert_eq!(
        info(0).created,
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000)
    );
    assert_eq!(info(0).size, 4096);
    for i in [1, 2] {
        assert!(!info(i).present && !info(i).alive, "{:?}", info(i));
    }
    assert!(info(3).alive && info(3).present);
    assert!(info(4).alive && info(4).present);
    assert_eq!(
        info(4).size,
        4096,
        "the object's size, not the recorded one"
    );
    assert_eq!(info(4).owner_start, own_start);
    assert_eq!(info(1).size, 4096);
    let would = collect_garbage_prefix(&scope, true).unwrap();
    assert_eq!(would.len(), 3, "{would:?}");
    assert_eq!(shm_entries(&scope).len(), 10, "a dry run removes nothing");
    assert_eq!(
        collected(&scope),
        vec![(name(0), true), (name(1), false), (name(2), false)]
    );
    assert_eq!(ino_of(&name(0)), None);
    for (i, ino) in inos.iter().enumerate().skip(1) {
        assert_eq!(ino_of(&name(i)), Some(*ino), "object {i} stays");
    }
    assert!(!std::path::Path::new(&meta_file(&name(1))).exists());
    assert!(std::path::Path::new(&meta_file(&name(3))).exists());
    // A recycled pid: dead, so collected.
    Planted {
        start: own_start + 1,
        ..live
    }
    .plant(&name(4), 0o600);
    let i4 = listed(&name(4)).unwrap();
    assert!(!i4.alive && i4.present && i4.size == 4096, "{i4:?}");
    assert_eq!(collected(&name(4)), vec![(name(4), true)]);
    // Metadata whose region is a directory or a link: not present; only the
    // metadata goes.
    let dir = format!("{SHM_DIR}/{}", name(5));
    std::fs::create_dir(&dir).unwrap();
    let m = std::fs::symlink_metadata(&dir).unwrap();
    let dead = Planted {
        uid: me,
        pid: dead_pid(),
        start: 0,
        size: 7,
        ino: m.ino(),
        dev: m.dev(),
        pidns: 0,
    };
    dead.plant(&name(5), 0o600);
    let i5 = listed(&name(5)).unwrap();
    assert!(!i5.present && i5.size == 7, "{i5:?}");
    assert_eq!(collected(&name(5)), vec![(name(5), false)]);
    assert!(std::path::Path::new(&dir).is_dir());
    std::fs::remove_dir(&dir).unwrap();
    for i in [1, 2, 3] {
        let _ = nix::sys::mman::shm_unlink(format!("/{}", name(i)).as_str());
    }
    let _ = std::fs::remove_file(meta_file(&name(3)));
    assert!(shm_entries(&scope).is_empty(), "{:?}", shm_entries(&scope));
}

#[test]
fn metadata_that_is_not_whole_is_ignored_and_replaced() {
    let me = nix::unistd::geteuid().as_raw();
    let scope = unique("meta-bad-");
    let _sweep = Sweep(scope.clone());
    type Bytes = Box<dyn Fn(&str) -> Vec<u8>>;
    let mut variants: Vec<(&str, Bytes)> = Vec::new();
    variants.push(("short", Box::new(|_| vec![0u8; 127])));
    let good = move |n: &str| {
        Planted {
            uid: me,
            pid: 0,
            start: 0,
            size: 4096,
            ino: 1,
            dev: 1,
            pidns: 0,
        }
        .bytes(n)
    };
    variants.push((
        "long",
        Box::new(move |n| {
            let mut b = good(n);
            b.push(0);
            b
        }),
    ));
    variants.push((
        "cut",
        Box::new(move |n| {
            let mut b = good(n);
            b.truncate(127);
            b
        }),
    ));
    variants.push((
        "magic",
        Box::new(move |n| {
            let mut b = good(n);
            b[3] ^= 0x20;
            b
        }),
    ));
    variants.push((
        "version",
        Box::new(move |n| {
            let mut b = good(n);
            b[8] = 2;
            b
        }),
    ));
    for (i, (what, bytes)) in variants.iter().enumerate() {
        let name = format!("{scope}{i}");
        // Beside an object whose creator would be dead: never listed, never
        // collected.
        let ino = plain_object(&name, me);
        plant_bytes(&name, &bytes(&name), 0o600);
        assert!(listed(&name).is_none(), "{what}");
        assert!(collected(&name).is_empty(), "{what}");
        assert_eq!(ino_of(&name), Some(ino), "{what}");
        assert!(std::path::Path::new(&meta_file(&name)).exists(), "{what}");
        // Without the object, creating the name replaces it.
        unlink_named(&name).unwrap();
        plant_bytes(&name, &bytes(&name), 0o600);
        let a = create_named(&name, 4096, &NamedOptions::default()).unwrap();
        let info = listed(&name).unwrap();
        assert!(info.present && info.alive, "{what}: {info:?}");
        assert_eq!(info.owner_pid, std::process::id(), "{what}");
        drop(a);
        assert!(gone(&name), "{what}");
    }
    // A FIFO where metadata would be: no hang, ignored.
    let name = format!("{scope}fifo");
    nix::unistd::mkfifo(meta_file(&name).as_str(), Mode::from_bits_truncate(0o600)).unwrap();
    assert!(listed(&name).is_none());
    assert!(collected(&name).is_empty());
    std::fs::remove_file(meta_file(&name)).unwrap();
    // A link (to a file that must not change) or a socket where metadata
    // would be: creating the name replaces it.
    let target = format!("/tmp/{scope}target");
    std::fs::write(&target, b"precious").unwrap();
    for junk in ["link", "socket"] {
        let name = format!("{scope}{junk}");
        let _listener = if junk == "link" {
            std::os::unix::fs::symlink(&target, meta_file(&name)).unwrap();
            None
        } else {
            Some(std::os::unix::net::UnixListener::bind(meta_file(&name)).unwrap())
        };
        assert!(listed(&name).is_none());
        let a = create_named(&name, 4096, &NamedOptions::default()).unwrap();
        assert!(std::fs::symlink_metadata(meta_file(&name))
            .unwrap()
            .file_type()
            .is_file());
        assert_eq!(listed(&name).unwrap().owner_pid, std::process::id());
        drop(a);
        assert!(gone(&name), "{junk}");
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    std::fs::remove_file(&target).unwrap();
    // Stale metadata of this version, with no object: creating replaces it.
    let name = format!("{scope}stale");
    plant_bytes(&name, &good(&name), 0o600);
    let a = create_named(&name, 4096, &NamedOptions::default()).unwrap();
    assert_eq!(listed(&name).unwrap().owner_pid, std::process::id());
    drop(a);
    assert!(shm_entries(&scope).is_empty(), "{:?}", shm_entries(&scope));
}

#[test]
fn metadata_of_another_user_is_not_trusted() {
    if let Some(r) = role() {
        if r == "lister" {
            lister();
        }
        return;
    }
    if !is_root() {
        hal_core::testing::not_run("files of other users need root here (fchown, setuid)");
        return;
    }
    let scope = unique("meta-user-");
    let _sweep = Sweep(scope.clone());
    let name = |i: usize| format!("{scope}{i}");
    let chown = |path: &str, uid: u32| {
        nix::unistd::chown(path, Some(uid.into()), Some(uid.into())).unwrap();
    };
    // 0: root's object, metadata in root's name but owned by another user.
    let ino0 = plain_object(&name(0), 0);
    Planted::describing(&name(0), 0).plant(&name(0), 0o644);
    chown(&meta_file(&name(0)), THIRD);
    // 1: root's object and root's metadata file, naming another user.
    let ino1 = plain_object(&name(1), 0);
    Planted::describing(&name(1), THIRD).plant(&name(1), 0o644);
    // 2: the third user's object and metadata, readable by all: root lists
    // and collects it, as that user; nobody sees it.
    plain_object(&name(2), THIRD);
    Planted::describing(&name(2), THIRD).plant(&name(2), 0o644);
    chown(&meta_file(&name(2)), THIRD);
    // 3: the same, for the lister (nobody) to see and collect.
    plain_object(&name(3), NOBODY);
    Planted::describing(&name(3), NOBODY).plant(&name(3), 0o644);
    chown(&meta_file(&name(3)), NOBODY);
    // 4: an object of the lister's (nobody's) with metadata that root put
    // beside it: unlinking removes the object and says that the metadata
    // could not be removed.
    plain_object(&name(4), NOBODY);
    Planted::describing(&name(4), NOBODY).plant(&name(4), 0o644);
    assert!(listed(&name(0)).is_none());
    assert!(listed(&name(1)).is_none());
    assert!(listed(&name(4)).is_none());
    assert_eq!(listed(&name(2)).unwrap().uid, THIRD);
    assert!(listed(&name(2)).unwrap().present);
    let mut lister = Peer::spawn_as(
        "metadata_of_another_user_is_not_trusted",
        "lister",
        &[("HAL_TEST_NAMES", scope.clone())],
        NOBODY,
    );
    assert_eq!(lister.recv(), format!("listed {}", name(3)));
    assert_eq!(lister.recv(), format!("collected {}", name(3)));
    assert_eq!(lister.recv(), "unreadable already-exists");
    assert_eq!(lister.recv(), "kept true");
    assert_eq!(lister.recv(), "unlink io");
    assert_eq!(ino_of(&name(4)), None);
    assert!(std::path::Path::new(&meta_file(&name(4))).exists());
    std::fs::remove_file(meta_file(&name(4))).unwrap();
    assert!(lister.finish().success());
    assert_eq!(ino_of(&name(3)), None);
    assert_eq!(collected(&scope), vec![(name(2), true)]);
    assert_eq!(ino_of(&name(2)), None);
    assert_eq!(ino_of(&name(0)), Some(ino0));
    assert_eq!(ino_of(&name(1)), Some(ino1));
    assert_eq!(shm_entries(&scope).len(), 4, "{:?}", shm_entries(&scope));
    drop(_sweep);
    assert!(shm_entries(&scope).is_empty());
}

/// As uid 65534: list and collect what is under the scope.
fn lister() {
    become_user();
    let scope = std::env::var("HAL_TEST_NAMES").unwrap();
    let names: Vec<String> = list_regions()
        .unwrap()
        .into_iter()
        .filter(|r| r.name.starts_with(&scope))
        .map(|r| r.name)
        .collect();
    say(&format!("listed {}", names.join(" ")));
    let names: Vec<String> = collect_garbage_prefix(&scope, false)
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    say(&format!("collected {}", names.join(" ")));
    // Its own metadata that it cannot read (mode 000): not judged, so not
    // replaced; the name stays taken.
    let name = format!("{scope}unreadable");
    plant_bytes(&name, &[0u8; 128], 0o000);
    let r = create_named(&name, 4096, &NamedOptions::default());
    say(&format!("unreadable {}", kind_of(&r)));
    drop(r);
    let kept = std::fs::symlink_metadata(meta_file(&name)).is_ok_and(|m| m.is_file());
    let _ = std::fs::remove_file(meta_file(&name));
    say(&format!("kept {kept}"));
    let r = unlink_named(&format!("{scope}4"));
    say(&format!("unlink {}", kind_of(&r)));
}

fn kind_of<T>(r: &Result<T, Error>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.kind_name(),
    }
}

#[test]
fn sizes_at_the_bounds_of_dev_shm() {
    let vfs = nix::sys::statvfs::statvfs(SHM_DIR).unwrap();
    #[allow(clippy::unnecessary_cast)]
    let cap = (vfs.blocks() as u64).saturating_mul(vfs.fragment_size() as u64);
    let name = unique("bounds");
    let _c = Cleanup(name.clone());
    if cap != 0 && cap < i64::MAX as u64 {
        let e = create_named(&name, cap + 1, &NamedOptions::default()).unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
        assert!(gone(&name));
        // Exactly the capacity: fine (nothing is reserved without
        // allocate_now, so this costs no memory).
        let a = create_named(&name, cap, &NamedOptions::default()).unwrap();
        assert_eq!(a.len(), cap);
        drop(a);
        assert!(gone(&name));
    }
    let e = create_named(&name, i64::MAX as u64 + 1, &NamedOptions::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert!(gone(&name));
}

#[test]
fn gc_by_name_and_around_locks_and_live_regions() {
    let me = nix::unistd::geteuid().as_raw();
    let scope = unique("gc-named-");
    let _sweep = Sweep(scope.clone());
    let name = |i: usize| format!("{scope}{i}");
    for i in 0..3 {
        plain_object(&name(i), me);
        Planted::describing(&name(i), me).plant(&name(i), 0o600);
    }
    // The whole machine's dry run sees them (and removes nothing).
    let all = hal_cpu_shm::collect_garbage(true).unwrap();
    for i in 0..3 {
        assert!(all.iter().any(|r| r.name == name(i)), "{i}");
    }
    assert_eq!(shm_entries(&scope).len(), 6);
    // Only the names given.
    let e = hal_cpu_shm::collect_garbage_named(&[name(0), "a/b".into()], false).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert_eq!(shm_entries(&scope).len(), 6);
    let would = hal_cpu_shm::collect_garbage_named(&[name(0)], true).unwrap();
    assert_eq!(would.len(), 1);
    assert_eq!(shm_entries(&scope).len(), 6);
    let removed = hal_cpu_shm::collect_garbage_named(&[name(0)], false).unwrap();
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].name, name(0));
    assert!(gone(&name(0)));
    assert_eq!(shm_entries(&scope).len(), 4);
    // Metadata that another process holds locked (it is being judged or
    // removed there) is left to it.
    let held = std::fs::File::open(meta_file(&name(1))).unwrap();
    nix::fcntl::Flock::lock(held, nix::fcntl::FlockArg::LockExclusive)
        .map(|lock| {
            assert!(collect_garbage_prefix(&name(1), false).unwrap().is_empty());
            assert_eq!(shm_entries(&name(1)).len(), 2);
            drop(lock);
        })
        .map_err(|(_, e)| e)
        .unwrap();
    assert_eq!(collected(&name(1)), vec![(name(1), true)]);
    // A region of a dead creator that is still there keeps its name:
    // creating it again is refused and its metadata stays.
    let e = create_named(&name(2), 4096, &NamedOptions::default()).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
    let info = listed(&name(2)).unwrap();
    assert!(info.present && !info.alive, "{info:?}");
    assert_eq!(collected(&name(2)), vec![(name(2), true)]);
    // A directory at a region's name is refused, not opened.
    let dir = format!("{SHM_DIR}/{}", name(3));
    std::fs::create_dir(&dir).unwrap();
    let e = open_named_read_only(&name(3), None).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { what } if what.contains("directory")),
        "{e}"
    );
    std::fs::remove_dir(&dir).unwrap();
    assert!(shm_entries(&scope).is_empty(), "{:?}", shm_entries(&scope));
}
