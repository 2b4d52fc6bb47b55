//! A fabric handle the driver refuses (the stand-in answers
//! CUDA_ERROR_NOT_PERMITTED, as driver 580 did without an IMEX daemon)
//! falls back to a POSIX descriptor with one warning per process. The only
//! test of its binary: the warning is logged once per process.

use hal_core::{
    Access, Backend, ExportOptions, Granularity, ImportOptions, Physical, PhysicalDesc,
    Reservation, ShareableHandle,
};
use hal_core::{Vmm, VmmExt};
use hal_cuda::CudaBackend;

mod common;

#[test]
fn a_refused_fabric_handle_falls_back_with_one_warning() {
    hal_tests::warnings::capture();

    let dev = CudaBackend::with_library(hal_mock_libcuda::built_library())
        .open(0)
        .unwrap();
    let g = dev.granularity(Granularity::Minimum).unwrap();
    let fabric = PhysicalDesc::new(g).handle(ShareableHandle::Fabric);
    let first = dev.allocate_physical_with(&fabric).unwrap();
    let second = dev.allocate_physical_with(&fabric).unwrap();
    for p in [&first, &second] {
        assert_eq!(
            p.handle_type(),
            ShareableHandle::PosixFd,
            "the fallback is visible on the allocation"
        );
    }
    let fallbacks = hal_tests::warnings::containing("fabric handle was refused");
    assert_eq!(fallbacks.len(), 1, "one warning per process: {fallbacks:?}");
    assert!(
        fallbacks[0].contains("CUDA_ERROR_NOT_PERMITTED"),
        "the warning names the refusal: {}",
        fallbacks[0]
    );

    // The fallen-back allocation is shared by descriptor as any other.
    let ex = dev
        .export_physical(&first, &ExportOptions::default())
        .unwrap();
    let q = dev
        .import_physical(ex.share().unwrap(), &ImportOptions::default())
        .unwrap();
    let (r1, r2) = (dev.reserve(g, g).unwrap(), dev.reserve(g, g).unwrap());
    dev.map(&r1, 0, &first).unwrap();
    dev.map(&r2, 0, &q).unwrap();
    dev.set_access(&r1, 0, g, Access::ReadWrite).unwrap();
    dev.set_access(&r2, 0, g, Access::ReadWrite).unwrap();
    r1.write(0, b"fabric fell back").unwrap();
    let mut back = [0u8; 16];
    r2.read(0, &mut back).unwrap();
    assert_eq!(&back, b"fabric fell back");
}
