//! The conformance suite on a stand-in whose devices deny what some NPUs
//! deny: peer access (`aclrtDeviceCanAccessPeer` answers 0) and IPC events
//! (an SoC the runtime's list does not name, on which the runtime gives no
//! IPC event handle). The stand-in would still import onto another device
//! or hand out an event handle if the backend did not ask first, so every
//! case requires `Unsupported` of what the capabilities leave out.

use hal_core::DeviceExt;
mod common;

use hal_core::{Vmm, VmmExt};
use hal_mock_libascendcl::switches::{DENY_VAR, SOC_VAR};

/// Before `main`, while the process has one thread: the stand-in reads its
/// switches once, at its first call, and the cases' child processes
/// inherit the variables.
#[used]
#[link_section = ".init_array"]
static LACKING: extern "C" fn() = lacking;

extern "C" fn lacking() {
    std::env::set_var(DENY_VAR, "peer,ipc-event");
    std::env::set_var(SOC_VAR, "Ascend-standin-unlisted");
}

fn backend() -> hal_ascend::AscendBackend {
    common::backend()
}

hal_tests::conformance_suite!(ascend_standin_lacking, crate::backend());

#[test]
fn the_device_lacks_what_the_runtime_denies_and_keeps_the_rest() {
    use hal_core::{Backend, Capabilities as C, Device};
    let d = backend().open(0).unwrap();
    let caps = d.capabilities();
    for lacked in [C::PEER_ACCESS, C::IPC_EVENT] {
        assert!(!caps.contains(lacked), "{lacked:?} in {caps:?}");
    }
    for kept in [C::IPC_MEMORY, C::IPC_NOTIFY, C::VMM, C::PID_ALLOW_LIST] {
        assert!(caps.contains(kept), "{kept:?} not in {caps:?}");
    }
    assert_eq!(d.info().name, "Ascend-standin-unlisted");
    // The SoC is not on the runtime's list: the runtime was asked.
    assert!(common::calls("aclrtIpcGetEventHandle") > 0);
}

#[test]
fn each_refusal_names_the_capability_before_the_runtime_is_asked() {
    use hal_core::{
        AllocDesc, Backend, Device, EventFlags, ExportOptions, Handle, ImportOptions, Importers,
        SharedHandle,
    };
    let b = backend();
    let (d0, d1) = (b.open(0).unwrap(), b.open(1).unwrap());
    let anyone = ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    };
    let text =
        |e: &hal_core::Exported| SharedHandle::from(Handle::from_text(&e.to_text()).unwrap());
    let peer = ImportOptions {
        peer_access: true,
        ..ImportOptions::default()
    };
    let says = |what: &str, e: hal_core::Error, capability: &str| {
        assert!(e.is_unsupported(), "{what}: {e}");
        let e = e.to_string();
        assert!(
            e.contains(&format!("Capabilities::{capability} is absent")),
            "{what}: {e}"
        );
    };
    let a = d0.allocate(&AllocDesc::device(0, 2 << 20)).unwrap();
    let ex = d0.export_memory(&a, &anyone).unwrap();
    let refused = d1.import_memory(text(&ex), &peer).unwrap_err();
    says("memory onto another device", refused, "PEER_ACCESS");
    let n = d0.create_notify().unwrap();
    let nx = d0.export_notify(&n, &anyone).unwrap();
    let refused = d1.import_notify(text(&nx), &peer).unwrap_err();
    says("a notify onto another device", refused, "PEER_ACCESS");
    let p = d0.allocate_physical(2 << 20).unwrap();
    let px = d0.export_physical(&p, &anyone).unwrap();
    let refused = d1
        .import_physical(text(&px), &ImportOptions::default())
        .unwrap_err();
    says(
        "physical memory onto another device",
        refused,
        "PEER_ACCESS",
    );
    assert!(refused_text_names_the_runtime_answer(&d1, &px));
    let ipc = EventFlags {
        interprocess: true,
        timing: false,
    };
    says(
        "an IPC event",
        d0.create_event(ipc).unwrap_err(),
        "IPC_EVENT",
    );
    // What the device keeps still works on one device.
    let m = d0
        .import_memory(text(&ex), &ImportOptions::default())
        .unwrap();
    drop(m);
}

/// The physical import's refusal says what the runtime answered.
fn refused_text_names_the_runtime_answer(
    d: &hal_ascend::AscendDevice,
    px: &hal_core::Exported,
) -> bool {
    use hal_core::{Handle, ImportOptions, SharedHandle};
    let shared = SharedHandle::from(Handle::from_text(&px.to_text()).unwrap());
    let e = d
        .import_physical(shared, &ImportOptions::default())
        .unwrap_err()
        .to_string();
    e.contains("aclrtDeviceCanAccessPeer")
}

#[test]
fn zz_after_suite_no_shm_entries_left() {
    hal_tests::assert_no_shm_left(ascend_standin_lacking::CASES);
}
