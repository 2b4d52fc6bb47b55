//! What sits at a region's metadata path and cannot be opened to be judged
//! (a symbolic link, a socket) is removed by a creator of that name only
//! while the name still leads to the entry it saw, under the lock of
//! `/dev/shm`, through a close-on-exec descriptor. This file holds one test: it watches this process's own
//! descriptors, which other tests in the same process would disturb.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use common::*;
use hal_core::Error;
use hal_cpu_shm::named::{META_PREFIX, SHM_DIR};
use hal_cpu_shm::{create_named, NamedOptions};

fn meta_file(name: &str) -> String {
    format!("{SHM_DIR}/{META_PREFIX}{name}")
}

/// Removes what the test put in `/dev/shm` whatever happens to it.
struct Sweep(Vec<String>);

impl Drop for Sweep {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// True while a descriptor of this process other than `mine` is open on the
/// directory `SHM_DIR` itself (not on a file in it).
fn another_descriptor_on_the_directory(mine: i32) -> bool {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return false;
    };
    fds.flatten().any(|e| {
        let n: i32 = e
            .file_name()
            .to_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(-1);
        n != mine && std::fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == SHM_DIR)
    })
}

#[test]
fn junk_is_removed_only_while_the_name_leads_to_the_entry_seen() {
    let name = unique("junk-swap");
    let live = unique("junk-live");
    let swap = format!("{SHM_DIR}/{name}-swap");
    let _sweep = Sweep(vec![meta_file(&name), swap.clone()]);
    // Metadata of a live creator (this process), to put at the name's
    // metadata path while its creator waits: a name that is taken.
    let keeper = create_named(&live, 4096, &NamedOptions::default()).unwrap();
    std::fs::write(&swap, std::fs::read(meta_file(&live)).unwrap()).unwrap();
    // A dangling link where the name's metadata would be: junk.
    std::os::unix::fs::symlink(format!("/nonexistent/{name}"), meta_file(&name)).unwrap();

    // Hold the directory's lock, so that the creator stops, having seen the
    // link, where it takes the lock.
    let dir = std::fs::File::open(SHM_DIR).unwrap();
    // SAFETY: flock(2) on a descriptor this test owns; it touches no memory.
    assert_eq!(unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) }, 0);
    let creator = {
        let name = name.clone();
        std::thread::spawn(move || create_named(&name, 4096, &NamedOptions::default()))
    };
    // The creator opens the directory only after it has looked at the link.
    while !creator.is_finished() && !another_descriptor_on_the_directory(dir.as_raw_fd()) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // A program started meanwhile inherits none of the creator's
    // descriptors on the directory (they are close-on-exec).
    let mut child = std::process::Command::new("cat")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let inherited: Vec<_> = std::fs::read_dir(format!("/proc/{}/fd", child.id()))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|t| t.as_os_str() == SHM_DIR)
        .collect();
    drop(child.stdin.take());
    child.wait().unwrap();
    assert!(inherited.is_empty(), "{inherited:?}");
    // The name passes to other metadata (a live creator's) before the
    // creator gets the lock: what it saw is gone, and what is there now is
    // not junk.
    std::fs::rename(&swap, meta_file(&name)).unwrap();
    let ino = std::fs::symlink_metadata(meta_file(&name)).unwrap().ino();
    drop(dir);

    let r = creator.join().unwrap();
    assert!(
        matches!(r, Err(Error::AlreadyExists { .. })),
        "the metadata put in place of the link was removed: {:?}",
        r.map(|_| ())
    );
    let now = std::fs::symlink_metadata(meta_file(&name)).unwrap();
    assert!(now.file_type().is_file());
    assert_eq!(now.ino(), ino, "the metadata is the one put there");

    std::fs::remove_file(meta_file(&name)).unwrap();
    drop(keeper);
    assert!(shm_entries(&name).is_empty(), "{:?}", shm_entries(&name));
    assert!(shm_entries(&live).is_empty(), "{:?}", shm_entries(&live));
}
