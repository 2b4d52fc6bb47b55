//! VMM on the stand-in runtime: claimed where its entry points resolve,
//! and the 64-bit shareable handle across real processes, its pid
//! allow-list of bare tgids on by default.

use hal_core::DeviceExt;
mod common;

use hal_core::{Vmm, VmmExt};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

use common::{backend, role, ROLE};
use hal_core::{
    Access, Backend, Capabilities, Device, Error, ExportOptions, Exported, Granularity, Handle,
    HandleFlags, ImportOptions, Importers, Physical, PhysicalDesc, PidKind, Reservation,
    SharedHandle,
};

const TEST: &str = "a_physical_handle_admits_listed_bare_tgids_only";
const DATA: &[u8; 6] = b"vmmpid";

fn dev() -> hal_ascend::AscendDevice {
    backend().open(0).unwrap()
}

#[test]
fn vmm_and_growable_are_claimed_with_the_runtime_granularity() {
    let d = dev();
    let caps = d.capabilities();
    assert!(caps.contains(Capabilities::VMM), "{caps:?}");
    assert!(caps.contains(Capabilities::GROWABLE), "{caps:?}");
    assert!(!caps.contains(Capabilities::HOST_NUMA_VMM));
    let g = d.granularity(Granularity::Minimum).unwrap();
    assert_eq!(g, d.info().granularity_min);
    assert!(g.is_power_of_two());
    let p = d.allocate_physical(g).unwrap();
    let shown = format!("{p:?}");
    for part in [
        "AscendPhysical".to_string(),
        "device: 0".to_string(),
        "handle: 0x".to_string(),
        format!("size: {g}"),
        "imported: false".to_string(),
    ] {
        assert!(shown.contains(&part), "{shown} lacks {part}");
    }
    assert_eq!(p.handle_type(), hal_core::ShareableHandle::PosixFd);
    let none = d
        .allocate_physical_with(&PhysicalDesc::new(g).handle(hal_core::ShareableHandle::None))
        .unwrap();
    assert_eq!(none.handle_type(), hal_core::ShareableHandle::None);
    drop(none);
    let r = d.reserve(g, 0).unwrap();
    d.map(&r, 0, &p).unwrap();
    assert!(
        r.write(0, b"x").is_err(),
        "no access before set_access: refused, not faulted"
    );
    d.set_access(&r, 0, g, Access::Read).unwrap();
    assert!(r.write(0, b"x").is_err(), "read access does not write");
    d.set_access(&r, 0, g, Access::ReadWrite).unwrap();
    r.write(0, b"x").unwrap();
    assert_eq!(
        d.access(&r, 0, hal_core::AccessTarget::Device(0)).unwrap(),
        Access::ReadWrite
    );
    assert!(d.unmap(&r, 0, g / 2).is_err(), "whole granules only");
    d.unmap(&r, 0, g).unwrap();
}

/// The child: prints its `process_id()` and OS pid, then for every line
/// `try` imports the handle text of `HAL_ASCEND_TEST_HANDLE`, maps it and
/// answers `ok` (after reading [`DATA`]) or `refused`.
fn importer_child() {
    let d = dev();
    println!("\n@id {} {}", d.process_id().unwrap(), std::process::id());
    let text = std::env::var("HAL_ASCEND_TEST_HANDLE").unwrap();
    for line in std::io::stdin().lock().lines() {
        if line.unwrap() != "try" {
            break;
        }
        let shared = SharedHandle::from(Handle::from_text(&text).unwrap());
        match d.import_physical(shared, &ImportOptions::default()) {
            Ok(q) => {
                let g = d.granularity(Granularity::Minimum).unwrap();
                let r = d.reserve(g, 0).unwrap();
                d.map(&r, 0, &q).unwrap();
                d.set_access(&r, 0, g, Access::ReadWrite).unwrap();
                let mut b = [0u8; 6];
                r.read(0, &mut b).unwrap();
                assert_eq!(&b, DATA);
                d.unmap(&r, 0, g).unwrap();
                println!("\n@ok");
            }
            Err(Error::PermissionDenied { .. }) => println!("\n@refused"),
            Err(e) => panic!("unexpected: {e}"),
        }
    }
}

/// A child importer of `exported`, and its (bare tgid, OS pid).
struct Importer {
    child: Child,
    stdin: ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Importer {
    fn spawn(exported: &Exported) -> (Importer, u32, u32) {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, "vmm-importer")
            .env("HAL_ASCEND_TEST_HANDLE", exported.to_text())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut me = Importer {
            child,
            stdin,
            lines,
        };
        let ids = me.next();
        let ids = ids.strip_prefix("id ").unwrap().to_owned();
        let (tgid, pid) = ids.split_once(' ').unwrap();
        (me, tgid.parse().unwrap(), pid.parse().unwrap())
    }

    fn next(&mut self) -> String {
        loop {
            let l = self.lines.next().expect("the child's answer").unwrap();
            if let Some(answer) = l.strip_prefix('@') {
                return answer.to_string();
            }
        }
    }

    fn ask(&mut self) -> String {
        writeln!(self.stdin, "try").unwrap();
        self.next()
    }

    fn finish(self) {
        let Importer {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        assert!(child.wait().unwrap().success());
    }
}

#[test]
fn a_physical_handle_admits_listed_bare_tgids_only() {
    if role().as_deref() == Some("vmm-importer") {
        return importer_child();
    }
    let d = dev();
    let g = d.granularity(Granularity::Minimum).unwrap();
    let p = d.allocate_physical(g).unwrap();
    let r = d.reserve(g, 0).unwrap();
    d.map(&r, 0, &p).unwrap();
    d.set_access(&r, 0, g, Access::ReadWrite).unwrap();
    r.write(0, DATA).unwrap();
    let mut exported = d.export_physical(&p, &ExportOptions::default()).unwrap();
    let h = exported.handle().clone();
    assert!(
        !h.flags.contains(HandleFlags::ANY_IMPORTER),
        "on by default"
    );
    assert_eq!(h.pid_kind, PidKind::Vendor, "the runtime checks bare tgids");
    let (mut listed, tgid, pid) = Importer::spawn(&exported);
    assert_ne!(
        tgid, pid,
        "a bare tgid is not the OS pid (as in a container)"
    );
    assert_eq!(listed.ask(), "refused", "nobody is allowed by default");
    d.allow_importers(&mut exported, &[pid]).unwrap();
    assert_eq!(listed.ask(), "refused", "an OS pid admits nobody");
    d.allow_importers(&mut exported, &[tgid]).unwrap();
    assert_eq!(listed.ask(), "ok", "the child's process_id() admits it");
    let (mut other, _, _) = Importer::spawn(&exported);
    assert_eq!(other.ask(), "refused", "a child not listed is refused");
    listed.finish();
    other.finish();
    d.unmap(&r, 0, g).unwrap();
}

#[test]
fn disabled_pid_validation_admits_any_child() {
    let d = dev();
    let g = d.granularity(Granularity::Minimum).unwrap();
    let p = d.allocate_physical(g).unwrap();
    let r = d.reserve(g, 0).unwrap();
    d.map(&r, 0, &p).unwrap();
    d.set_access(&r, 0, g, Access::ReadWrite).unwrap();
    r.write(0, DATA).unwrap();
    let anyone = ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    };
    let exported = d.export_physical(&p, &anyone).unwrap();
    assert!(exported.handle().flags.contains(HandleFlags::ANY_IMPORTER));
    // An importer holds a lease until its allocation drops.
    let shared = SharedHandle::from(Handle::from_text(&exported.to_text()).unwrap());
    let q = d
        .import_physical(shared, &ImportOptions::default())
        .unwrap();
    assert_eq!(p.importers(), 1, "the import is counted");
    assert!(format!("{q:?}").contains("imported: true"), "{q:?}");
    match d.export_physical(&q, &anyone) {
        Err(Error::InvalidArgument { what }) => {
            assert!(what.contains("exported again by its creator"), "{what}")
        }
        other => panic!("an import exported again: {other:?}"),
    }
    drop(q);
    assert_eq!(p.importers(), 0, "the dropped import gave its lease back");
    let (mut child, _, _) = Importer::spawn(&exported);
    assert_eq!(child.ask(), "ok", "DISABLE_PID_VALIDATION admits anyone");
    child.finish();
    d.unmap(&r, 0, g).unwrap();
}

/// True for hal's own refusal of an argument (never the runtime's).
fn refused_here<T: std::fmt::Debug>(r: hal_core::Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument { .. }))
}

#[test]
fn sizes_and_devices_are_checked_before_the_runtime_is_asked() {
    use hal_core::{PhysicalDesc, PhysicalLocation};
    let d0 = dev();
    let g = d0.granularity(Granularity::Minimum).unwrap();
    assert!(refused_here(d0.allocate_physical(g / 2)), "half a granule");
    let other = PhysicalDesc::new(g).location(PhysicalLocation::Device(1));
    assert!(
        refused_here(d0.allocate_physical_with(&other)),
        "device 1's memory asked of device 0"
    );
    // A reservation of device 1 of the same backend, and one of device 0
    // of another backend (a runtime of its own): each is foreign to d0,
    // whose own reservation maps the same memory.
    let b = backend();
    let (d0, d1) = (b.open(0).unwrap(), b.open(1).unwrap());
    let p0 = d0.allocate_physical(g).unwrap();
    let own = d0.reserve(g, 0).unwrap();
    d0.map(&own, 0, &p0).expect("d0's own reservation");
    d0.unmap(&own, 0, g).unwrap();
    let r1 = d1.reserve(g, 0).unwrap();
    assert!(
        refused_here(d0.map(&r1, 0, &p0)),
        "device 1's reservation mapped through device 0"
    );
    let elsewhere = backend().open(0).unwrap().reserve(g, 0).unwrap();
    assert!(
        refused_here(d0.map(&elsewhere, 0, &p0)),
        "another runtime's reservation mapped through this device 0"
    );
}

#[test]
fn a_physical_handle_naming_part_of_an_allocation_is_refused() {
    let d = dev();
    let p = d
        .allocate_physical(d.granularity(Granularity::Minimum).unwrap())
        .unwrap();
    hal_tests::cases::partial_physical_handles_are_refused(&d, &p);
}

#[test]
fn copies_through_a_reservation_are_refused_before_the_runtime_without_access() {
    use hal_core::AccessGrant;
    let d = dev();
    let g = d.granularity(Granularity::Minimum).unwrap();
    let p = d.allocate_physical(g).unwrap();
    let r = d.reserve(2 * g, g).unwrap();
    d.map(&r, 0, &p).unwrap();
    let denied = |what: &str, got: hal_core::Result<()>| match got {
        Err(hal_core::Error::PermissionDenied { reason, .. }) => {
            assert!(reason.contains("set_access"), "{what}: {reason}")
        }
        other => panic!("{what}: {other:?}"),
    };
    denied("a write with no access yet", r.write(0, b"x"));
    denied("a read with no access yet", r.read(0, &mut [0u8; 1]));
    d.set_access_for(&r, 0, g, &[AccessGrant::device(0, Access::Read)])
        .unwrap();
    denied("a write with read access", r.write(0, b"x"));
    let shown = format!("{r:?}");
    assert!(shown.contains("AscendReservation"), "{shown}");
    assert!(shown.contains(&format!("{:#x}", r.base())), "{shown}");
}
