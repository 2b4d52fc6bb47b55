//! The names that crashed processes leave: a channel's whose publisher was
//! killed, a group's whose members were, are removed by
//! `channel::collect_garbage` and `group::collect_garbage` (what `halctl
//! shm gc` runs); a live publisher's name is kept. Each run is restricted
//! to this test's own names (`collect_garbage_prefix`), so that tests
//! running beside it keep theirs. Run as root, the collection takes every
//! user's dead names, each removed as its owner, and leaves a file one user
//! plants under another's name.

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
        // Copy file SRC to DST (`ARG` is "SRC DST"), a new file of mode
        // 0600 of this process's user, and say so.
        "planter" => {
            use std::io::Write as _;
            use std::os::unix::fs::OpenOptionsExt as _;
            let (src, dst) = name.split_once(' ').expect("SRC DST");
            let bytes = std::fs::read(src).expect("the file to copy");
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(dst)
                .expect("the planted file")
                .write_all(&bytes)
                .expect("its bytes");
            say("planted");
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

/// The uid of another user: `nobody`.
const NOBODY: u32 = 65534;

/// The path of `kind`'s name `name` of user `uid`.
fn path_of(kind: &str, uid: u32, name: &str) -> PathBuf {
    hal_core::kit::os::private_path_of(kind, uid, name).unwrap()
}

/// The entries of `/dev/shm` whose name contains `tag`.
fn shm_entries(tag: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.contains(tag))
        .collect()
}

#[test]
fn root_collects_other_users_dead_names_as_their_owner_and_spares_planted_files() {
    use std::os::unix::fs::MetadataExt as _;
    use std::os::unix::process::CommandExt as _;

    if !nix::unistd::geteuid().is_root() {
        hal_core::testing::not_run(
            "collecting another user's names, and processes of another uid, need root here",
        );
        return;
    }
    let prefix = unique("gc-root");
    let dead = format!("{prefix}-dead");
    let live = format!("{prefix}-live");
    let planted = format!("{prefix}-planted");
    let _sweep = Sweep(vec![
        path_of("channel", NOBODY, &dead),
        path_of("group", NOBODY, &dead),
        path_of("channel", NOBODY, &live),
        path_of("group", NOBODY, &live),
        path_of("channel", 0, &planted),
        path_of("group", 0, &planted),
    ]);
    let as_nobody = |c: &mut std::process::Command| {
        c.uid(NOBODY).gid(NOBODY);
    };
    // Another user's publisher and group member, killed.
    let mut kid = Kid::start((ROLE, "holder"), (ARG, &dead), as_nobody);
    assert_eq!(kid.result(), "ready");
    let pid = kid.id();
    drop(kid);
    for kind in ["channel", "group"] {
        let meta = std::fs::symlink_metadata(path_of(kind, NOBODY, &dead)).unwrap();
        assert_eq!(meta.uid(), NOBODY, "the {kind} name is that user's");
    }
    // That user plants copies of the dead names under root's names: a
    // dead publisher's record, a group of dead members, in files it owns.
    for kind in ["channel", "group"] {
        let copy = format!(
            "{} {}",
            path_of(kind, NOBODY, &dead).display(),
            path_of(kind, 0, &planted).display()
        );
        let mut planter = Kid::start((ROLE, "planter"), (ARG, &copy), as_nobody);
        assert_eq!(planter.result(), "planted");
        planter.finish();
        let meta = std::fs::symlink_metadata(path_of(kind, 0, &planted)).unwrap();
        assert_eq!(meta.uid(), NOBODY);
    }
    // That user's live publisher and group member.
    let mut holder = Kid::start((ROLE, "holder"), (ARG, &live), as_nobody);
    assert_eq!(holder.result(), "ready");

    // A dry run says what would go, and removes nothing.
    let would = channel::collect_garbage_prefix(&prefix, true).unwrap();
    assert_eq!(would.len(), 1, "{would:?}");
    assert!(path_of("channel", NOBODY, &dead).exists());

    let channels = channel::collect_garbage_prefix(&prefix, false).unwrap();
    assert_eq!(channels.len(), 1, "only the dead channel: {channels:?}");
    assert_eq!(channels[0].name, dead);
    assert_eq!(channels[0].uid, NOBODY);
    assert_eq!(channels[0].publisher, pid);
    assert_eq!(channels[0].path, path_of("channel", NOBODY, &dead));
    let groups = group::collect_garbage_prefix(&prefix, false).unwrap();
    assert_eq!(groups.len(), 1, "only the dead group: {groups:?}");
    assert_eq!(groups[0].name, dead);
    assert_eq!(groups[0].uid, NOBODY);
    assert_eq!(groups[0].members, vec![pid]);
    for kind in ["channel", "group"] {
        assert!(
            !path_of(kind, NOBODY, &dead).exists(),
            "the dead {kind}'s name removed"
        );
        assert!(
            path_of(kind, NOBODY, &live).exists(),
            "the live {kind}'s name kept"
        );
        assert!(
            path_of(kind, 0, &planted).exists(),
            "the {kind} file planted under root's name is neither root's nor removed"
        );
    }

    // Once killed, the live one's names go too; the planted files stay.
    drop(holder);
    let channels = channel::collect_garbage_prefix(&prefix, false).unwrap();
    assert_eq!(channels.len(), 1, "{channels:?}");
    assert_eq!(
        (channels[0].name.as_str(), channels[0].uid),
        (live.as_str(), NOBODY)
    );
    let groups = group::collect_garbage_prefix(&prefix, false).unwrap();
    assert_eq!(groups.len(), 1, "{groups:?}");
    let mut left = shm_entries(&prefix);
    left.sort();
    assert_eq!(
        left,
        vec![
            format!(".hal-channel.0.{planted}"),
            format!(".hal-group.0.{planted}"),
        ]
    );
    drop(_sweep);
    assert!(
        shm_entries(&prefix).is_empty(),
        "{:?}",
        shm_entries(&prefix)
    );
}
