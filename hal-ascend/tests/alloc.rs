//! `aclrtMalloc` takes no alignment: an aligned request is served by one
//! call when the runtime's address is aligned already, and padded only
//! when it is not; and exported memory is freed only after its last
//! importer closed (counted in a child process of its own, where nothing
//! else allocates).

mod common;

use common::{alone_in_a_child, backend, calls};
use hal_core::{AllocDesc, Backend, Device, ExportOptions, ImportOptions, Importers, Memory};

/// In the child: an aligned address costs one `aclrtMalloc`; a misaligned
/// one is given back and padded.
fn counted() {
    let d = backend().open(0).unwrap();
    let (malloc, free) = (calls("aclrtMalloc"), calls("aclrtFree"));
    let page = AllocDesc {
        align: 4096,
        ..AllocDesc::device(0, 1 << 20)
    };
    let a = d.allocate(&page).unwrap();
    assert_eq!(a.addr() % 4096, 0);
    assert_eq!(
        (calls("aclrtMalloc"), calls("aclrtFree")),
        (malloc + 1, free),
        "the runtime's address was aligned: one call, nothing given back"
    );
    // Past anything the runtime aligns to: given back and padded.
    let huge = AllocDesc {
        align: 1 << 30,
        ..AllocDesc::device(0, 4096)
    };
    let b = d.allocate(&huge).unwrap();
    assert_eq!(b.addr() % (1 << 30), 0);
    assert_eq!(
        (calls("aclrtMalloc"), calls("aclrtFree")),
        (malloc + 3, free + 1),
        "a misaligned address: given back, then padded"
    );
    drop((a, b));

    // Freed at its drop when nobody imported it; after the last importer
    // closed when one did.
    let lone = d.allocate(&AllocDesc::device(0, 1 << 20)).unwrap();
    let _ = d.export_memory(&lone, &anyone()).unwrap();
    let free = calls("aclrtFree");
    drop(lone);
    assert_eq!(calls("aclrtFree"), free + 1, "freed at its drop");
    let shared = d.allocate(&AllocDesc::device(0, 1 << 20)).unwrap();
    let exported = d.export_memory(&shared, &anyone()).unwrap();
    let import = d
        .import_memory(exported.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let free = calls("aclrtFree");
    drop(shared);
    drop(exported);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(calls("aclrtFree"), free, "not while an importer holds it");
    drop(import);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while calls("aclrtFree") < free + 1 {
        assert!(
            std::time::Instant::now() < end,
            "never freed after its importer closed"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn anyone() -> ExportOptions {
    ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    }
}

#[test]
fn mallocs_and_frees_are_counted() {
    alone_in_a_child("mallocs_and_frees_are_counted", counted);
}

#[test]
fn an_allocation_shows_its_address_length_and_device() {
    let d = backend().open(0).unwrap();
    let a = d.allocate(&AllocDesc::device(0, 4096)).unwrap();
    let shown = format!("{a:?}");
    for part in [
        "AscendAllocation".to_string(),
        format!("ptr: {:#x}", a.addr()),
        "len: 4096".to_string(),
        "device: 0".to_string(),
    ] {
        assert!(shown.contains(&part), "{shown} lacks {part}");
    }
}
