//! Resource measurements for the hygiene checks: open descriptors, memfd
//! mappings and `/dev/shm` entries of this process, and a count of the suite
//! cases running in this test process.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What this process holds at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Open descriptors (`/proc/self/fd`), each as `fd -> target`.
    pub fds: Vec<String>,
    /// Lines of `/proc/self/maps` that map a memfd.
    pub memfd_maps: Vec<String>,
    /// Names in `/dev/shm`.
    pub shm: BTreeSet<String>,
}

impl Snapshot {
    /// Measure now.
    pub fn take() -> Snapshot {
        let mut fds = Vec::new();
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            for entry in dir.flatten() {
                let target = std::fs::read_link(entry.path())
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| "?".into());
                fds.push(format!(
                    "{} -> {target}",
                    entry.file_name().to_string_lossy()
                ));
            }
        }
        fds.sort();
        let memfd_maps = std::fs::read_to_string("/proc/self/maps")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("/memfd:"))
            .map(str::to_string)
            .collect();
        Snapshot {
            fds,
            memfd_maps,
            shm: shm_entries(),
        }
    }

    /// What `later` holds beyond this snapshot: descriptors (by count),
    /// memfd mappings (by count) and `/dev/shm` names that `owned` accepts.
    /// Empty when nothing leaked.
    pub fn leaks_in(&self, later: &Snapshot, owned: impl Fn(&str) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        if later.fds.len() > self.fds.len() {
            let before: BTreeSet<_> = self.fds.iter().collect();
            let new: Vec<_> = later.fds.iter().filter(|f| !before.contains(f)).collect();
            out.push(format!(
                "{} descriptor(s) more than at the start; new or changed: {new:?}",
                later.fds.len() - self.fds.len()
            ));
        }
        if later.memfd_maps.len() > self.memfd_maps.len() {
            out.push(format!(
                "{} memfd mapping(s) more than at the start: {:?}",
                later.memfd_maps.len() - self.memfd_maps.len(),
                later.memfd_maps
            ));
        }
        let new_shm: Vec<_> = later
            .shm
            .difference(&self.shm)
            .filter(|n| owned(n))
            .collect();
        if !new_shm.is_empty() {
            out.push(format!("new /dev/shm entries: {new_shm:?}"));
        }
        out
    }
}

/// The names in `/dev/shm`, and the names in its users' directories as
/// `.hal-UID/NAME` (a user's directory itself is not listed).
pub fn shm_entries() -> BTreeSet<String> {
    let mut entries: BTreeSet<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    // Users' directories of group and channel names (`.hal-UID`, kept
    // while the machine runs) count by what they hold.
    for dir in entries.clone() {
        let user_dir = dir
            .strip_prefix(".hal-")
            .is_some_and(|uid| !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_digit()));
        if !user_dir {
            continue;
        }
        if let Ok(d) = std::fs::read_dir(format!("/dev/shm/{dir}")) {
            entries.remove(&dir);
            entries.extend(
                d.flatten()
                    .map(|e| format!("{dir}/{}", e.file_name().to_string_lossy())),
            );
        }
    }
    entries
}

/// True when `name` holds `pid` as a whole decimal token (delimited by
/// anything that is not a digit), the way backends that name shared objects
/// after their creator write it.
pub fn names_pid(name: &str, pid: u32) -> bool {
    let pid = pid.to_string();
    name.split(|c: char| !c.is_ascii_digit())
        .any(|tok| tok == pid)
}

static RUNNING: AtomicUsize = AtomicUsize::new(0);
static FINISHED: AtomicUsize = AtomicUsize::new(0);
static PIDS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Marks one suite case as running in this process until dropped.
#[derive(Debug)]
pub struct CaseGuard(());

impl CaseGuard {
    /// A case starts.
    pub fn enter() -> CaseGuard {
        RUNNING.fetch_add(1, Ordering::SeqCst);
        CaseGuard(())
    }
}

impl Drop for CaseGuard {
    fn drop(&mut self) {
        FINISHED.fetch_add(1, Ordering::SeqCst);
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Record the pid of a child process this run started.
pub fn record_pid(pid: u32) {
    if let Ok(mut p) = PIDS.lock() {
        p.push(pid);
    }
}

/// The pids of this run: this process and every child it started.
pub fn run_pids() -> Vec<u32> {
    let mut v = PIDS.lock().map(|p| p.clone()).unwrap_or_default();
    v.push(std::process::id());
    v
}

/// How many suite cases finished in this process.
pub fn finished_cases() -> usize {
    FINISHED.load(Ordering::SeqCst)
}

/// Block until no suite case runs in this process: until `expected` cases
/// have finished, or (for a filtered run) until none has run for a second.
/// Returns how many finished.
///
/// The test harness starts tests in name order, so a test whose name sorts
/// after every suite module that calls this waits for the whole suite.
pub fn wait_for_suite(expected: usize) -> usize {
    let patience = Duration::from_secs(600);
    let start = Instant::now();
    let mut idle_since: Option<Instant> = None;
    loop {
        let running = RUNNING.load(Ordering::SeqCst);
        let finished = FINISHED.load(Ordering::SeqCst);
        if running == 0 {
            if finished >= expected {
                return finished;
            }
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_secs(1) {
                return finished;
            }
        } else {
            idle_since = None;
        }
        if start.elapsed() > patience {
            return finished;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
