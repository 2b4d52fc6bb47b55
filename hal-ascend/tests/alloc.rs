//! `aclrtMalloc` takes no alignment: an aligned request is served by one
//! call when the runtime's address is aligned already, and padded only
//! when it is not (counted in a child process of its own, where nothing
//! else allocates).

mod common;

use common::{assert_ok, backend, calls, child, role, ROLE};
use hal_core::{AllocDesc, Backend, Device, Memory};

/// In the child: an aligned address costs one `aclrtMalloc`; a misaligned
/// one is given back and padded.
fn counted() {
    let d = backend().open(0).unwrap();
    let (malloc, free) = (calls("aclrtMalloc"), calls("aclrtFree"));
    let page = AllocDesc {
        align: 4096,
        ..AllocDesc::device(0, 1 << 20)
    };
    let a = d.allocate(&page).unwrap();
    assert_eq!(a.addr() % 4096, 0);
    assert_eq!(
        (calls("aclrtMalloc"), calls("aclrtFree")),
        (malloc + 1, free),
        "the runtime's address was aligned: one call, nothing given back"
    );
    // Past anything the runtime aligns to: given back and padded.
    let huge = AllocDesc {
        align: 1 << 30,
        ..AllocDesc::device(0, 4096)
    };
    let b = d.allocate(&huge).unwrap();
    assert_eq!(b.addr() % (1 << 30), 0);
    assert_eq!(
        (calls("aclrtMalloc"), calls("aclrtFree")),
        (malloc + 3, free + 1),
        "a misaligned address: given back, then padded"
    );
    drop((a, b));
    println!("@counted ok");
}

#[test]
fn an_aligned_address_costs_one_malloc_and_a_misaligned_one_is_padded() {
    const TEST: &str = "an_aligned_address_costs_one_malloc_and_a_misaligned_one_is_padded";
    if role().as_deref() == Some("counted") {
        return counted();
    }
    let out = child(TEST, &[(ROLE, "counted")]);
    assert_ok(&out, "the counting child");
    assert!(String::from_utf8_lossy(&out.stdout).contains("@counted ok"));
}
