//! Devices: information and capabilities.

use hal_core::DeviceExt;
use hal_core::{Vmm, VmmExt};
use std::collections::HashSet;

use hal_core::{
    AllocDesc, Backend, Capabilities as C, Device, EventFlags, ExportOptions, Granularity,
    Importers, Memory,
};

use crate::support::{
    alloc_filled, location, must, must_be_unsupported, must_fail, open_export, Suite,
};

/// Device information is consistent: ordinals match, page sizes ascend and
/// are powers of two, granularities are powers of two, UUIDs are non-zero
/// and distinct, `open(i).info()` equals `devices()[i]`, and an ordinal past
/// the last device is refused.
pub fn devices_info_consistent<B: Backend>(s: &Suite<B>) {
    let infos = must(s.backend().devices(), "devices()");
    assert!(
        !infos.is_empty(),
        "an available backend lists at least one device"
    );
    let mut uuids = HashSet::new();
    for (i, info) in infos.iter().enumerate() {
        let what = format!("device {i} ({})", info.name);
        assert_eq!(info.ordinal, i as u32, "{what}: ordinal");
        assert_eq!(info.backend, s.backend().id(), "{what}: backend id");
        assert_ne!(info.uuid, [0u8; 16], "{what}: the UUID must not be zero");
        assert!(
            uuids.insert(info.uuid),
            "{what}: UUID shared with another device"
        );
        assert!(!info.name.is_empty(), "{what}: empty name");
        assert!(info.total_memory > 0, "{what}: total memory is zero");
        assert!(!info.page_sizes.is_empty(), "{what}: no page sizes");
        for p in &info.page_sizes {
            assert!(
                p.is_power_of_two(),
                "{what}: page size {p:#x} is not a power of two"
            );
        }
        assert!(
            info.page_sizes.windows(2).all(|w| w[0] < w[1]),
            "{what}: page sizes must ascend strictly: {:?}",
            info.page_sizes
        );
        assert_eq!(info.page_size(), info.page_sizes[0]);
        let (gmin, grec) = (info.granularity_min, info.granularity_recommended);
        assert!(
            gmin.is_power_of_two(),
            "{what}: minimum granularity {gmin:#x}"
        );
        assert!(
            grec.is_power_of_two(),
            "{what}: recommended granularity {grec:#x}"
        );
        assert!(
            grec >= gmin,
            "{what}: recommended granularity below the minimum"
        );
        assert_eq!(info.granularity(Granularity::Minimum), gmin);
        let dev = s.open(i as u32);
        assert_eq!(
            dev.info(),
            info,
            "{what}: open({i}).info() differs from devices()[{i}]"
        );
        assert_eq!(dev.capabilities(), info.capabilities);
    }
    let past = infos.len() as u32;
    let _ = must_fail(
        s.backend().open(past),
        "open() of an ordinal past the last device",
    );
}

fn implies(caps: C, a: C, b: C, names: (&str, &str)) {
    if caps.contains(a) {
        assert!(
            caps.contains(b),
            "the device claims {} without {}, which it needs",
            names.0,
            names.1
        );
    }
}

/// Every capability the device claims or lacks matches what it does: host
/// pointers, export of memory, events and notifies, VMM, managed memory and
/// its export (refused through IPC where the vendor refuses it), pid lists,
/// leases.
pub fn capabilities_match_behaviour<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    implies(
        caps,
        C::CREATOR_ONLY_NOTIFY_WAIT,
        C::IPC_NOTIFY,
        ("creator-only-notify-wait", "ipc-notify"),
    );
    implies(
        caps,
        C::PID_ALLOW_LIST_DEFAULT_ON,
        C::PID_ALLOW_LIST,
        ("pid-allow-list-default-on", "pid-allow-list"),
    );
    implies(
        caps,
        C::IPC_EVENT_QUERY,
        C::IPC_EVENT,
        ("ipc-event-query", "ipc-event"),
    );
    implies(
        caps,
        C::IPC_MANAGED_MEMORY,
        C::MANAGED_MEMORY,
        ("ipc-managed-memory", "managed-memory"),
    );
    for (cap, name) in [
        (C::READ_ONLY_EXPORT, "read-only-export"),
        (C::LEASES, "leases"),
        (C::FIXED_ADDRESS_IMPORT, "fixed-address-import"),
        (C::PID_ALLOW_LIST, "pid-allow-list"),
    ] {
        implies(caps, cap, C::IPC_MEMORY, (name, "ipc-memory"));
    }

    // Host visibility.
    let a = alloc_filled(&dev, 1, 7);
    assert_eq!(a.location(), location(&dev), "allocation location");
    assert_ne!(a.addr(), 0, "an allocation has an address");
    match (caps.contains(C::MEMORY_IS_HOST), a.host_ptr()) {
        (true, Some(p)) => {
            // SAFETY: `p` is the first byte of the live, host-visible
            // allocation `a`, at least one page long; nothing else accesses
            // it during this write.
            unsafe { p.write_volatile(0xA5) };
            assert_eq!(
                crate::support::read_vec(&a, 0, 1),
                [0xA5],
                "a write through host_ptr is not read back"
            );
        }
        (false, None) => {}
        (true, None) => panic!("host-visible device gave no host pointer"),
        (false, Some(_)) => panic!("device without host-visible gave a host pointer"),
    }
    // Host visibility is a property of each allocation: host and managed
    // memory are host-visible on every device that has them.
    assert_eq!(a.host_visible(), a.host_ptr().is_some(), "host_visible()");
    let page = dev.info().page_size();
    if let Ok(h) = dev.allocate(&hal_core::AllocDesc::host(page)) {
        assert!(h.host_visible(), "host memory is host-visible");
        must(h.write(0, b"pinned"), "write host memory");
    }
    if caps.contains(C::MANAGED_MEMORY) {
        let m = must(
            dev.allocate(&hal_core::AllocDesc::managed(page)),
            "allocate managed memory",
        );
        assert!(m.host_visible(), "managed memory is host-visible");
    }

    // Memory export, pid lists and leases.
    let opts = open_export(caps);
    if caps.contains(C::IPC_MEMORY) {
        drop(must(dev.export_memory(&a, &opts), "export_memory"));
        let pids = ExportOptions {
            importers: Importers::Pids(vec![std::process::id()]),
            ..ExportOptions::default()
        };
        if caps.contains(C::PID_ALLOW_LIST) {
            drop(must(
                dev.export_memory(&a, &pids),
                "export_memory to a pid list",
            ));
        } else {
            must_be_unsupported(
                dev.export_memory(&a, &pids),
                "pid-allow-list",
                "export to a pid list",
            );
        }
    } else {
        must_be_unsupported(dev.export_memory(&a, &opts), "ipc-memory", "export_memory");
    }
    if caps.contains(C::LEASES) {
        assert_eq!(must(hal_core::Allocation::importers(&a), "importers()"), 0);
    } else {
        must_be_unsupported(hal_core::Allocation::importers(&a), "leases", "importers()");
    }

    // Events and notifies.
    let ipc = EventFlags {
        interprocess: true,
        timing: false,
    };
    match dev.create_event(ipc) {
        Ok(e) => {
            if caps.contains(C::IPC_EVENT) {
                drop(must(dev.export_event(&e, &opts), "export_event"));
            } else {
                must_be_unsupported(dev.export_event(&e, &opts), "ipc-event", "export_event");
            }
        }
        Err(e) if e.is_unsupported() && !caps.contains(C::IPC_EVENT) => {}
        Err(e) => panic!("create_event(interprocess) failed: {e}"),
    }
    let n = must(dev.create_notify(), "create_notify");
    if caps.contains(C::IPC_NOTIFY) {
        drop(must(dev.export_notify(&n, &opts), "export_notify"));
    } else {
        must_be_unsupported(dev.export_notify(&n, &opts), "ipc-notify", "export_notify");
    }

    // VMM.
    let g = dev.info().granularity_min;
    if caps.contains(C::VMM) {
        drop(must(dev.allocate_physical(g), "allocate_physical"));
        drop(must(dev.reserve(g, g), "reserve"));
    } else {
        must_be_unsupported(dev.allocate_physical(g), "vmm", "allocate_physical");
        must_be_unsupported(dev.reserve(g, g), "vmm", "reserve");
    }

    // Managed memory, and its export (CUDA cannot export it through IPC).
    let managed = AllocDesc::managed(dev.info().page_size());
    if caps.contains(C::MANAGED_MEMORY) {
        let m = must(dev.allocate(&managed), "allocate managed memory");
        if caps.contains(C::IPC_MANAGED_MEMORY) {
            drop(must(
                dev.export_memory(&m, &opts),
                "export of managed memory",
            ));
        } else {
            must_be_unsupported(
                dev.export_memory(&m, &opts),
                "ipc-managed-memory",
                "export of managed memory",
            );
        }
    } else {
        must_be_unsupported(
            dev.allocate(&managed),
            "managed-memory",
            "allocate managed memory",
        );
    }
}
