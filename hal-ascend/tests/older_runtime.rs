//! A runtime older than some calls (the stand-in copied without their
//! entry points, loaded in a child): the capabilities that need them are
//! not offered, the calls that need them are unsupported, and the rest
//! works (`hal_tests::cases::older_runtime_keeps_plain_memory`).

use hal_core::DeviceExt;
mod common;

use common::{role, standin, ROLE};
use hal_ascend::AscendBackend;
use hal_core::{Backend, Capabilities, Device};
use hal_mock::older::LibraryCopy;

/// The variable that gives the child the copy's path.
const LIBRARY: &str = "HAL_ASCEND_TEST_OLDER_LIBRARY";

/// One entry point of each group a capability needs: physical memory
/// (VMM), memory keys, IPC events, notify keys.
const HIDDEN: [&str; 4] = [
    "aclrtMallocPhysical",
    "aclrtIpcMemClose",
    "aclrtIpcOpenEventHandle",
    "aclrtNotifyImportByKey",
];

#[test]
fn an_older_runtime_offers_only_what_it_has_with_a_two_mib_granularity() {
    const ME: &str = "an_older_runtime_offers_only_what_it_has_with_a_two_mib_granularity";
    let Some(path) = std::env::var_os(LIBRARY).filter(|_| role().as_deref() == Some(ME)) else {
        let copy = LibraryCopy::without(&standin(), &HIDDEN, &std::env::temp_dir()).unwrap();
        let path = copy.path().to_string_lossy().into_owned();
        let out = common::child(ME, &[(ROLE, ME), (LIBRARY, &path)]);
        return common::assert_ok(&out, ME);
    };
    let d = AscendBackend::with_library(path).open(0).unwrap();
    let info = d.info();
    for lacking in [
        Capabilities::VMM,
        Capabilities::GROWABLE,
        Capabilities::IPC_MEMORY,
        Capabilities::IPC_EVENT,
        Capabilities::IPC_NOTIFY,
    ] {
        assert!(
            !info.capabilities.contains(lacking),
            "{lacking:?} in {info:?}"
        );
    }
    assert_eq!(
        (info.granularity_min, info.granularity_recommended),
        (2 << 20, 2 << 20)
    );
    let lacks = hal_tests::cases::Lacks {
        export: "aclrtIpcMemClose",
        physical: "aclrtMallocPhysical",
        event: "aclrtIpcOpenEventHandle",
    };
    hal_tests::cases::older_runtime_keeps_plain_memory(&d, lacks);
    match d.create_notify() {
        Err(e @ hal_core::Error::Unsupported { .. }) => {
            let e = e.to_string();
            assert!(e.contains("Capabilities::IPC_NOTIFY is absent"), "{e}");
            assert!(e.contains("no entry point aclrtNotifyImportByKey"), "{e}");
        }
        other => panic!("a notify on a runtime without notify keys: {other:?}"),
    }
}
