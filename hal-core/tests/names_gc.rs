//! The names that crashed processes leave: a channel's whose publisher was
//! killed, a group's whose members were, are removed by
//! `channel::collect_garbage` and `group::collect_garbage` (what `halctl
//! shm gc` runs); a live publisher's name is kept. Each run is restricted
//! to this test's own names (`collect_garbage_prefix`), so that tests
//! running beside it keep theirs.

mod common;

use std::path::PathBuf;

use common::{read_line, say, Kid};
use hal_core::channel::{self, ChannelOptions, Publisher};
use hal_core::group::{self, Group, GroupOptions};
use hal_core::Backend as _;

const ROLE: &str = "HAL_NAMES_GC_TEST_ROLE";
const ARG: &str = "HAL_NAMES_GC_TEST_ARG";

fn unique(tag: &str) -> String {
    format!(
        "test-{tag}-{}-{:x}",
        std::process::id(),
        u64::from_le_bytes(hal_core::kit::os::random_id()[..8].try_into().unwrap())
    )
}

fn device() -> hal_cpu_shm::CpuDevice {
    hal_cpu_shm::CpuShm::new()
        .open(0)
        .expect("the cpu-shm host device")
}

fn path(kind: &str, name: &str) -> PathBuf {
    hal_core::kit::os::private_path(kind, name).unwrap()
}

/// Removes this test's names, whatever happened.
struct Sweep(Vec<PathBuf>);

impl Drop for Sweep {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
#[ignore = "child entry point: run by its parent"]
fn child_process() {
    let role = std::env::var(ROLE)
        .expect("a child entry point: its parent sets the role (run the other tests of this file)");
    let name = std::env::var(ARG).expect("a name");
    match role.as_str() {
        // Publish channel NAME and be the one member of group NAME, say
        // so, and wait to be killed.
        "holder" => {
            let _p = Publisher::create(
                &device(),
                &name,
                &ChannelOptions::default().slots(2).slot_size(64),
            )
            .expect("a publisher");
            let _g = Group::join(&name, 1, &GroupOptions::default()).expect("a join");
            say("ready");
            read_line();
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        other => panic!("unknown child role {other}"),
    }
}

#[test]
fn names_of_killed_members_are_collected_and_a_live_publishers_kept() {
    let prefix = unique("gc");
    let dead = format!("{prefix}-dead");
    let live = format!("{prefix}-live");
    let _sweep = Sweep(vec![
        path("channel", &dead),
        path("group", &dead),
        path("channel", &live),
    ]);
    let mut kid = Kid::start((ROLE, "holder"), (ARG, &dead), |_| {});
    assert_eq!(kid.result(), "ready");
    let pid = kid.id();
    drop(kid); // SIGKILL and reap: nothing is closed or left.
    assert!(
        path("channel", &dead).exists(),
        "a killed publisher leaves its name"
    );
    assert!(
        path("group", &dead).exists(),
        "a killed member leaves its name"
    );
    let publisher = Publisher::create(
        &device(),
        &live,
        &ChannelOptions::default().slots(2).slot_size(64),
    )
    .expect("a live publisher");

    // A dry run says what would go, and removes nothing.
    let would = channel::collect_garbage_prefix(&prefix, true).unwrap();
    assert_eq!(would.len(), 1, "{would:?}");
    assert!(path("channel", &dead).exists());
    assert_eq!(
        group::collect_garbage_prefix(&prefix, true).unwrap().len(),
        1
    );
    assert!(path("group", &dead).exists());

    let channels = channel::collect_garbage_prefix(&prefix, false).unwrap();
    assert_eq!(channels.len(), 1, "only the dead channel: {channels:?}");
    assert_eq!(channels[0].name, dead);
    assert_eq!(channels[0].publisher, pid);
    assert_eq!(channels[0].path, path("channel", &dead));
    assert!(
        !path("channel", &dead).exists(),
        "the dead channel's name removed"
    );
    assert!(
        path("channel", &live).exists(),
        "the live publisher's name kept"
    );

    let groups = group::collect_garbage_prefix(&prefix, false).unwrap();
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0].name, dead);
    assert_eq!(groups[0].members, vec![pid]);
    assert!(
        !path("group", &dead).exists(),
        "the dead group's name removed"
    );

    // Nothing more to collect; the live channel still works and closes.
    assert!(channel::collect_garbage_prefix(&prefix, false)
        .unwrap()
        .is_empty());
    drop(publisher);
    assert!(!path("channel", &live).exists());
}
