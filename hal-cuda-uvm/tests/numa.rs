//! The host-NUMA home between real processes on the simulator's CUDA-like
//! profile (VMM with host-NUMA pages): the CPU and the GPU address of each
//! process are one, and a second process reads and writes the same pages;
//! and over hal-cuda on the stand-in driver, which offers host-NUMA VMM.

use hal_core::{Backend, ExportOptions, Memory};
use hal_cuda_uvm::{NumaHome, UvmBackend};

mod child;

const MIB: u64 = 1 << 20;
const VAR: &str = "HAL_UVM_NUMA_HANDLE";

/// The attaching process.
#[test]
#[ignore = "child entry point: run by its parent"]
fn a_host_numa_home_is_shared_by_descriptor_child() {
    let dev = UvmBackend::over(hal_mock::MockBackend::cuda())
        .open(0)
        .unwrap();
    let text = std::env::var(VAR).expect("run by its parent, with the handle");
    let home = NumaHome::attach_text(&dev, &text).unwrap();
    assert_eq!(home.len(), 2 * MIB);
    assert_eq!(home.host_ptr(), Some(home.device_addr() as *mut u8));
    let mut got = [0u8; 12];
    home.read(MIB, &mut got).unwrap();
    assert_eq!(&got, b"from creator");
    home.write(0, b"from attacher").unwrap();
    println!("child done");
}

#[test]
fn a_host_numa_home_is_shared_by_descriptor() {
    let dev = UvmBackend::over(hal_mock::MockBackend::cuda())
        .open(0)
        .unwrap();
    let home = NumaHome::create(&dev, 2 * MIB, 0).unwrap();
    assert_eq!(home.host_ptr(), Some(home.device_addr() as *mut u8));
    home.write(MIB, b"from creator").unwrap();
    let ex = home.export(&ExportOptions::default()).unwrap();
    assert_eq!(ex.handle().backend, hal_core::BackendId::CudaUvm);
    child::passes(
        "a_host_numa_home_is_shared_by_descriptor_child",
        "the attaching process",
        &[(VAR, &ex.to_text())],
    );
    let mut got = [0u8; 13];
    home.read(0, &mut got).unwrap();
    assert_eq!(&got, b"from attacher");
}

#[test]
fn over_hal_cuda_a_host_numa_home_is_made_and_reached() {
    // hal-cuda offers host-NUMA VMM where the driver says so (the stand-in does).
    let dev = UvmBackend::with_library(hal_mock_libcuda::built_library())
        .open(0)
        .unwrap();
    let home = NumaHome::create(&dev, 2 * MIB, 0).unwrap();
    assert_eq!(home.len(), 2 * MIB);
    home.write(MIB, b"over hal-cuda").unwrap();
    let mut got = [0u8; 13];
    home.read(MIB, &mut got).unwrap();
    assert_eq!(&got, b"over hal-cuda");
    let ex = home.export(&ExportOptions::default()).unwrap();
    assert_eq!(ex.handle().backend, hal_core::BackendId::CudaUvm);
}

/// The simulator's CUDA-like profile without `missing`.
fn mock_without(missing: hal_core::Capabilities) -> hal_cuda_uvm::UvmDevice<hal_mock::MockDevice> {
    let mut profile = hal_mock::Profile::cuda();
    profile.capabilities = profile.capabilities.difference(missing);
    UvmBackend::over(hal_mock::MockBackend::new(profile))
        .open(0)
        .unwrap()
}

#[test]
fn a_host_numa_home_needs_vmm_and_host_numa_vmm_both() {
    use hal_core::Capabilities as C;
    for missing in [C::VMM, C::HOST_NUMA_VMM] {
        let dev = mock_without(missing);
        let err = NumaHome::create(&dev, 2 * MIB, 0).unwrap_err();
        assert!(
            err.is_unsupported() && err.to_string().contains("HOST_NUMA_VMM"),
            "without {missing:?}: {err}"
        );
    }
}

#[test]
fn a_host_numa_home_is_one_address_and_shows_it() {
    let dev = UvmBackend::over(hal_mock::MockBackend::cuda())
        .open(0)
        .unwrap();
    let home = NumaHome::create(&dev, 2 * MIB, 0).unwrap();
    assert_ne!(home.addr(), 0);
    assert_eq!(home.addr(), home.device_addr());
    assert_eq!(home.location(), hal_core::Location::Host);
    let shown = format!("{home:?}");
    assert!(
        shown.contains(&format!("base: {:#x}", home.addr())) && shown.contains("len: 2097152"),
        "{shown}"
    );
}
