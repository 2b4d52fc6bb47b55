//! `halctl shm ls` on metadata planted with known contents: the creation
//! time as seconds (JSON) and as a UTC date (text), across leap days,
//! century and 400-year boundaries, and the state column.
//!
//! The planted metadata names another pid namespace, so its owner counts as
//! alive and no cleanup (here or in a concurrent test) collects it.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn unique(tag: &str) -> String {
    format!(
        "halctl-ls-{}-{}-{tag}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn meta_path(name: &str) -> String {
    format!("/dev/shm/.hal-meta.{name}")
}

/// Metadata of region `name` (which does not exist) created at `created`
/// seconds after the epoch, removed when dropped.
struct Planted(String);

impl Planted {
    fn new(name: &str, created: u64) -> Planted {
        Planted::with_pid(name, created, 1)
    }

    fn with_pid(name: &str, created: u64, pid: u32) -> Planted {
        // SAFETY: geteuid(2) has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let mut b = [0u8; 128];
        b[0..8].copy_from_slice(b"HALSHMD1");
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        b[12..16].copy_from_slice(&uid.to_le_bytes());
        b[16..20].copy_from_slice(&pid.to_le_bytes());
        b[24..32].copy_from_slice(&1u64.to_le_bytes()); // start
        b[32..40].copy_from_slice(&8192u64.to_le_bytes()); // size
        b[40..48].copy_from_slice(&created.to_le_bytes());
        b[48..56].copy_from_slice(&1u64.to_le_bytes()); // ino
        b[56..64].copy_from_slice(&1u64.to_le_bytes()); // dev
        b[64..72].copy_from_slice(&1u64.to_le_bytes()); // another pid namespace
        b[72..80].copy_from_slice(&hal::cpu_shm::named::region_id(name).to_le_bytes());
        let path = meta_path(name);
        std::fs::write(&path, b).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        Planted(path)
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn halctl(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("run halctl");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn creation_times_print_as_seconds_and_utc_dates() {
    let dates: &[(u64, &str)] = &[
        // No creation time recorded (leftover metadata): not the epoch.
        (0, "unknown"),
        (1, "1970-01-01 00:00:01"),
        (68_255_999, "1972-02-29 23:59:59"),
        (946_684_799, "1999-12-31 23:59:59"),
        (951_782_400, "2000-02-29 00:00:00"),
        (951_868_800, "2000-03-01 00:00:00"),
        (1_700_000_000, "2023-11-14 22:13:20"),
        (1_709_208_001, "2024-02-29 12:00:01"),
        (2_147_483_647, "2038-01-19 03:14:07"),
        (4_107_478_028, "2100-02-28 06:07:08"),
        (4_107_542_400, "2100-03-01 00:00:00"),
        (13_569_465_599, "2399-12-31 23:59:59"),
        (13_574_608_496, "2400-02-29 12:34:56"),
        (13_574_649_600, "2400-03-01 00:00:00"),
        (253_402_300_799, "9999-12-31 23:59:59"),
    ];
    let planted: Vec<(String, Planted)> = dates
        .iter()
        .map(|&(secs, _)| {
            let name = unique("when");
            let p = Planted::new(&name, secs);
            (name, p)
        })
        .collect();

    let v: Value = serde_json::from_str(halctl(&["shm", "ls", "--json"]).trim()).unwrap();
    let text = halctl(&["shm", "ls"]);
    for ((name, _), &(secs, date)) in planted.iter().zip(dates) {
        let r = v["regions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} not listed: {v}"));
        assert_eq!(r["created_unix"], secs, "{r}");
        assert_eq!(r["alive"], true, "{r}");
        assert_eq!(r["present"], false, "{r}");
        let line = text
            .lines()
            .find(|l| l.starts_with(name.as_str()))
            .unwrap_or_else(|| panic!("{name} not in:\n{text}"));
        assert!(line.contains(date), "{secs}: want {date} in {line:?}");
        assert!(
            line.ends_with("alive (region missing: stale metadata)"),
            "{line:?}"
        );
    }
    drop(planted);
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.contains(&format!("halctl-ls-{}-", std::process::id())))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn leftover_metadata_shows_an_unknown_owner_and_date() {
    // Its own prefix: the test above checks that nothing of its prefix is
    // left while this one may still hold its metadata.
    let name = format!("halctl-lsu-{}-leftover", std::process::id());
    let _p = Planted::with_pid(&name, 0, 0);
    let text = halctl(&["shm", "ls"]);
    let line = text
        .lines()
        .find(|l| l.starts_with(name.as_str()))
        .unwrap_or_else(|| panic!("{name} not in:\n{text}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    // NAME SIZE(2 words) OWNER CREATED STATE...
    assert_eq!(cols[3], "unknown", "{line:?}");
    assert_eq!(cols[4], "unknown", "{line:?}");
    assert!(!line.contains("1970"), "{line:?}");
    let v: Value = serde_json::from_str(halctl(&["shm", "ls", "--json"]).trim()).unwrap();
    let r = v["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name.as_str())
        .unwrap_or_else(|| panic!("{name} not listed: {v}"));
    assert_eq!(r["owner_pid"], 0, "{r}");
}
