//! Code shared by the integration tests: unique names, child processes
//! (the test binary re-executed in a role), and leak checks.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use hal_core::{Handle, SharedHandle};

/// The environment variable that selects a child's role.
pub const ROLE: &str = "HAL_CPU_SHM_TEST_ROLE";
/// The environment variable that names the uid a child's role runs as.
pub const AS_UID: &str = "HAL_CPU_SHM_TEST_AS_UID";

/// In a child started by [`Peer::spawn_as`]: switch every thread of this
/// process to that uid and gid for good, dropping supplementary groups.
pub fn become_user() {
    let uid: u32 = std::env::var(AS_UID)
        .expect("started by Peer::spawn_as")
        .parse()
        .expect("a uid");
    nix::unistd::setgroups(&[]).expect("setgroups");
    let gid = nix::unistd::Gid::from_raw(uid);
    nix::unistd::setresgid(gid, gid, gid).expect("setresgid");
    let id = nix::unistd::Uid::from_raw(uid);
    nix::unistd::setresuid(id, id, id).expect("setresuid");
    assert_eq!(nix::unistd::geteuid().as_raw(), uid);
}

/// The environment variable that carries a handle's text to a child.
pub const HANDLE: &str = "HAL_CPU_SHM_TEST_HANDLE";
/// How long a test waits for a child's line before failing.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A name unique to this process and call, starting with `hal-t-PID-`.
pub fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "hal-t-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The role this process runs in, when it is a child.
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// A handle from the text in the environment (a child's input).
pub fn handle_from_env(var: &str) -> SharedHandle {
    let text = std::env::var(var).unwrap_or_else(|_| panic!("{var} is not set"));
    SharedHandle::from(Handle::from_text(&text).expect("decodable handle text"))
}

/// A child process running one test of this binary in a role, talking in
/// lines: the child prints `HAL:<line>` and reads plain lines on stdin.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Peer {
    /// Start `test` (its full path, e.g. `cross::notify_ping_pong`) in `role`.
    pub fn spawn(test: &str, role: &str, env: &[(&str, String)]) -> Peer {
        Peer::spawn_with(test, role, env, |_| {})
    }

    /// As [`Peer::spawn`], for a role that runs as `uid` (and group `uid`):
    /// needs root. The child starts as this process's user and switches as
    /// its role begins ([`become_user`]), so that the test binary need not be
    /// reachable by `uid` (it may sit in a directory only root can enter).
    pub fn spawn_as(test: &str, role: &str, env: &[(&str, String)], uid: u32) -> Peer {
        Peer::spawn_with(test, role, env, |cmd| {
            cmd.env(AS_UID, uid.to_string());
        })
    }

    /// As [`Peer::spawn`], letting `setup` adjust the command first.
    pub fn spawn_with(
        test: &str,
        role: &str,
        env: &[(&str, String)],
        setup: impl FnOnce(&mut Command),
    ) -> Peer {
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = Command::new(exe);
        cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        setup(&mut cmd);
        let mut child = cmd.spawn().expect("spawning the child");
        let stdout = child.stdout.take().expect("child stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The harness may have printed "test NAME ... " on the same line.
                if let Some(at) = line.find("HAL:") {
                    if tx.send(line[at + 4..].to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        let stdin = child.stdin.take();
        Peer {
            child,
            stdin,
            lines,
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send a line.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("child stdin open");
        writeln!(stdin, "{line}").expect("writing to the child");
        stdin.flush().expect("flushing to the child");
    }

    /// The next line from the child (fails the test after [`PATIENCE`]).
    pub fn recv(&mut self) -> String {
        match self.lines.recv_timeout(PATIENCE) {
            Ok(l) => l,
            Err(e) => panic!(
                "no line from the child ({e}); it exited with {:?}",
                self.child.try_wait()
            ),
        }
    }

    /// Close stdin and wait for the exit status.
    pub fn finish(mut self) -> ExitStatus {
        self.stdin.take();
        self.child.wait().expect("waiting for the child")
    }

    /// Kill the child with SIGKILL and reap it.
    pub fn kill(mut self) {
        self.stdin.take();
        self.child.kill().expect("SIGKILL to the child");
        self.child.wait().expect("reaping the child");
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// In a child: send a line to the parent.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "\nHAL:{line}").expect("writing to the parent");
    out.flush().expect("flushing to the parent");
}

/// In a child: the next line from the parent.
pub fn hear() -> String {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .expect("reading from the parent");
    line.trim_end().to_string()
}

/// Entries of /dev/shm whose name contains `part`.
pub fn shm_entries(part: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.contains(part))
                .collect()
        })
        .unwrap_or_default()
}

/// How many descriptors this process has open.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A fill pattern: byte `i` of a region is `(i * 7 + seed) as u8`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}
