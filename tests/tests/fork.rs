//! The fork rule on the CPU backend and the simulator: a forked child is
//! refused its parent's objects with `Error::Forked`, drops them without
//! harm (a named region the parent created stays), and works with what it
//! makes itself. One test per backend, each forking from this binary,
//! whose tests take no hal lock while another forks (they run one at a
//! time under a lock of their own).

use std::sync::Mutex;

use hal_core::{Backend, Memory};

/// One fork at a time, and no test's hal work running while one forks.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn cpu_shm_parents_objects_are_refused_in_a_child() {
    let _one = alone();
    hal_tests::fork::parents_objects_are_refused_in_a_child(hal_cpu_shm::CpuShm::new, false, true);
}

#[test]
fn mock_cuda_parents_objects_are_refused_in_a_child() {
    let _one = alone();
    hal_tests::fork::parents_objects_are_refused_in_a_child(
        hal_mock::MockBackend::cuda,
        true,
        true,
    );
}

#[test]
fn mock_ascend_parents_objects_are_refused_in_a_child() {
    let _one = alone();
    hal_tests::fork::parents_objects_are_refused_in_a_child(
        hal_mock::MockBackend::ascend,
        true,
        true,
    );
}

/// A named region the parent created is not unlinked when a child drops
/// its copy of the allocation: the name is the parent's.
#[test]
fn a_child_dropping_the_parents_named_region_leaves_it() {
    let _one = alone();
    let name = format!(
        "hal-fork-test-{}-{}",
        std::process::id(),
        hal_core::kit::os::hex(&hal_core::kit::os::unique_id()[..4])
    );
    let dev = hal_cpu_shm::CpuShm::new().open(0).unwrap();
    let region = dev
        .create_named(&name, 4096, &hal_cpu_shm::NamedOptions::default())
        .unwrap();
    region.write(0, b"kept").unwrap();
    let path = format!("/dev/shm/{name}");
    // SAFETY: this binary's tests hold `alone()` while they fork, so no
    // other test's hal lock is held; the child drops its copy and leaves
    // with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: the child's own copy, dropped once; never used again.
        drop(unsafe { std::ptr::read(&region) });
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{status:#x}"
    );
    assert!(
        std::path::Path::new(&path).exists(),
        "the child unlinked {path}"
    );
    let mut back = [0u8; 4];
    region.read(0, &mut back).unwrap();
    assert_eq!(&back, b"kept");
    drop(region);
    assert!(
        !std::path::Path::new(&path).exists(),
        "the parent's drop unlinks {path}"
    );
}

#[test]
fn cpu_shm_channel_and_group_are_refused_in_a_child() {
    let _one = alone();
    let dev = hal_cpu_shm::CpuShm::new().open(0).expect("open cpu-shm");
    hal_tests::fork::channel_and_group_are_refused_in_a_child(&dev);
}

#[test]
fn forked_child_cannot_release_the_parents_sample() {
    let _one = alone();
    let dev = hal_cpu_shm::CpuShm::new().open(0).expect("open cpu-shm");
    hal_tests::fork::a_forked_child_cannot_release_the_parents_sample(&dev);
}
