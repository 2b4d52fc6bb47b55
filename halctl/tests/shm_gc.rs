//! `halctl shm gc` says what it removed and nothing more: a region with its
//! metadata, or stale metadata alone (the object under that name, another
//! user's, left untouched); and a name it was asked to remove that does not
//! exist is an error, not "nothing to remove".
//!
//! The objects of other users need root (chown); CI runs as root with
//! `HAL_TESTS_STRICT=1`, where a test that cannot run fails.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");
/// The victim: a user whose object sits under the name.
const VICTIM: u32 = 65534;
/// The planter: a user who writes metadata beside it.
const PLANTER: u32 = 65533;

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(tag: &str) -> String {
    format!(
        "halctl-gc-{}-{}-{tag}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn shm_path(name: &str) -> String {
    format!("/dev/shm/{name}")
}

fn meta_path(name: &str) -> String {
    format!("/dev/shm/.hal-meta.{name}")
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Removes a name's object and metadata when dropped, whatever happened.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(shm_path(&self.0));
        let _ = std::fs::remove_file(meta_path(&self.0));
    }
}

/// An object `/dev/shm/NAME` with `bytes`, owned by `uid`, mode 0600; its
/// (inode, device).
fn object(name: &str, bytes: &[u8], uid: u32) -> (u64, u64) {
    let path = shm_path(name);
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
    let m = std::fs::metadata(&path).unwrap();
    (m.ino(), m.dev())
}

/// The library's metadata for region `name`, recording `uid` as its owner,
/// a creator that is gone (pid 0), and the object (inode, device); the file
/// is owned by `uid`, as its creator would have written it.
fn metadata(name: &str, uid: u32, (ino, dev): (u64, u64)) {
    let mut b = [0u8; 128];
    b[0..8].copy_from_slice(b"HALSHMD1");
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    b[12..16].copy_from_slice(&uid.to_le_bytes());
    b[16..20].copy_from_slice(&0u32.to_le_bytes()); // pid: none
    b[24..32].copy_from_slice(&0u64.to_le_bytes()); // start
    b[32..40].copy_from_slice(&4096u64.to_le_bytes()); // size
    b[40..48].copy_from_slice(&0u64.to_le_bytes()); // created: unknown
    b[48..56].copy_from_slice(&ino.to_le_bytes());
    b[56..64].copy_from_slice(&dev.to_le_bytes());
    b[64..72].copy_from_slice(&0u64.to_le_bytes()); // this pid namespace
    b[72..80].copy_from_slice(&hal::cpu_shm::named::region_id(name).to_le_bytes());
    let path = meta_path(name);
    std::fs::write(&path, b).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&path, Some(uid), Some(uid)).unwrap();
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn halctl(args: &[&str]) -> Out {
    let out = Command::new(BIN).args(args).output().expect("run halctl");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn gc_reports_only_what_it_removed() {
    if !is_root() {
        hal::testing::not_run("objects of other users need root here (chown)");
        return;
    }
    // Another user's object, and metadata a third user planted beside it
    // describing an object of its own that is not there.
    let planted = unique("planted");
    let _c1 = Cleanup(planted.clone());
    let victim_bytes = b"the victim's bytes".repeat(100);
    object(&planted, &victim_bytes, VICTIM);
    metadata(&planted, PLANTER, (1, 1));
    // A real region of a dead creator of that third user, with its metadata.
    let real = unique("real");
    let _c2 = Cleanup(real.clone());
    let ids = object(&real, &[7u8; 4096], PLANTER);
    metadata(&real, PLANTER, ids);

    // The dry run already tells the two apart.
    let out = halctl(&["shm", "gc", "--dry-run", "--json", &planted, &real]);
    assert_eq!(out.code, 0, "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let removes = |v: &Value, n: &str| {
        v["removed"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == n)
            .map(|r| r["removes"].as_str().unwrap().to_string())
    };
    assert_eq!(
        removes(&v, &planted).as_deref(),
        Some("stale-metadata"),
        "{v}"
    );
    assert_eq!(removes(&v, &real).as_deref(), Some("region"), "{v}");
    assert!(
        Path::new(&meta_path(&planted)).exists(),
        "a dry run removes nothing"
    );

    let out = halctl(&["shm", "gc", &planted, &real]);
    assert_eq!(out.code, 0, "{out:?}");
    let planted_line = out
        .stdout
        .lines()
        .find(|l| l.contains(&planted))
        .unwrap_or_else(|| panic!("{planted} not reported: {out:?}"));
    assert!(
        planted_line.starts_with(&format!("removed stale metadata {}", meta_path(&planted))),
        "{out:?}"
    );
    assert!(planted_line.contains("no region removed"), "{out:?}");
    assert!(planted_line.contains("owner is unknown"), "{out:?}");
    assert!(
        !out.stdout
            .contains(&format!("removed region {}", shm_path(&planted))),
        "it claims to have removed the victim's object: {out:?}"
    );
    assert!(
        out.stdout.contains(&format!(
            "removed region {} and its metadata",
            shm_path(&real)
        )),
        "{out:?}"
    );
    // What it said is what happened: the victim's object is whole and still
    // the victim's; the planted metadata and the dead region are gone.
    let m = std::fs::metadata(shm_path(&planted)).expect("the victim's object stays");
    assert_eq!(m.uid(), VICTIM);
    assert_eq!(std::fs::read(shm_path(&planted)).unwrap(), victim_bytes);
    assert!(!Path::new(&meta_path(&planted)).exists());
    assert!(!Path::new(&shm_path(&real)).exists());
    assert!(!Path::new(&meta_path(&real)).exists());
}

#[test]
fn gc_of_a_name_that_does_not_exist_fails() {
    let name = unique("missing");
    let out = halctl(&["shm", "gc", &name]);
    assert_eq!(out.code, 1, "{out:?}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{out:?}");
    assert!(lines[0].starts_with("halctl: error: "), "{out:?}");
    assert!(lines[0].contains(&name), "{out:?}");
    assert!(lines[0].contains("no such region"), "{out:?}");
    assert!(!out.stdout.contains("nothing to remove"), "{out:?}");
    // The same with a dry run, and in JSON.
    let out = halctl(&["shm", "gc", "--dry-run", "--json", &name]);
    assert_eq!(out.code, 1, "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["removed"].as_array().map(Vec::len), Some(0), "{v}");
}
