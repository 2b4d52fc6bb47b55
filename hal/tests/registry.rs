//! The registry and the dynamic layer, on the backends compiled in.

use hal::dynamic::{DynBackend, DynDevice};
use hal::{compiled_in, registry, AllocDesc, BackendId, Capabilities, DeviceInfo, Error};
use hal::{Availability, ExportOptions, Handle, Registry};

fn desc(info: &DeviceInfo, size: u64) -> AllocDesc {
    if info.capabilities.contains(Capabilities::MEMORY_IS_HOST) {
        AllocDesc::host(size)
    } else {
        AllocDesc::device(info.ordinal, size)
    }
}

#[test]
fn compiled_in_lists_the_features() {
    let names = compiled_in();
    assert_eq!(names.contains(&"cpu-shm"), cfg!(feature = "cpu-shm"));
    assert_eq!(names.contains(&"mock-cuda"), cfg!(feature = "mock"));
    assert_eq!(names.contains(&"mock-ascend"), cfg!(feature = "mock"));
    assert_eq!(registry::compiled_in(), names);
}

/// The compiled-in backends usable on this machine (CUDA only with its driver).
fn usable(registry: &Registry) -> Vec<String> {
    registry
        .entries()
        .into_iter()
        .filter(|e| e.availability.is_available())
        .map(|e| e.name)
        .collect()
}

#[test]
fn every_entry_is_probed_and_usable_here() {
    let registry = Registry::new();
    let entries = registry.entries();
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, compiled_in());
    for entry in &entries {
        assert_eq!(entry.id.name(), entry.name);
        if matches!(entry.name.as_str(), "cuda" | "cuda-uvm" | "ascend")
            && !entry.availability.is_available()
        {
            // A machine without the NVIDIA driver or CANN: the entry says why.
            assert!(
                matches!(&entry.availability, Availability::Unavailable { searched, .. } if !searched.is_empty()),
                "{:?}",
                entry.availability
            );
            continue;
        }
        // CPU shared memory and the simulator work on every Linux machine.
        assert!(
            entry.availability.is_available(),
            "{}: {:?}",
            entry.name,
            entry.availability
        );
        let backend = registry.open(&entry.name).expect("open");
        assert_eq!(backend.id(), entry.id);
        assert_eq!(backend.name(), entry.name);
        let devices = backend.devices().expect("devices");
        assert!(!devices.is_empty(), "{} lists no device", entry.name);
        for (ordinal, info) in devices.iter().enumerate() {
            assert_eq!(info.backend, entry.id);
            assert_eq!(info.ordinal, ordinal as u32);
        }
        let device = backend.open(0).expect("open device 0");
        assert_eq!(device.info(), &devices[0]);
    }
}

#[test]
fn names_are_forgiving_but_unknown_ones_are_not_found() {
    let registry = Registry::new();
    if cfg!(feature = "mock") {
        assert_eq!(registry.open("mock").unwrap().name(), "mock-cuda");
        assert_eq!(registry.open("Mock_Ascend").unwrap().name(), "mock-ascend");
    }
    match registry.open("no-such-backend") {
        Err(Error::NotFound { what }) => {
            for name in compiled_in() {
                assert!(what.contains(name), "{what}");
            }
        }
        other => panic!("expected NotFound, got {:?}", other.map(|b| b.name())),
    }
    // Known to the project, but not compiled into this build (a build of
    // `hal` alone; `cargo test --workspace` unifies halctl's features, which
    // compile every backend in).
    let known = [
        "cuda",
        "cuda-uvm",
        "ascend",
        "cpu-shm",
        "mock-cuda",
        "mock-ascend",
    ];
    match known.iter().find(|n| !compiled_in().contains(n)) {
        Some(absent) => match registry.open(absent) {
            Err(Error::NotFound { what }) => {
                assert!(what.contains("not compiled"), "{what}");
                assert!(what.contains(&format!("`{absent}`")), "{what}");
            }
            other => panic!("expected NotFound, got {:?}", other.map(|b| b.name())),
        },
        None => eprintln!("every backend is compiled in: no name to refuse as absent"),
    }
}

#[cfg(feature = "cpu-shm")]
#[test]
fn best_prefers_cpu_shm_over_the_simulator() {
    let registry = Registry::new();
    assert_eq!(registry.best().unwrap().name(), "cpu-shm");
    assert_eq!(
        registry
            .best_of(&["cuda", "ascend", "cpu-shm"])
            .unwrap()
            .name(),
        "cpu-shm"
    );
}

#[cfg(feature = "mock")]
#[test]
fn best_of_follows_the_given_order() {
    let registry = Registry::new();
    assert_eq!(
        registry
            .best_of(&["mock-ascend", "cpu-shm"])
            .unwrap()
            .name(),
        "mock-ascend"
    );
    assert_eq!(
        registry.best_of(&["cuda", "mock"]).unwrap().name(),
        "mock-cuda"
    );
}

#[test]
fn best_of_refuses_typos_empty_lists_and_nothing_usable() {
    let registry = Registry::new();
    assert!(matches!(
        registry.best_of(&["cpu-shm", "cdua"]),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        registry.best_of(&[]),
        Err(Error::InvalidArgument { .. })
    ));
    match registry.best_of(&["cuda-uvm", "ascend"]) {
        Err(Error::Unavailable { reason, .. }) => {
            // Compiled in (feature `cuda-uvm`), it says why it cannot run here.
            #[cfg(not(feature = "cuda-uvm"))]
            assert!(reason.contains("cuda-uvm: not compiled in"), "{reason}");
            #[cfg(feature = "cuda-uvm")]
            assert!(reason.contains("cuda-uvm: "), "{reason}");
            if cfg!(feature = "ascend") {
                // Compiled in (cargo test --workspace unifies halctl's
                // features): without CANN it is unavailable and says why.
                assert!(reason.contains("ascend:"), "{reason}");
            } else {
                assert!(reason.contains("ascend: not compiled in"), "{reason}");
            }
        }
        // A machine with a GPU and the feature on.
        #[cfg(feature = "cuda-uvm")]
        Ok(b) => assert_eq!(b.name(), "cuda-uvm"),
        other => panic!("expected Unavailable, got {:?}", other.map(|b| b.name())),
    }
}

#[test]
fn for_handle_finds_the_exporting_backend() {
    let registry = Registry::new();
    for name in &usable(&registry) {
        let backend = registry.open(name).unwrap();
        let device = backend.open(0).unwrap();
        let size = device.info().granularity_recommended.max(4096);
        let alloc = device.allocate(&desc(device.info(), size)).unwrap();
        let exported = device
            .export_memory(&*alloc, &ExportOptions::default())
            .unwrap();
        let found = registry.for_handle(exported.handle()).unwrap();
        assert_eq!(found.id(), backend.id(), "{name}");
    }
    let mut handle: Handle = {
        let backend = registry.best().unwrap();
        let device = backend.open(0).unwrap();
        let alloc = device.allocate(&desc(device.info(), 4096)).unwrap();
        device
            .export_memory(&*alloc, &ExportOptions::default())
            .unwrap()
            .handle()
            .clone()
    };
    handle.backend = BackendId::External(0x8123);
    assert!(matches!(
        registry.for_handle(&handle),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn boxed_resources_work_through_the_dynamic_layer() {
    let registry = Registry::new();
    for name in &usable(&registry) {
        let device = registry.open(name).unwrap().open(0).unwrap();
        let size = device.info().granularity_recommended.max(4096);
        let alloc = device.allocate(&desc(device.info(), size)).unwrap();
        alloc.write(100, b"dynamic").unwrap();
        let mut back = [0u8; 7];
        alloc.read(100, &mut back).unwrap();
        assert_eq!(&back, b"dynamic", "{name}");
        assert_eq!(alloc.importers().unwrap(), 0, "{name}");

        let stream = device.create_stream().unwrap();
        let event = device
            .create_event(hal::EventFlags {
                interprocess: true,
                timing: false,
            })
            .unwrap();
        device.record_event(&stream, &*event).unwrap();
        device.stream_wait_event(&stream, &*event).unwrap();
        device
            .synchronize(&stream, Some(std::time::Duration::from_secs(10)))
            .unwrap();
        event
            .wait(hal::WaitOptions::timeout(std::time::Duration::from_secs(
                10,
            )))
            .unwrap();

        let notify = device.create_notify().unwrap();
        device.record_notify(&stream, &*notify).unwrap();
        notify
            .wait(hal::WaitOptions::timeout(std::time::Duration::from_secs(
                10,
            )))
            .unwrap();

        if device.capabilities().contains(Capabilities::VMM) {
            let gran = device.vmm().granularity(hal::Granularity::Minimum).unwrap();
            let reservation = device.vmm().reserve(2 * gran, gran).unwrap();
            let physical = device.vmm().allocate_physical(gran).unwrap();
            device.vmm().map(&*reservation, 0, &*physical).unwrap();
            device
                .vmm()
                .set_access(&*reservation, 0, gran, hal::Access::ReadWrite)
                .unwrap();
            reservation.write(0, b"vmm").unwrap();
            let mut vmm = [0u8; 3];
            reservation.read(0, &mut vmm).unwrap();
            assert_eq!(&vmm, b"vmm", "{name}");
            device.vmm().unmap(&*reservation, 0, gran).unwrap();
        }
        // The backend's own type is behind every box.
        assert!(alloc.as_any().type_id() != std::any::TypeId::of::<()>());
        let _ = alloc.free();
    }
}

/// Every operation that takes a resource refuses one made by another backend
/// with `InvalidArgument`: never a panic, never a success.
#[cfg(all(feature = "cpu-shm", feature = "mock"))]
#[test]
fn resources_of_another_backend_are_refused() {
    let registry = Registry::new();
    let cpu = registry.open("cpu-shm").unwrap().open(0).unwrap();
    let mock = registry.open("mock-cuda").unwrap().open(0).unwrap();
    let gran = cpu.vmm().granularity(hal::Granularity::Minimum).unwrap();
    let alloc = cpu.allocate(&AllocDesc::host(4096)).unwrap();
    let stream = cpu.create_stream().unwrap();
    let event = cpu.create_event(hal::EventFlags {
        interprocess: true,
        timing: false,
    });
    let event = event.unwrap();
    let notify = cpu.create_notify().unwrap();
    let physical = cpu.vmm().allocate_physical(gran).unwrap();
    let reservation = cpu.vmm().reserve(gran, gran).unwrap();
    let mock_stream = mock.create_stream().unwrap();
    let opts = ExportOptions::default();

    fn refused<T>(what: &str, r: hal::Result<T>) {
        match r {
            Err(Error::InvalidArgument { what: msg }) => {
                assert!(msg.contains("mock-cuda"), "{what}: {msg}")
            }
            Err(e) => panic!("{what}: expected InvalidArgument, got {e}"),
            Ok(_) => panic!("{what}: a foreign resource was accepted"),
        }
    }
    refused("export_memory", mock.export_memory(&*alloc, &opts));
    refused("synchronize", mock.synchronize(&stream, None));
    refused("record_event", mock.record_event(&mock_stream, &*event));
    refused(
        "stream_wait_event",
        mock.stream_wait_event(&stream, &*event),
    );
    refused("export_event", mock.export_event(&*event, &opts));
    refused("record_notify", mock.record_notify(&mock_stream, &*notify));
    refused(
        "stream_wait_notify",
        mock.stream_wait_notify(&mock_stream, &*notify, None),
    );
    refused("export_notify", mock.export_notify(&*notify, &opts));
    refused(
        "export_physical",
        mock.vmm().export_physical(&*physical, &opts),
    );
    refused("unmap", mock.vmm().unmap(&*reservation, 0, gran));
    refused(
        "set_access",
        mock.vmm()
            .set_access(&*reservation, 0, gran, hal::Access::Read),
    );
    let mock_gran = mock.vmm().granularity(hal::Granularity::Minimum).unwrap();
    let mock_res = mock.vmm().reserve(mock_gran, mock_gran).unwrap();
    refused("map", mock.vmm().map(&*mock_res, 0, &*physical));
    refused("map", mock.vmm().map(&*reservation, 0, &*physical));
}

/// The two simulator profiles share resource types, so the type check of the
/// dynamic layer cannot tell them apart: the backend itself must refuse.
#[cfg(feature = "mock")]
#[test]
fn resources_of_the_other_simulator_profile_are_refused() {
    let registry = Registry::new();
    let cuda = registry.open("mock-cuda").unwrap().open(0).unwrap();
    let ascend = registry.open("mock-ascend").unwrap().open(0).unwrap();
    let alloc = cuda.allocate(&AllocDesc::device(0, 2 << 20)).unwrap();
    let r = ascend.export_memory(&*alloc, &ExportOptions::default());
    assert!(
        r.is_err(),
        "an allocation of mock-cuda was exported by mock-ascend"
    );
}

#[test]
fn the_registry_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Registry>();
    shared::<Box<dyn DynBackend>>();
    shared::<Box<dyn DynDevice>>();
    let registry = std::sync::Arc::new(Registry::new());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let registry = std::sync::Arc::clone(&registry);
            std::thread::spawn(move || registry.entries().len())
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), compiled_in().len());
    }
}
