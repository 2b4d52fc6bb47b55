//! Work for a device runs with that device current, whatever the calling
//! thread has current, and switches nothing when it is current already;
//! a failing query of the current device is an error, never "no device".
//! Tests that count the stand-in's calls or read its free memory run alone
//! in a child, where nothing else uses the process-wide runtime.

use hal_core::testing::ContextProbe;
mod common;

use common::{backend, role, standin, ROLE};
use hal_core::kit::vendor::acl;
use hal_core::{AllocDesc, Backend, Device, Memory};

const MIB: u64 = 1 << 20;

/// `aclrtSetDevice(id)` on the calling thread, which must succeed.
fn set_device(id: i32) {
    assert_eq!(common::set_device(id), 0, "aclrtSetDevice({id})");
}

/// The free memory of device `id`, asked of the stand-in with `id` current;
/// the thread's current device is `back` afterwards.
fn free_on(id: i32, back: i32) -> usize {
    set_device(id);
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: as above; aclrtGetMemInfo(aclrtMemAttr, size_t*, size_t*)
    // -> aclError, with ACL_HBM_MEM (1) and two valid places.
    let status = unsafe {
        let lib = libloading::Library::new(standin()).unwrap();
        let f = lib
            .get::<unsafe extern "C" fn(i32, *mut usize, *mut usize) -> i32>(b"aclrtGetMemInfo")
            .unwrap();
        f(1, &mut free, &mut total)
    };
    assert_eq!(status, 0, "aclrtGetMemInfo on device {id}");
    set_device(back);
    free
}

#[test]
fn work_runs_on_its_device_and_switches_nothing_when_that_one_is_current() {
    common::alone_in_a_child(
        "work_runs_on_its_device_and_switches_nothing_when_that_one_is_current",
        || {
            let b = backend();
            let (d0, d1) = (b.open(0).unwrap(), b.open(1).unwrap());
            std::thread::spawn(move || {
                // A framework's thread on device 1 allocates for device 0:
                // the memory is device 0's.
                set_device(1);
                let (free0, free1) = (free_on(0, 1), free_on(1, 1));
                let a = d0.allocate(&AllocDesc::device(0, 64 * MIB)).unwrap();
                let used0 = free0 - free_on(0, 1);
                assert!(used0 >= (64 * MIB) as usize, "device 0 gave {used0}");
                assert_eq!(free_on(1, 1), free1, "device 1 gave nothing");
                drop(a);
                // With device 0 current, device 0's work sets no device.
                set_device(0);
                let sets = common::calls("aclrtSetDevice");
                let a = d0.allocate(&AllocDesc::device(0, 4096)).unwrap();
                a.write(0, b"here").unwrap();
                drop(a);
                assert_eq!(common::calls("aclrtSetDevice"), sets, "no switch");
                // Device 1's work switches there and back.
                let a = d1.allocate(&AllocDesc::device(1, 4096)).unwrap();
                assert_eq!(common::calls("aclrtSetDevice"), sets + 2);
                assert_eq!(d1.current_context().unwrap(), Some(1), "device 0 again");
                drop(a);
            })
            .join()
            .unwrap();
        },
    );
}

/// `aclrtGetDevice` failing with anything but `ACL_ERROR_RT_CONTEXT_NULL`
/// (injected, in a child) fails the call that asked, with the runtime's
/// code; it is not taken for a thread without a current device.
#[test]
fn a_failing_current_device_query_fails_the_call() {
    const ME: &str = "get-device-fault";
    if role().as_deref() != Some(ME) {
        let fail = (
            hal_mock_libascendcl::visible::FAIL_VAR,
            "aclrtGetDevice=507899",
        );
        let out = common::child(
            "a_failing_current_device_query_fails_the_call",
            &[(ROLE, ME), fail],
        );
        return common::assert_ok(&out, ME);
    }
    // Opening a device reads its identity with it current: the first call
    // that asks which device is current.
    let b = backend();
    let e = b.open(0).unwrap_err();
    assert!(acl::RT_DRV_INTERNAL_ERROR.matches(&e), "{e}");
    assert!(e.to_string().contains("aclrtGetDevice"), "{e}");
    let d = b.open(0).unwrap();
    assert!(d.allocate(&AllocDesc::device(0, 4096)).is_ok(), "one fault");
}
