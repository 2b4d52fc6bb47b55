//! A runtime older than some calls (the stand-in copied without their
//! entry points, loaded in a child): the capabilities that need them are
//! not offered, the calls that need them are unsupported, and the rest
//! works.

mod common;

use common::{role, standin, ROLE};
use hal_ascend::AscendBackend;
use hal_core::{AllocDesc, Backend, Capabilities, Device, Error, Memory};
use hal_mock::older::LibraryCopy;

/// The variable that gives the child the copy's path.
const LIBRARY: &str = "HAL_ASCEND_TEST_OLDER_LIBRARY";

#[test]
fn a_runtime_without_vmm_offers_none_and_keeps_a_two_mib_granularity() {
    const ME: &str = "a_runtime_without_vmm_offers_none_and_keeps_a_two_mib_granularity";
    let Some(path) = std::env::var_os(LIBRARY).filter(|_| role().as_deref() == Some(ME)) else {
        let copy =
            LibraryCopy::without(&standin(), &["aclrtMallocPhysical"], &std::env::temp_dir())
                .unwrap();
        let path = copy.path().to_string_lossy().into_owned();
        let out = common::child(ME, &[(ROLE, ME), (LIBRARY, &path)]);
        return common::assert_ok(&out, ME);
    };
    let d = AscendBackend::with_library(path).open(0).unwrap();
    let info = d.info();
    assert!(!info.capabilities.contains(Capabilities::VMM), "{info:?}");
    assert!(!info.capabilities.contains(Capabilities::GROWABLE));
    assert!(
        info.capabilities.contains(Capabilities::IPC_MEMORY),
        "the rest stays"
    );
    assert_eq!(
        (info.granularity_min, info.granularity_recommended),
        (2 << 20, 2 << 20)
    );
    match d.allocate_physical(2 << 20) {
        Err(e @ Error::Unsupported { .. }) => {
            assert!(e.to_string().contains("Capabilities::VMM"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    let a = d.allocate(&AllocDesc::device(0, 4096)).unwrap();
    a.write(0, b"older").unwrap();
    let mut b = [0u8; 5];
    a.read(0, &mut b).unwrap();
    assert_eq!(&b, b"older");
}
