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
            if std::fs::remove_file(p).is_err() {
                let _ = std::fs::remove_dir(p);
            }
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
        // 0600 of this process's user in a directory made (mode 0700) where
        // there is none, and say "planted", or how it was refused.
        "planter" => {
            use std::io::Write as _;
            use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
            let (src, dst) = name.split_once(' ').expect("SRC DST");
            let bytes = std::fs::read(src).expect("the file to copy");
            let dir = std::path::Path::new(dst).parent().expect("a directory");
            let _ = std::fs::DirBuilder::new().mode(0o700).create(dir);
            let planted = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(dst)
                .and_then(|mut f| f.write_all(&bytes));
            match planted {
                Ok(()) => say("planted"),
                Err(e) => say(format!("refused: {e}")),
            }
        }
        // Publish channel NAME, subscribe to it and record that the
        // subscriber forwards to another host; say so, and wait to be killed.
        "noter" => {
            let dev = device();
            let _p = Publisher::create(
                &dev,
                &name,
                &ChannelOptions::default().slots(2).slot_size(64),
            )
            .expect("a publisher");
            let sub = channel::Subscriber::open(&dev, &name, &channel::SubscribeOptions::default())
                .expect("a subscriber");
            let _note = channel::RemoteNote::record(&sub, "192.0.2.9:4000").expect("a note");
            say("ready");
            read_line();
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        // Say which users' directories this process may look into.
        "dirs" => {
            let dirs = hal_core::kit::os::user_dirs().expect("the users' directories");
            let uids: Vec<String> = dirs.iter().map(|(uid, _)| uid.to_string()).collect();
            say(uids.join(","));
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

/// The entries of `/dev/shm` and of its users' directories (as
/// `.hal-UID/NAME`) whose name contains `tag`.
fn shm_entries(tag: &str) -> Vec<String> {
    let mut out = Vec::new();
    for top in std::fs::read_dir("/dev/shm").unwrap().flatten() {
        let top = top.file_name().to_string_lossy().into_owned();
        if top.starts_with(".hal-") {
            if let Ok(inner) = std::fs::read_dir(format!("/dev/shm/{top}")) {
                out.extend(
                    inner
                        .flatten()
                        .map(|e| format!("{top}/{}", e.file_name().to_string_lossy())),
                );
            }
        }
        out.push(top);
    }
    out.retain(|n| n.contains(tag));
    out
}

/// A uid that no directory of `/dev/shm` names: one of nobody's.
fn unused_uid() -> u32 {
    let base = 3_200_000_000 + (std::process::id() % 100_000) * 1000;
    (base..base + 1000)
        .find(|uid| !hal_core::kit::os::user_dir(*uid).exists())
        .expect("an unused uid")
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
    let other = unused_uid();
    let _sweep = Sweep(vec![
        path_of("channel", NOBODY, &dead),
        path_of("group", NOBODY, &dead),
        path_of("channel", NOBODY, &live),
        path_of("group", NOBODY, &live),
        path_of("channel", 0, &planted),
        path_of("group", 0, &planted),
        path_of("channel", other, &planted),
        path_of("group", other, &planted),
        hal_core::kit::os::user_dir(other),
    ]);
    hal_core::kit::os::make_user_dir().expect("root's directory");
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
    // That user tries to plant copies of the dead names (a dead
    // publisher's record, a group of dead members) under root's names:
    // root's directory lets nobody else in. It plants them in a directory
    // it makes for another uid instead, in files it owns.
    for kind in ["channel", "group"] {
        for (uid, answer) in [(0, "refused"), (other, "planted")] {
            let copy = format!(
                "{} {}",
                path_of(kind, NOBODY, &dead).display(),
                path_of(kind, uid, &planted).display()
            );
            let mut planter = Kid::start((ROLE, "planter"), (ARG, &copy), as_nobody);
            let said = planter.result();
            assert!(said.starts_with(answer), "{kind} under uid {uid}: {said}");
            planter.finish();
        }
        assert!(!path_of(kind, 0, &planted).exists());
        let meta = std::fs::symlink_metadata(path_of(kind, other, &planted)).unwrap();
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
            path_of(kind, other, &planted).exists(),
            "the {kind} file planted in a directory of uid {other} is neither that uid's nor \
             removed"
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
            format!(".hal-{other}/channel.{planted}"),
            format!(".hal-{other}/group.{planted}"),
        ]
    );
    drop(_sweep);
    assert!(
        shm_entries(&prefix).is_empty(),
        "{:?}",
        shm_entries(&prefix)
    );
}

/// A user other than root looks into its own directory of names only,
/// though root's (and others') are there: a real process of uid 65534.
#[test]
fn a_user_other_than_root_collects_in_its_own_directory_only() {
    use std::os::unix::process::CommandExt as _;
    if !nix::unistd::geteuid().is_root() {
        hal_core::testing::not_run("a process of another uid needs root to start");
        return;
    }
    hal_core::kit::os::make_user_dir().expect("root's directory");
    let as_nobody = |c: &mut std::process::Command| {
        c.uid(NOBODY).gid(NOBODY);
    };
    // Its own directory, made by a holder of its own.
    let name = unique("dirs");
    let _sweep = Sweep(vec![
        path_of("channel", NOBODY, &name),
        path_of("group", NOBODY, &name),
    ]);
    let mut holder = Kid::start((ROLE, "holder"), (ARG, &name), as_nobody);
    assert_eq!(holder.result(), "ready");
    let mut kid = Kid::start((ROLE, "dirs"), (ARG, ""), as_nobody);
    assert_eq!(kid.result(), NOBODY.to_string());
    kid.finish();
    let all = hal_core::kit::os::user_dirs().unwrap();
    assert!(
        all.iter().any(|(uid, _)| *uid == 0),
        "root sees its own: {all:?}"
    );
    assert!(
        all.iter().any(|(uid, _)| *uid == NOBODY),
        "and nobody's: {all:?}"
    );
    drop(holder);
}

/// An offering process killed while it forwards to a remote subscriber
/// leaves its note of remote subscribers (`remote.NAME`) beside the
/// channel's name; the collection removes both.
#[test]
fn a_killed_offerers_note_of_remote_subscribers_is_collected() {
    let name = unique("gc-note");
    let _sweep = Sweep(vec![path("channel", &name), path("remote", &name)]);
    let mut kid = Kid::start((ROLE, "noter"), (ARG, &name), |_| {});
    assert_eq!(kid.result(), "ready");
    drop(kid);
    assert!(
        path("remote", &name).exists(),
        "a killed process leaves its note"
    );
    assert_eq!(
        channel::collect_garbage_prefix(&name, true).unwrap().len(),
        1
    );
    assert!(path("remote", &name).exists(), "a dry run removes nothing");
    let dead = channel::collect_garbage_prefix(&name, false).unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(!path("channel", &name).exists());
    assert!(
        !path("remote", &name).exists(),
        "the note went with the name"
    );
}
