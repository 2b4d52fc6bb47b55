//! The conformance suite on a stand-in device that lacks what some CUDA
//! devices lack: IPC events, host registration (and with it stream-ordered
//! notifies), managed memory and VMM. The device's attributes say so
//! (`HAL_MOCK_LIBCUDA_ATTRIBUTES`) while the stand-in would still do all of
//! it if asked: every case requires `Unsupported` of what the capabilities
//! leave out, so an operation the backend lets through to the driver
//! fails here.

use cudarc::driver::sys::CUdevice_attribute as A;
use hal_core::DeviceExt;
use hal_core::VmmExt;

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
    use hal_core::{Backend, Capabilities as C};
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

/// Each refusal names the capability and the attribute the device answers
/// 0: the driver has every entry point, so that is the reason.
#[test]
fn each_refusal_names_the_attribute_the_device_answers_0() {
    use hal_core::{AllocDesc, Backend, Device, EventFlags, NotifyFlags};
    let dev = backend().open(0).unwrap();
    let says = |what: &str, e: hal_core::Error, capability: &str, attribute: &str| {
        let e = e.to_string();
        let said = format!(
            "Capabilities::{capability} is absent: the device answers CU_DEVICE_ATTRIBUTE_{attribute} = 0"
        );
        assert!(e.contains(&said), "{what}: {e}");
        assert!(!e.contains("entry point"), "{what}: {e}");
    };
    let managed = dev.allocate(&AllocDesc::managed(4096)).unwrap_err();
    says(
        "managed memory",
        managed,
        "MANAGED_MEMORY",
        "MANAGED_MEMORY",
    );
    let physical = dev.allocate_physical(2 << 20).unwrap_err();
    says(
        "a physical allocation",
        physical,
        "VMM",
        "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
    );
    let event = dev
        .create_event(EventFlags {
            interprocess: true,
            timing: false,
        })
        .unwrap_err();
    says(
        "an interprocess event",
        event,
        "IPC_EVENT",
        "IPC_EVENT_SUPPORTED",
    );
    let device_only = NotifyFlags { device_only: true };
    let notify = dev.create_notify_with(device_only).unwrap_err();
    says(
        "a device-only notify",
        notify,
        "STREAM_ORDERED_NOTIFY",
        "HOST_REGISTER_SUPPORTED",
    );
    let mut page = vec![0u8; 4096];
    // SAFETY: `page` outlives the call, which is refused before it
    // registers anything.
    let registration = unsafe { dev.register_host(page.as_mut_ptr(), 4096) }.unwrap_err();
    says(
        "a host registration",
        registration,
        "HOST_REGISTRATION",
        "HOST_REGISTER_SUPPORTED",
    );
}

#[test]
fn zz_after_suite_no_shm_entries_left() {
    hal_tests::assert_no_shm_left(cuda_standin_lacking::CASES);
}
