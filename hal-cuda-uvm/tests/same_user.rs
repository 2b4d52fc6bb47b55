//! `Importers::SameUser` on hal-cuda-uvm: managed memory travels as
//! descriptors through the exporter's broker, which checks each
//! importer's uid, so an export to "any process of this user" is taken
//! and marked so on the handle; the device memory of the GPU beneath
//! (legacy CUDA IPC) is refused as Unsupported.

use hal_core::{AllocDesc, Backend, Device, ExportOptions, HandleFlags, Importers};

#[test]
fn managed_memory_exports_to_this_users_processes() {
    check(hal_cuda_uvm::UvmBackend::with_library(
        hal_mock_libcuda::built_library(),
    ));
    check(hal_cuda_uvm::UvmBackend::over(hal_mock::MockBackend::cuda()));
}

fn check<B: Backend>(backend: B) {
    {
        let dev = backend.open(0).unwrap();
        let opts = ExportOptions {
            importers: Importers::SameUser,
            ..Default::default()
        };
        let mem = dev.allocate(&AllocDesc::managed(2 << 20)).unwrap();
        let ex = dev.export_memory(&mem, &opts).unwrap();
        assert!(ex.handle().flags.contains(HandleFlags::SAME_USER));
        assert!(!ex.handle().flags.contains(HandleFlags::ANY_IMPORTER));
        assert!(ex.handle().allowed_pids.is_empty());
    }
}
