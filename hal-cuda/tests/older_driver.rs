//! A driver older than some calls: the stand-in copied without their
//! entry points, loaded in a child as `HAL_CUDA_LIBRARY`. It needs the
//! stand-in, so the GPU smoke run leaves it out.

use hal_core::{Backend, Capabilities, Device};
use hal_cuda::CudaBackend;

const CHILD: &str = "HAL_CUDA_TEST_CASE";

/// A driver older than some calls (the stand-in copied without
/// `cuMemCreate`, `cuIpcOpenEventHandle` and `cuIpcCloseMemHandle`) offers
/// neither VMM, IPC events nor legacy IPC of memory: exports and physical
/// allocations are unsupported, device memory works.
#[test]
fn an_older_driver_offers_only_what_it_has() {
    const ME: &str = "an_older_driver_offers_only_what_it_has";
    if std::env::var(CHILD).as_deref() != Ok(ME) {
        let copy = hal_mock::older::LibraryCopy::without(
            &hal_mock_libcuda::built_library(),
            &["cuMemCreate", "cuIpcOpenEventHandle", "cuIpcCloseMemHandle"],
            &std::env::temp_dir(),
        )
        .unwrap();
        let library = copy.path().to_string_lossy().into_owned();
        let env = [(CHILD, ME), (hal_cuda::LIBRARY_VAR, library.as_str())];
        hal_tests::process::child_passes(ME, "the older driver's child", &env);
        return;
    }
    let d = CudaBackend::new().open(0).unwrap();
    let caps = d.info().capabilities;
    for lacking in [
        Capabilities::VMM,
        Capabilities::GROWABLE,
        Capabilities::IPC_EVENT,
        Capabilities::IPC_MEMORY,
    ] {
        assert!(!caps.contains(lacking), "{lacking:?} in {caps:?}");
    }
    assert!(caps.contains(Capabilities::HOST_REGISTRATION), "{caps:?}");
    let lacks = hal_tests::cases::Lacks {
        export: "cuIpcCloseMemHandle",
        physical: "cuMemCreate",
        event: "cuIpcOpenEventHandle",
    };
    hal_tests::cases::older_runtime_keeps_plain_memory(&d, lacks);
    println!("child done");
}
