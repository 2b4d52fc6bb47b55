//! What the device itself answers, apart from its memory: its name in
//! logs, the caller's current context, imports onto another GPU of the
//! backend, and pid allow-lists, each routed to the side that keeps it
//! (the home pages' host, or the GPU).

use hal_core::testing::ContextProbe;
use hal_core::DeviceExt;
use hal_core::{
    AllocDesc, Backend, BackendId, Capabilities, Device, Error, ExportOptions, ImportOptions,
    Importers, Memory,
};
use hal_cuda_uvm::UvmBackend;
use hal_mock::context;
use hal_mock::{MockBackend, Profile};

const PAGE: u64 = 4096;

fn mock() -> UvmBackend<MockBackend> {
    UvmBackend::over(MockBackend::cuda())
}

#[test]
fn debug_names_the_backend_the_device_and_its_streams() {
    let backend = mock();
    let shown = format!("{backend:?}");
    let gpu = format!("{:?}", backend.gpu().id());
    assert!(
        shown.starts_with("UvmBackend") && shown.contains(&gpu),
        "{shown}"
    );
    let dev = backend.open(1).unwrap();
    let shown = format!("{dev:?}");
    assert!(shown.starts_with("UvmDevice"), "{shown}");
    assert!(shown.contains("ordinal: 1"), "{shown}");
    assert!(shown.contains(&dev.info().name), "{shown}");
    let stream = dev.create_stream().unwrap();
    let shown = format!("{stream:?}");
    assert!(
        shown.starts_with("UvmStream") && shown.contains(&format!("{:?}", stream.inner())),
        "{shown}"
    );
}

/// The current context is the calling thread's, as the GPU reports it:
/// none on a fresh thread, and the one a framework made current.
#[test]
fn the_current_context_is_the_gpus_answer_for_the_calling_thread() {
    let dev = mock().open(0).unwrap();
    std::thread::scope(|t| {
        t.spawn(|| {
            assert_eq!(dev.current_context().unwrap(), None, "a fresh thread");
            let theirs = mock().open(1).unwrap().gpu().context();
            context::make_current(Some(theirs));
            let seen = dev.current_context().unwrap();
            assert_eq!(seen, Some(theirs.id()), "a framework's context");
            assert_eq!(seen, dev.gpu().current_context().unwrap());
            // Work leaves it alone.
            let a = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
            a.write(0, b"x").unwrap();
            assert_eq!(dev.current_context().unwrap(), Some(theirs.id()));
            context::make_current(None);
            assert_eq!(dev.current_context().unwrap(), None);
        });
    });
}

/// Home pages are registered for every GPU (portable), so an import names
/// any GPU of the backend; one that does not exist is refused (and is
/// moot to a process that maps the buffer without a GPU).
#[test]
fn a_shared_buffer_imports_onto_any_gpu_of_the_backend() {
    let dev = mock().open(0).unwrap();
    let a = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
    a.write(0, b"portable").unwrap();
    let ex = dev.export_memory(&a, &ExportOptions::default()).unwrap();
    let onto_one = ImportOptions {
        device: Some(1),
        ..ImportOptions::default()
    };
    let m = dev.import_memory(ex.share().unwrap(), &onto_one).unwrap();
    let mut got = [0u8; 8];
    m.read(0, &mut got).unwrap();
    assert_eq!(&got, b"portable");
    let nowhere = ImportOptions {
        device: Some(99),
        ..ImportOptions::default()
    };
    let e = dev
        .import_memory(ex.share().unwrap(), &nowhere)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // A process without a GPU has no GPU to name: the option is moot there.
    let pages = hal_cuda_uvm::open_on_cpu(ex.share().unwrap(), &nowhere).unwrap();
    pages.read(0, &mut got).unwrap();
    assert_eq!(&got, b"portable");
}

/// Over a GPU that keeps pid allow-lists, the home's export is the host's
/// (its list is the host's) and device memory's is the GPU's; either way
/// the export keeps this backend's name. Seen by taking the GPU's call
/// away: the GPU's exports then fail to take pids, the home's do not.
#[test]
fn allow_lists_go_to_the_side_that_keeps_them() {
    let mut profile = Profile::cuda();
    profile.capabilities = profile.capabilities.union(Capabilities::PID_ALLOW_LIST);
    let dev = UvmBackend::over(MockBackend::new(profile)).open(0).unwrap();
    assert!(dev.capabilities().contains(Capabilities::PID_ALLOW_LIST));
    let only = ExportOptions {
        importers: Importers::Pids(vec![]),
        ..ExportOptions::default()
    };
    let me = dev.process_id().unwrap();
    let home = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
    let inner = dev.allocate(&AllocDesc::device(0, PAGE)).unwrap();
    let mut home_ex = dev.export_memory(&home, &only).unwrap();
    let mut inner_ex = dev.export_memory(&inner, &only).unwrap();

    // The simulator's pid call of CUDA-like memory is its IPC entry point.
    dev.gpu().faults().remove_entry_point("cuIpcGetMemHandle");
    let e = dev.allow_importers(&mut inner_ex, &[me]).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    dev.allow_importers(&mut home_ex, &[me]).unwrap();
    assert!(
        home_ex.handle().allows(me),
        "{:?}",
        home_ex.handle().allowed_pids
    );
    assert_eq!(home_ex.handle().backend, BackendId::CudaUvm);

    dev.gpu().faults().restore_entry_point("cuIpcGetMemHandle");
    dev.allow_importers(&mut inner_ex, &[me]).unwrap();
    assert!(
        inner_ex.handle().allows(me),
        "{:?}",
        inner_ex.handle().allowed_pids
    );
    assert_eq!(inner_ex.handle().backend, BackendId::CudaUvm);
    assert_eq!(inner_ex.handle().device, 0);
    assert_eq!(inner_ex.handle().device_uuid, dev.info().uuid);
}

/// Over a GPU that keeps none (CUDA's), allow_importers is unsupported for
/// every kind of export, the home's included.
#[test]
fn without_allow_lists_allow_importers_is_unsupported() {
    let dev = mock().open(0).unwrap();
    let home = dev.allocate(&AllocDesc::managed(PAGE)).unwrap();
    let mut ex = dev.export_memory(&home, &ExportOptions::default()).unwrap();
    let e = dev.allow_importers(&mut ex, &[1]).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
}

#[test]
fn devices_declare_cudas_dlpack_types_whatever_the_gpu() {
    use hal_core::dlpack::{dl_device, DLDeviceType};
    use hal_core::Location;
    let dev = mock().open(0).unwrap();
    let info = dev.info();
    let device_type = |l| dl_device(info, l).unwrap().device_type;
    assert_eq!(device_type(Location::Device(0)), DLDeviceType::CUDA);
    assert_eq!(device_type(Location::Host), DLDeviceType::CUDA_HOST);
    assert_eq!(device_type(Location::Managed), DLDeviceType::CUDA_MANAGED);
}
