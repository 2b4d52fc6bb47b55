//! Shared by the reliability tests (`crash`, `hostile`, `permissions`,
//! `load`): real child processes, resource censuses, unique names.
//!
//! # Child processes
//!
//! Every test binary of this family has one `#[test] fn __child()`, ignored
//! in a normal run (`#[ignore = "child entry point: run by its parent"]`:
//! it is no test of its own, and is not counted as one). A test starts a
//! child by re-executing its own binary with `__child --exact
//! --include-ignored --nocapture --test-threads=1` and [`ROLE_ENV`] naming
//! the role; `__child` then runs that role ([`child_role`]). Roles may
//! start further children the same way (a survivor starts its victims).
//!
//! Parent and child talk in lines: the child prints protocol lines
//! (`@rel@ TAG VALUE`, see [`say`]) on its standard output, the parent
//! writes plain lines to the child's standard input ([`Kid::tell`],
//! [`hear`]).
//!
//! # Censuses
//!
//! Descriptor and mapping counts are only meaningful in a process that runs
//! nothing else, so the roles that must prove "nothing left" run in a
//! dedicated child and compare a [`Census`] taken after a warm-up round with
//! one taken at the end ([`Census::assert_back`]).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hal_core::Error;

/// The environment variable that names a child's role.
pub const ROLE_ENV: &str = "HAL_REL_ROLE";
/// The prefix of a child's argument variables (`HAL_REL_ARG_<KEY>`).
pub const ARG_PREFIX: &str = "HAL_REL_ARG_";
/// The prefix of a protocol line (found anywhere in a line: the harness may
/// have printed `test __child ... ` before it).
pub const LINE: &str = "@rel@ ";
/// How long a parent waits for one line of its child before it declares the
/// child hung. A guard against hangs, never a timing assertion.
pub const PATIENCE: Duration = Duration::from_secs(60);
/// The timeout given to waits that are expected to succeed (a guard).
pub const LONG: Duration = Duration::from_secs(30);

/// A name unique to this process and call: `hal-rel-PID-N-TAG`.
pub fn unique(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "hal-rel-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A name unique to this process and call that starts with `scope` (a
/// [`unique`] name of its own): tests that run in parallel in one process
/// give their objects names under their own scope, so that one test's
/// [`ShmSweep`] never removes another's.
pub fn scoped(scope: &str, tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{scope}{tag}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// The prefix every [`unique`] name of this process starts with (for a
/// process that runs one test only: a child).
pub fn own_prefix() -> String {
    format!("hal-rel-{}-", std::process::id())
}

/// The role of this process, when it is a child.
pub fn role() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// In `__child`: the role its parent started it for.
///
/// # Panics
///
/// Without a role: the entry point was run by hand (`--include-ignored`),
/// and has nothing to check.
#[track_caller]
pub fn child_role() -> String {
    role().unwrap_or_else(|| {
        panic!("a child entry point, run by this binary's tests with {ROLE_ENV} set")
    })
}

/// In a child: the argument `key` its parent passed.
#[track_caller]
pub fn arg(key: &str) -> String {
    let var = format!("{ARG_PREFIX}{}", key.to_ascii_uppercase());
    std::env::var(&var).unwrap_or_else(|_| panic!("the parent did not pass {var}"))
}

/// In a child: the argument `key` parsed.
#[track_caller]
pub fn arg_as<T: std::str::FromStr>(key: &str) -> T {
    let v = arg(key);
    v.parse()
        .unwrap_or_else(|_| panic!("argument {key}={v:?} does not parse"))
}

/// In a child: print the protocol line `TAG VALUE` for the parent.
pub fn say(tag: &str, value: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n{LINE}{tag} {value}");
    let _ = out.flush();
}

/// In a child: the next line from the parent (an end of input fails the role).
#[track_caller]
pub fn hear() -> String {
    let mut line = String::new();
    let n = std::io::stdin()
        .lock()
        .read_line(&mut line)
        .expect("reading the parent's line");
    assert!(n > 0, "the parent closed its end");
    line.trim_end().to_string()
}

/// In a child: block until the parent closes standard input or kills us.
pub fn wait_for_eof() {
    let mut sink = Vec::new();
    let _ = std::io::stdin().lock().read_to_end(&mut sink);
}

/// A child process playing a role, seen from its parent. Dropping it kills
/// and reaps the child if it still runs.
pub struct Kid {
    role: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    log: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

impl Kid {
    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// Start this test binary's `__child` in `role` with `args`.
    pub fn spawn(role: &str, args: &[(&str, String)]) -> Kid {
        Kid::spawn_with(role, args, |_| {})
    }

    /// As [`Kid::spawn`], letting `setup` adjust the command first (a uid,
    /// a `pre_exec` hook).
    pub fn spawn_with(
        role: &str,
        args: &[(&str, String)],
        setup: impl FnOnce(&mut Command),
    ) -> Kid {
        let mut cmd = hal_core::testing::child("__child");
        cmd.env(ROLE_ENV, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in args {
            cmd.env(format!("{ARG_PREFIX}{}", k.to_ascii_uppercase()), v);
        }
        setup(&mut cmd);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning the `{role}` child failed: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        let log = Arc::new(Mutex::new(String::new()));
        let out_log = Arc::clone(&log);
        let out = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find(LINE) {
                    let _ = tx.send(line[at + LINE.len()..].trim_end().to_string());
                } else if !line.trim().is_empty() {
                    push(&out_log, &line);
                }
            }
        });
        let err_log = Arc::clone(&log);
        let err = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                push(&err_log, &line);
            }
        });
        Kid {
            role: role.to_string(),
            child: Some(child),
            stdin,
            lines,
            log,
            readers: vec![out, err],
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Wait for the line `TAG ...` and return what follows the tag. Other
    /// lines are skipped; a `fail` line, an exit or [`PATIENCE`] without a
    /// line fail the test with the child's output.
    #[track_caller]
    pub fn expect(&mut self, tag: &str) -> String {
        loop {
            match self.lines.recv_timeout(PATIENCE) {
                Ok(line) => {
                    let (got, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
                    if got == tag {
                        return rest.to_string();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("sent no `{tag}` line within {PATIENCE:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.fail(&format!("exited before its `{tag}` line"))
                }
            }
        }
    }

    /// Write one line to the child's standard input.
    #[track_caller]
    pub fn tell(&mut self, line: &str) {
        let ok = self
            .stdin
            .as_mut()
            .is_some_and(|s| writeln!(s, "{line}").and_then(|_| s.flush()).is_ok());
        if !ok {
            self.fail(&format!("could not be told `{line}`"));
        }
    }

    /// Kill the child with `SIGKILL`, reap it, and return the protocol lines
    /// it printed that nobody read yet.
    pub fn kill(mut self) -> Vec<String> {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stdin = None;
        self.join();
        self.lines.try_iter().collect()
    }

    /// Send `signal` to the child (it stays ours to reap).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        if let Some(c) = &self.child {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), signal);
        }
    }

    /// Close the child's standard input and wait for it to end, whatever
    /// way it ends.
    pub fn wait(mut self) -> ExitStatus {
        self.stdin = None;
        let status = self
            .child
            .take()
            .map(|mut c| c.wait().expect("wait"))
            .expect("a child not yet reaped");
        self.join();
        status
    }

    /// Close the child's standard input, wait for it, and require success.
    /// Returns what it printed besides protocol lines.
    #[track_caller]
    pub fn finish(mut self) -> String {
        self.stdin = None;
        let status: Option<ExitStatus> = self.child.as_mut().map(|c| c.wait().expect("wait"));
        self.child = None;
        self.join();
        match status {
            Some(s) if s.success() => self.output(),
            Some(s) => self.fail(&format!("exited with {s}")),
            None => self.fail("was already reaped"),
        }
    }

    fn join(&mut self) {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }

    /// Everything the child printed besides protocol lines.
    pub fn output(&self) -> String {
        self.log.lock().map(|s| s.clone()).unwrap_or_default()
    }

    #[track_caller]
    fn fail(&mut self, what: &str) -> ! {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stdin = None;
        self.join();
        let out = self.output();
        let tail = &out[out.len().saturating_sub(12_000)..];
        panic!(
            "the `{}` child {what}\n--- its output ---\n{tail}\n--- end ---",
            self.role
        );
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.stdin = None;
        self.join();
    }
}

fn push(log: &Mutex<String>, line: &str) {
    if let Ok(mut s) = log.lock() {
        s.push_str(line);
        s.push('\n');
    }
}

/// Start `role` as a dedicated child and require that it succeeds.
#[track_caller]
pub fn run_role(role: &str, args: &[(&str, String)]) -> String {
    Kid::spawn(role, args).finish()
}

// --- censuses -------------------------------------------------------------

/// What this process holds: open descriptors and shared mappings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Census {
    /// `/proc/self/fd` entries as `N -> target`.
    pub fds: Vec<String>,
    /// `/proc/self/maps` lines of memfds and `/dev/shm` objects.
    pub maps: Vec<String>,
}

impl Census {
    /// Count now, once this process's descriptor broker (if it runs) is idle
    /// in `epoll_wait`, and without the connections this process keeps to
    /// other processes' brokers (a cache of open sockets, closed first).
    /// The broker's board (its descriptor and its mapping) is the broker's
    /// own, as its listening socket is: made once, at the first importer's
    /// request, and kept as long as the broker; it is not counted. Other
    /// processes' boards mapped here are.
    pub fn take() -> Census {
        let own_board = format!(
            "/memfd:{} ",
            hal_core::exchange::board_memfd_name(std::process::id())
        );
        let thread_named = |name: &str| {
            std::fs::read_dir("/proc/self/task")
                .map(|d| {
                    d.flatten().any(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim_end() == name)
                    })
                })
                .unwrap_or(false)
        };
        hal_core::exchange::close_broker_connections();
        if thread_named("hal-broker") {
            // Every worker asleep in epoll_wait, twice in a row: none has an
            // event it has not handled (a woken worker is runnable), so a
            // connection whose peer hung up is closed already.
            let start = Instant::now();
            let mut quiet = 0;
            while quiet < 2 && start.elapsed() < Duration::from_secs(10) {
                if broker_workers_asleep() {
                    quiet += 1;
                } else {
                    quiet = 0;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let mut fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
            .map(|d| {
                d.flatten()
                    .map(|e| {
                        let t = std::fs::read_link(e.path())
                            .map(|p| p.display().to_string())
                            .unwrap_or_else(|_| "?".into());
                        format!("{} -> {t}", e.file_name().to_string_lossy())
                    })
                    .filter(|line| !line.contains(&own_board))
                    .collect()
            })
            .unwrap_or_default();
        fds.sort();
        let maps = std::fs::read_to_string("/proc/self/maps")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("/memfd:") || l.contains("/dev/shm/"))
            .filter(|l| !l.contains(&own_board))
            .map(str::to_string)
            .collect();
        Census { fds, maps }
    }

    /// Require that the counts come back to this census's. Descriptors of a
    /// peer that was just killed may take a moment to be closed by a thread
    /// of this process (a broker connection), so this looks again for a
    /// while before failing; it never requires anything to be fast.
    #[track_caller]
    pub fn assert_back(&self, what: &str) {
        let start = Instant::now();
        loop {
            let now = Census::take();
            if now.fds.len() == self.fds.len() && now.maps.len() == self.maps.len() {
                return;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let new_fds: Vec<_> = now.fds.iter().filter(|f| !self.fds.contains(f)).collect();
                let new_maps: Vec<_> = now.maps.iter().filter(|m| !self.maps.contains(m)).collect();
                panic!(
                    "{what}: {} descriptor(s) and {} shared mapping(s) now, {} and {} at the \
                     start; new descriptors {new_fds:?}; new mappings {new_maps:?}",
                    now.fds.len(),
                    now.maps.len(),
                    self.fds.len(),
                    self.maps.len()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The names in `/dev/shm` that contain `part`.
pub fn shm_entries(part: &str) -> Vec<String> {
    hal_tests::probe::shm_entries()
        .into_iter()
        .filter(|n| n.contains(part))
        .collect()
}

/// Removes, when dropped, every `/dev/shm` entry (and metadata) whose name
/// starts with its prefix: the cleanup after a failed test, so that one
/// failure does not leave objects behind. Check with [`assert_no_shm`] first.
pub struct ShmSweep(pub String);

impl Drop for ShmSweep {
    fn drop(&mut self) {
        for name in shm_entries(&self.0) {
            if name.starts_with(&self.0) || name.starts_with(&format!(".hal-meta.{}", self.0)) {
                let _ = std::fs::remove_file(format!("/dev/shm/{name}"));
            }
        }
    }
}

/// Require that `/dev/shm` holds nothing whose name contains `part`.
#[track_caller]
pub fn assert_no_shm(part: &str) {
    let left = shm_entries(part);
    assert!(left.is_empty(), "/dev/shm still holds {left:?}");
}

// --- threads and syscalls ---------------------------------------------------

/// True when a thread of process `pid` named `comm` is inside system call
/// `nr` (`/proc/PID/task/TID/syscall`). False when that cannot be read.
pub fn thread_in_syscall(pid: u32, comm: &str, nr: i64) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    for t in tasks.flatten() {
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if name.trim_end() != comm {
            continue;
        }
        let sc = std::fs::read_to_string(t.path().join("syscall")).unwrap_or_default();
        if sc
            .split_whitespace()
            .next()
            .and_then(|s| s.parse::<i64>().ok())
            == Some(nr)
        {
            return true;
        }
    }
    false
}

/// True when every thread of this process named `hal-broker` sleeps
/// (state `S`) in `epoll_wait` or `epoll_pwait`.
fn broker_workers_asleep() -> bool {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return false;
    };
    tasks.flatten().all(|t| {
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if name.trim_end() != "hal-broker" {
            return true;
        }
        let sc = std::fs::read_to_string(t.path().join("syscall")).unwrap_or_default();
        let nr = sc
            .split_whitespace()
            .next()
            .and_then(|s| s.parse::<i64>().ok());
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .unwrap_or("");
        state == "S" && (nr == Some(libc::SYS_epoll_wait) || nr == Some(libc::SYS_epoll_pwait))
    })
}

/// Wait (at most 10 s) until [`thread_in_syscall`] holds. Returns whether it
/// was seen; callers go on either way (the point is to make the interesting
/// interleaving likely, not to require it).
pub fn await_thread_in_syscall(pid: u32, comm: &str, nr: i64) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if thread_in_syscall(pid, comm, nr) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// Wait (at most 10 s) until every thread of process `pid` is stopped
/// (state `T`, after `SIGSTOP`). Returns whether that was seen.
pub fn await_stopped(pid: u32) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let all = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.flatten().all(|t| {
                    let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                    stat.rfind(')')
                        .and_then(|i| stat[i + 1..].split_whitespace().next())
                        .is_some_and(|s| s == "T" || s == "t")
                })
            })
            .unwrap_or(false);
        if all {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

// --- data -------------------------------------------------------------------

/// `len` bytes that depend on `seed` and on the position.
pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let s = seed.wrapping_mul(0x9e37_79b9);
    (0..len)
        .map(|i| {
            let x = (i as u32).wrapping_mul(0x85eb_ca6b) ^ s;
            (x ^ (x >> 13) ^ (x >> 24)) as u8
        })
        .collect()
}

/// FNV-1a of `bytes`, for checksums reported over a line.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The stable name of an error's variant (`timeout`, `closed`, ...).
pub fn kind(r: &Result<impl Sized, Error>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.kind_name(),
    }
}

/// Run `f` on a thread named `name` and return its handle.
pub fn named_thread<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .expect("spawning a thread")
}

/// Send `bytes` on the socket `sock` in one `sendmsg`, with `fds` attached
/// (`SCM_RIGHTS`), whatever they are: what a hostile peer does.
pub fn send_raw(sock: std::os::fd::BorrowedFd<'_>, bytes: &[u8], fds: &[std::os::fd::RawFd]) {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::os::fd::AsRawFd;
    let iov = [std::io::IoSlice::new(bytes)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsg: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    let n =
        sendmsg::<()>(sock.as_raw_fd(), &iov, cmsg, MsgFlags::MSG_NOSIGNAL, None).expect("sendmsg");
    assert_eq!(n, bytes.len(), "a short sendmsg");
}

/// The 12-byte header of a handle-stream message (see
/// `hal_core::exchange::HandleStream`): magic, version, kind (1 handle),
/// descriptors announced, a zero, the body length.
pub fn frame_header(version: u8, kind: u8, fds: u8, len: u32) -> Vec<u8> {
    let mut h = b"HALS".to_vec();
    h.extend_from_slice(&[version, kind, fds, 0]);
    h.extend_from_slice(&len.to_le_bytes());
    h
}

/// Configure `cmd` to run with `umask(mask)`.
pub fn with_umask(cmd: &mut Command, mask: libc::mode_t) {
    // SAFETY: the hook runs in the forked child before exec and calls only
    // umask(2), which is async-signal-safe and cannot fail.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(mask);
            Ok(())
        });
    }
}

/// True when this process runs as root (the uid tests then use uid 65534).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The unprivileged uid and gid the cross-user tests switch to.
pub const NOBODY: u32 = 65534;

/// Open device 0 of the backend named `$b` ("cpu", "mock" for the CUDA-like
/// profile, "mock-ro" for it with read-only exports, "ascend" for the
/// Ascend-like one) as `$d` and evaluate `$body`
/// with it (the scenarios are generic over the device).
#[allow(unused_macros)]
macro_rules! on_backend {
    ($b:expr, |$d:ident| $body:expr) => {
        match $b {
            "cpu" => {
                let $d = hal_cpu_shm::CpuShm::new()
                    .open(0)
                    .expect("opening the cpu-shm host device");
                $body
            }
            "mock" => {
                let $d = hal_mock::MockBackend::new(hal_mock::Profile::cuda())
                    .open(0)
                    .expect("opening mock-cuda device 0");
                $body
            }
            "mock-ro" => {
                let mut profile = hal_mock::Profile::cuda();
                profile.capabilities = profile
                    .capabilities
                    .union(hal_core::Capabilities::READ_ONLY_EXPORT);
                let $d = hal_mock::MockBackend::new(profile)
                    .open(0)
                    .expect("opening mock-cuda device 0 with read-only exports");
                $body
            }
            "ascend" => {
                let $d = hal_mock::MockBackend::new(hal_mock::Profile::ascend())
                    .open(0)
                    .expect("opening mock-ascend device 0");
                $body
            }
            other => panic!("unknown backend {other}"),
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_backend;

/// Rounds of each crash and hostile scenario after the warm-up round.
#[allow(dead_code)]
pub const ROUNDS: u32 = 20;

/// Run the child role `scenario:backend` to its end, require its success,
/// pass its notes on (for `--nocapture`), and check that `/dev/shm` holds
/// nothing of it or of the processes it started.
#[allow(dead_code)]
pub fn run_scenario(scenario: &str, backend: &str) {
    let kid = Kid::spawn(&format!("{scenario}:{backend}"), &[]);
    let pid = kid.pid();
    let _sweep = ShmSweep(format!("hal-rel-{pid}-"));
    let out = kid.finish();
    for line in out.lines().filter(|l| l.starts_with("note: ")) {
        eprintln!("{scenario}:{backend}: {}", &line[6..]);
    }
    assert_no_shm(&format!("hal-rel-{pid}-"));
}

// --- the descriptor broker's protocol, spoken by hand ------------------------------

/// A lease ticket as a reply carries it: table id, slot, token.
pub type RawTicket = (Vec<u8>, u32, u64);

/// Connect to the broker `name` and send it `bytes`, the raw protocol.
pub fn broker_connect(name: &str) -> std::os::fd::OwnedFd {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .unwrap();
    let tv = nix::sys::time::TimeVal::new(10, 0);
    nix::sys::socket::setsockopt(&fd, nix::sys::socket::sockopt::ReceiveTimeout, &tv).unwrap();
    connect(
        fd.as_raw_fd(),
        &UnixAddr::new_abstract(name.as_bytes()).unwrap(),
    )
    .unwrap();
    fd
}

/// The broker's fetch request for `id` (see `hal_core::exchange`): version
/// 2, operation 1, the id, no ticket.
pub fn broker_request(id: &[u8; 16]) -> Vec<u8> {
    let mut r = b"HALB\x02\x01\x00\x00".to_vec();
    r.extend_from_slice(id);
    r.extend_from_slice(&[0; 16]);
    r
}

/// The broker's lease request for `id`: operation 2.
pub fn lease_request(id: &[u8; 16]) -> Vec<u8> {
    let mut r = broker_request(id);
    r[5] = 2;
    r
}

/// A release request: operation 3, the table id, the slot and the token.
pub fn release_request(table: &[u8], slot: u32, token: u64) -> Vec<u8> {
    let mut r = b"HALB\x02\x03\x00\x00".to_vec();
    r.extend_from_slice(table);
    r.extend_from_slice(&slot.to_le_bytes());
    r.extend_from_slice(&[0; 4]);
    r.extend_from_slice(&token.to_le_bytes());
    r
}

/// Something shaped like a broker reply, sent to a broker.
pub fn reply_lookalike() -> Vec<u8> {
    let mut r = b"HALR\x02\x00\x01\x00".to_vec();
    r.resize(40, 0);
    r
}

/// A broker reply read by hand: `None` at end of file, else its status,
/// how many descriptors came (closed at once) and the lease ticket.
pub fn raw_reply(fd: std::os::fd::BorrowedFd<'_>) -> Option<(u8, usize, Option<RawTicket>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    let mut buf = [0u8; 64];
    let mut space = nix::cmsg_space!([RawFd; 16]);
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let msg = recvmsg::<()>(
        fd.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .unwrap();
    let mut fds = Vec::new();
    for c in msg.cmsgs().unwrap() {
        if let ControlMessageOwned::ScmRights(r) = c {
            for raw in r {
                // SAFETY: the kernel installed this descriptor for this
                // reception; nothing else owns it.
                fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
            }
        }
    }
    let n = msg.bytes;
    if n == 0 {
        return None;
    }
    assert!(
        n == 40 && &buf[..4] == b"HALR",
        "a malformed reply {:?}",
        &buf[..n]
    );
    let ticket = (buf[7] == 1).then(|| {
        (
            buf[24..40].to_vec(),
            u32::from_le_bytes(buf[12..16].try_into().unwrap()),
            u64::from_le_bytes(buf[16..24].try_into().unwrap()),
        )
    });
    Some((buf[5], fds.len(), ticket))
}

/// A broker's reply on `fd` as text: `eof`, the status, or `status+Nfds`
/// when descriptors came with it, then `+lease` when a lease ticket came
/// with it (given back at once, with a release request to the broker
/// `name`).
pub fn broker_answer_at(fd: std::os::fd::BorrowedFd<'_>, name: &str) -> String {
    use std::os::fd::AsFd;
    let Some((status, fds, ticket)) = raw_reply(fd) else {
        return "eof".to_string();
    };
    let mut answer = if fds == 0 {
        status.to_string()
    } else {
        format!("{status}+{fds}fds")
    };
    if let Some((table, slot, token)) = ticket {
        let conn = broker_connect(name);
        send_raw(conn.as_fd(), &release_request(&table, slot, token), &[]);
        assert_eq!(
            broker_answer_at(conn.as_fd(), name),
            "0",
            "a lease given back"
        );
        answer.push_str("+lease");
    }
    answer
}
