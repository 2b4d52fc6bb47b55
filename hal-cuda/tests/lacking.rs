//! The conformance suite on a stand-in device that lacks what some CUDA
//! devices lack: IPC events, host registration (and with it stream-ordered
//! notifies), managed memory and VMM. The device's attributes say so
//! (`HAL_MOCK_LIBCUDA_ATTRIBUTES`) while the stand-in would still do all of
//! it if asked: every case requires `Unsupported` of what the capabilities
//! leave out, so an operation the backend lets through to the driver
//! fails here.

use cudarc::driver::sys::CUdevice_attribute as A;

mod common;

/// Before `main`, while the process has one thread: the stand-in reads its
/// switches once, at its first call, and the cases' child processes
/// inherit the variable.
#[used]
#[link_section = ".init_array"]
static LACKING: extern "C" fn() = lacking;

extern "C" fn lacking() {
    let zero = [
        A::CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED,
        A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED,
        A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
        A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
    ];
    let answers: Vec<String> = zero.iter().map(|&a| format!("{}:0", a as i32)).collect();
    std::env::set_var(hal_mock_libcuda::ATTRIBUTES_VAR, answers.join(","));
}

fn backend() -> hal_cuda::CudaBackend {
    hal_cuda::CudaBackend::with_library(hal_mock_libcuda::built_library())
}

hal_tests::conformance_suite!(cuda_standin_lacking, crate::backend());

#[test]
fn the_device_lacks_what_its_attributes_say() {
    use hal_core::{Backend, Capabilities as C, Device};
    let caps = backend().open(0).unwrap().capabilities();
    for lacked in [
        C::IPC_EVENT,
        C::HOST_REGISTRATION,
        C::STREAM_ORDERED_NOTIFY,
        C::MANAGED_MEMORY,
        C::VMM,
        C::GROWABLE,
    ] {
        assert!(!caps.contains(lacked), "{lacked:?} in {caps:?}");
    }
    assert!(caps.contains(C::IPC_MEMORY), "{caps:?}");
}

#[test]
fn zz_after_suite_no_shm_entries_left() {
    hal_tests::assert_no_shm_left(cuda_standin_lacking::CASES);
}
