//! Visible-device lists (`CUDA_VISIBLE_DEVICES`, `ASCEND_RT_VISIBLE_DEVICES`,
//! container device lists): processes that number the devices differently
//! agree on their UUIDs, and a handle imports onto the device it was
//! exported from, found by UUID, never by the exporter's ordinal.

mod common;

use common::{aligned, assert_vendor, child_role, spawn_child, LONG};
use hal_core::{
    Allocation, Backend, Device, Error, ExportOptions, Handle, ImportOptions, Importers, Location,
    Memory, SharedHandle,
};
use hal_mock::{MockBackend, Profile, Vendor};

const PAGE: u64 = 4096;
const MEM: &str = "HAL_MOCK_TEST_MEM";
const PATTERN: &[u8] = b"written on physical device";
const REPLY: &[u8] = b"reply from the child";

fn read_vec(mem: &impl Memory, offset: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    mem.read(offset, &mut b).expect("read");
    b
}

fn invalid_argument<T: std::fmt::Debug>(r: hal_core::Result<T>) {
    match r {
        Err(Error::InvalidArgument { .. }) => {}
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// Two backends with different visible lists report the same UUID (and
/// name) for the same physical device at different ordinals.
#[test]
fn visible_lists_agree_on_uuids() {
    let all = MockBackend::new(Profile::cuda()).devices().unwrap();
    let swapped = MockBackend::new(Profile::cuda().with_visible_devices(&[2, 0]).unwrap());
    let other = MockBackend::new(Profile::cuda().with_visible_devices(&[3, 1, 2]).unwrap());
    let (swapped_devs, other_devs) = (swapped.devices().unwrap(), other.devices().unwrap());
    assert_eq!(swapped_devs.len(), 2);
    assert_eq!(other_devs.len(), 3);
    // Physical device 2 is ordinal 2, 0 and 2 in the three processes' eyes.
    assert_eq!(swapped_devs[0].uuid, all[2].uuid);
    assert_eq!(other_devs[2].uuid, all[2].uuid);
    assert_eq!(swapped_devs[1].uuid, all[0].uuid);
    assert_eq!(other_devs[0].uuid, all[3].uuid);
    assert_eq!(other_devs[1].uuid, all[1].uuid);
    assert_eq!(swapped_devs[0].name, all[2].name);
    assert_eq!(swapped_devs[0].total_memory, all[2].total_memory);
    for (i, d) in swapped_devs.iter().enumerate() {
        assert_eq!(d.ordinal, i as u32, "ordinals are this process's");
    }
    assert_eq!(swapped.open(0).unwrap().physical_device(), 2);
    assert_eq!(swapped.open(1).unwrap().physical_device(), 0);
    // Ordinal 2 does not exist where only two devices are visible.
    let err = swapped.open(2).unwrap_err();
    assert_vendor(&err, Vendor::Cuda.invalid_device());

    let ascend = MockBackend::ascend().devices().unwrap();
    let ascend_swapped = MockBackend::new(Profile::ascend().with_visible_devices(&[1]).unwrap())
        .devices()
        .unwrap();
    assert_eq!(ascend_swapped.len(), 1);
    assert_eq!(ascend_swapped[0].uuid, ascend[1].uuid);

    invalid_argument(Profile::cuda().with_visible_devices(&[2, 2]));
    invalid_argument(Profile::cuda().with_visible_devices(&[4]));
    invalid_argument(Profile::ascend().with_visible_devices(&[0, 2]));
}

/// In one process, two backend instances stand for two processes with
/// different lists: an import lands on the importer's ordinal of the same
/// physical device; a device the importer does not see is the vendor's
/// invalid-device error naming the UUID; peer access is between this
/// process's ordinals.
#[test]
fn imports_follow_the_physical_device_in_process() {
    let exporter = MockBackend::cuda();
    let gpu2 = exporter.open(2).unwrap();
    let a = gpu2.allocate(&aligned(2, PAGE)).unwrap();
    a.write(0, PATTERN).unwrap();
    let exported = gpu2.export_memory(&a, &ExportOptions::default()).unwrap();
    let uuid = exported.handle().device_uuid;

    let swapped = MockBackend::new(Profile::cuda().with_visible_devices(&[2, 0]).unwrap());
    let here = swapped.open(0).unwrap();
    assert_eq!(here.info().uuid, uuid);
    let m = here
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    assert_eq!(m.location(), Location::Device(0));
    assert_eq!(m.device(), 0);
    assert_eq!(read_vec(&m, 0, PATTERN.len()), PATTERN);

    // Onto ordinal 1 (physical device 0): a peer import, between this
    // process's ordinals.
    let onto_1 = ImportOptions {
        device: Some(1),
        ..ImportOptions::default()
    };
    let err = here
        .import_memory(exported.share().unwrap(), &onto_1)
        .unwrap_err();
    assert_vendor(&err, Vendor::Cuda.peer_not_enabled());
    let one = swapped.open(1).unwrap();
    // Ordinal 2 is not a device of this process.
    assert_vendor(
        &one.enable_peer_access(2).unwrap_err(),
        Vendor::Cuda.invalid_device(),
    );
    one.enable_peer_access(0).unwrap();
    assert!(one.peer_access_enabled(0));
    let peer = here
        .import_memory(exported.share().unwrap(), &onto_1)
        .unwrap();
    assert_eq!(peer.device(), 1);
    assert_eq!(peer.location(), Location::Device(0));

    // Physical device 2 is not visible: refused by UUID, although this
    // process has an ordinal 2 (physical device 3) that an import by
    // ordinal would have used.
    let hidden = MockBackend::new(Profile::cuda().with_visible_devices(&[0, 1, 3]).unwrap());
    let err = hidden
        .open(0)
        .unwrap()
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap_err();
    assert_vendor(&err, Vendor::Cuda.invalid_device());
    assert!(
        err.to_string().contains(&hal_core::kit::os::hex(&uuid)),
        "the error names the UUID: {err}"
    );
    drop((m, peer));
    a.wait_unleased(Some(LONG)).unwrap();
    a.free().unwrap();
}

/// One vendor's scenario: which device the parent exports from, the child
/// lists that see it (and at which ordinal), and those that do not.
struct Scenario {
    test: &'static str,
    profile: fn() -> Profile,
    exporter: u32,
    importers: Importers,
    /// (visible list, the ordinal the exporter's device has there)
    seeing: &'static [(&'static str, u32)],
    /// Visible lists without the exporter's device.
    blind: &'static [&'static str],
}

/// The parent sees every device, allocates on `exporter`, writes a pattern
/// and exports with default options (Ascend: `Importers::Anyone`). Children
/// started with `HAL_MOCK_VISIBLE_DEVICES` import from the handle text
/// alone: those that see the device land on their own ordinal of it and
/// read the pattern; the others get the invalid-device error.
fn parent(s: &Scenario) {
    let profile = (s.profile)();
    let backend = MockBackend::new(profile.clone());
    let dev = backend.open(s.exporter).unwrap();
    let a = dev.allocate(&aligned(s.exporter, 2 * PAGE)).unwrap();
    a.write(0, PATTERN).unwrap();
    let exported = dev
        .export_memory(
            &a,
            &ExportOptions {
                importers: s.importers.clone(),
                ..ExportOptions::default()
            },
        )
        .unwrap();
    assert_eq!(exported.handle().device, s.exporter);
    // The child's environment names the physical device count too, so that
    // a HAL_MOCK_DEVICES inherited from the caller cannot change it.
    let env = |visible: &str, ordinal: Option<u32>| {
        vec![
            (MEM, exported.to_text()),
            (
                "HAL_MOCK_DEVICES",
                format!("{}={}", profile.name, profile.devices),
            ),
            (
                "HAL_MOCK_VISIBLE_DEVICES",
                format!("{}={visible}", profile.name),
            ),
            (
                "HAL_MOCK_TEST_ORDINAL",
                ordinal.map(|o| o.to_string()).unwrap_or_default(),
            ),
        ]
    };
    let run = |role: &str, visible: &str, ordinal: Option<u32>, want: &str| {
        let mut child = spawn_child(s.test, role, &env(visible, ordinal));
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(want),
            "child with visible devices {visible} failed: {stdout}"
        );
    };
    for &(visible, ordinal) in s.seeing {
        run("seeing", visible, Some(ordinal), "child: imported");
        // The child wrote its reply into the same memory on its way out.
        assert_eq!(read_vec(&a, PAGE, REPLY.len()), REPLY);
        a.write(PAGE, &[0; REPLY.len()]).unwrap();
    }
    for &visible in s.blind {
        run("blind", visible, None, "child: refused");
    }
    a.wait_unleased(Some(LONG)).unwrap();
    a.free().unwrap();
}

/// A child: `profile` with the device count and visible devices the parent
/// put in the environment.
fn child(role: &str, profile: fn() -> Profile) {
    let profile = profile()
        .with_env_overrides()
        .expect("the profile from the environment");
    let vendor = profile.vendor;
    let backend = MockBackend::new(profile);
    let text = std::env::var(MEM).expect("handle text in the environment");
    let handle = Handle::from_text(&text).expect("a valid handle text");
    let uuid = handle.device_uuid;
    // Every process has an ordinal 0; the import is asked of it, whatever
    // device the handle names.
    let dev = backend.open(0).unwrap();
    let r = dev.import_memory(SharedHandle::from(handle), &ImportOptions::default());
    match role {
        "seeing" => {
            let ordinal: u32 = std::env::var("HAL_MOCK_TEST_ORDINAL")
                .expect("the expected ordinal")
                .parse()
                .expect("an ordinal");
            let m = r.expect("the import");
            assert_eq!(m.location(), Location::Device(ordinal));
            assert_eq!(m.device(), ordinal);
            assert_eq!(backend.devices().unwrap()[ordinal as usize].uuid, uuid);
            assert_eq!(read_vec(&m, 0, PATTERN.len()), PATTERN);
            m.write(PAGE, REPLY).unwrap();
            println!("child: imported onto ordinal {ordinal}");
        }
        "blind" => {
            let err = r.expect_err("an import of a device this process does not see");
            assert_vendor(&err, vendor.invalid_device());
            let msg = err.to_string();
            assert!(
                msg.contains(&hal_core::kit::os::hex(&uuid)),
                "the error names the UUID: {msg}"
            );
            assert!(
                backend.devices().unwrap().iter().all(|d| d.uuid != uuid),
                "no device here has the handle's UUID"
            );
            println!("child: refused");
        }
        other => panic!("unknown role {other}"),
    }
}

/// CUDA-like: the parent exports from its ordinal 2. A child seeing
/// `2,0` imports onto its ordinal 0, one seeing `3,1,2` onto its ordinal 2;
/// children seeing `0,1` (no ordinal 2) or `0,1,3` (an ordinal 2 that is
/// physical device 3) are refused.
#[test]
fn cuda_child_with_other_visible_devices_imports_by_uuid() {
    if let Some(role) = child_role() {
        return child(&role, Profile::cuda);
    }
    parent(&Scenario {
        test: "cuda_child_with_other_visible_devices_imports_by_uuid",
        profile: Profile::cuda,
        exporter: 2,
        importers: Importers::BackendDefault,
        seeing: &[("2,0", 0), ("3,1,2", 2)],
        blind: &["0,1", "0,1,3"],
    });
}

/// Ascend-like: the parent exports from its ordinal 1 to anyone (the pid
/// allow-list is on by default). A child seeing `1,0` imports onto its
/// ordinal 0; one seeing only `0` is refused.
#[test]
fn ascend_child_with_other_visible_devices_imports_by_uuid() {
    if let Some(role) = child_role() {
        return child(&role, Profile::ascend);
    }
    parent(&Scenario {
        test: "ascend_child_with_other_visible_devices_imports_by_uuid",
        profile: Profile::ascend,
        exporter: 1,
        importers: Importers::Anyone,
        seeing: &[("1,0", 0)],
        blind: &["0"],
    });
}
