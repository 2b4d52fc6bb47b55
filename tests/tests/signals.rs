//! Every thread hal starts blocks the asynchronous signals, so that the
//! signals sent to the process reach the application's own threads (a
//! PostgreSQL backend's latch `SIGUSR1`, `SIGTERM`, `SIGINT`).
//!
//! Each test forks a child first thing: the child is single-threaded, so
//! the only threads in it besides its main thread are the ones hal starts.
//! This process itself starts no hal thread and takes no hal lock before
//! forking. The child reports through a pipe and its exit status.

use std::future::Future;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::task::{Context, Waker};

use hal_core::kit::os::thread::{blocked_set, SYNCHRONOUS};
use hal_core::kit::stream::reaper::{self, Drained};
use hal_core::{AllocDesc, Backend, Device, ExportOptions, Result};
use nix::sys::signal::{self, SigHandler, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};

/// The real-time signals glibc keeps for itself (thread cancellation and
/// `setxid`): `pthread_sigmask` leaves them unblocked on every thread.
const GLIBC_RESERVED: [u32; 2] = [32, 33];

/// `SIGKILL` and `SIGSTOP`: no thread can block them.
const UNBLOCKABLE: [u32; 2] = [libc::SIGKILL as u32, libc::SIGSTOP as u32];

/// The threads a child starts, and what keeps each alive while the test
/// looks at them.
struct Started {
    /// Rung to let the teardown, the deferred stream and the waiter end.
    release: Vec<mpsc::Sender<()>>,
    /// What each kind of thread is called (the kernel keeps 15 bytes).
    names: Vec<&'static str>,
    _keep: Vec<Box<dyn std::any::Any>>,
}

/// A dropped stream whose work runs once `rx` is rung.
struct Pending(mpsc::Receiver<()>);

impl Drained for Pending {
    fn drained(&mut self) -> Result<bool> {
        Ok(!matches!(self.0.try_recv(), Err(mpsc::TryRecvError::Empty)))
    }
}

/// Start one thread of every kind hal starts in the backends this crate
/// links: the descriptor broker's workers (an export), a teardown worker
/// (a teardown still waiting for its device), the stream reaper (a dropped
/// stream with work queued), a waiter (an awaited wait) and the
/// simulator's stream worker.
fn start_every_kind() -> std::result::Result<Started, String> {
    let mut release = Vec::new();
    let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    let err = |e: hal_core::Error| e.to_string();

    let cpu = hal_cpu_shm::CpuShm::new().open(0).map_err(err)?;
    let alloc = cpu.allocate(&AllocDesc::host(4096)).map_err(err)?;
    let exported = cpu
        .export_memory(&alloc, &ExportOptions::default())
        .map_err(err)?;
    keep.push(Box::new((alloc, exported)));

    let (tx, rx) = mpsc::channel::<()>();
    hal_core::kit::stream::teardown::after_work("a test's teardown", move || {
        let _ = rx.recv();
    });
    release.push(tx);

    let (tx, rx) = mpsc::channel::<()>();
    reaper::defer(Box::new(Pending(rx)));
    release.push(tx);

    let (tx, rx) = mpsc::channel::<()>();
    let mut waiting = Box::pin(hal_core::wait::blocking_future(move || {
        let _ = rx.recv();
        Ok(())
    }));
    let _ = waiting
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()));
    keep.push(Box::new(waiting));
    release.push(tx);

    let mock = hal_mock::MockBackend::cuda().open(0).map_err(err)?;
    let stream = mock.create_stream().map_err(err)?;
    keep.push(Box::new((stream, mock)));

    Ok(Started {
        release,
        names: vec![
            "hal-broker",
            "hal-teardown",
            "hal-stream-reap",
            "hal-waiter",
            "hal-mock-stream",
        ],
        _keep: keep,
    })
}

/// Every thread of this process: its name and its blocked set.
fn threads() -> Vec<(u32, String, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(tid) = task.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        let blocked = u64::from_str_radix(&field("SigBlk:"), 16).unwrap_or(0);
        out.push((tid, field("Name:"), blocked));
    }
    out
}

/// What a hal thread must block, as `/proc`'s `SigBlk` bits (signal n is
/// bit n - 1).
fn required_bits() -> u64 {
    let set = blocked_set();
    let mut bits = 0u64;
    for n in 1..=64u32 {
        if GLIBC_RESERVED.contains(&n) || UNBLOCKABLE.contains(&n) {
            continue;
        }
        let blocked = match Signal::try_from(n as i32) {
            Ok(s) => set.contains(s),
            // Real-time signals: blocked unless glibc's own.
            Err(_) => n >= libc::SIGRTMIN() as u32 && n <= libc::SIGRTMAX() as u32,
        };
        if blocked {
            bits |= 1 << (n - 1);
        }
    }
    bits
}

/// Run `child` in a forked child; its report (what it wrote) and whether
/// it exited with 0.
fn in_forked_child(child: fn(&mut std::fs::File) -> bool) -> (bool, String) {
    let (r, w) = nix::unistd::pipe().expect("pipe");
    // SAFETY: this test binary's threads take no hal lock and start no hal
    // thread (only forked children do), and the child uses only what it
    // makes itself after the fork, then leaves with `_exit`.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            drop(r);
            let mut out = std::fs::File::from(w);
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| child(&mut out)))
                .unwrap_or_else(|_| {
                    let _ = writeln!(out, "the child panicked");
                    false
                });
            drop(out);
            // SAFETY: ends the forked child without running the parent's
            // exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        ForkResult::Parent { child } => {
            drop(w);
            let mut report = String::new();
            std::fs::File::from(r)
                .read_to_string(&mut report)
                .expect("the child's report");
            let status = waitpid(child, None).expect("waitpid");
            (matches!(status, WaitStatus::Exited(_, 0)), report)
        }
    }
}

fn every_hal_thread_blocks_async_signals(out: &mut std::fs::File) -> bool {
    let started = match start_every_kind() {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(out, "starting hal's threads: {e}");
            return false;
        }
    };
    let required = required_bits();
    let mut ok = true;
    // A thread names itself once it runs: look again until every kind has
    // (a bound only against a hang, never a measure).
    let bound = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut all = threads();
    while !started
        .names
        .iter()
        .all(|want| all.iter().any(|(_, name, _)| name.starts_with(want)))
        && std::time::Instant::now() < bound
    {
        std::thread::yield_now();
        all = threads();
    }
    for want in &started.names {
        if !all.iter().any(|(_, name, _)| name.starts_with(want)) {
            let _ = writeln!(out, "no thread named {want}: {all:?}");
            ok = false;
        }
    }
    let mut seen = 0;
    for (tid, name, blocked) in &all {
        if !name.starts_with("hal-") {
            continue;
        }
        seen += 1;
        if blocked & required != required {
            let _ = writeln!(
                out,
                "thread {tid} ({name}) leaves signals unblocked: SigBlk {blocked:016x}, \
                 required {required:016x}"
            );
            ok = false;
        }
        for s in SYNCHRONOUS {
            if blocked & (1 << (s as i32 - 1)) != 0 {
                let _ = writeln!(out, "thread {tid} ({name}) blocks the synchronous {s:?}");
                ok = false;
            }
        }
    }
    let _ = writeln!(out, "checked {seen} hal thread(s)");
    drop(started.release);
    ok
}

#[test]
fn every_hal_thread_blocks_asynchronous_signals() {
    let (ok, report) = in_forked_child(every_hal_thread_blocks_async_signals);
    assert!(ok, "{report}");
    assert!(report.contains("checked "), "{report}");
}

/// The thread that ran the handler.
static HANDLED_ON: AtomicI32 = AtomicI32::new(0);

extern "C" fn record_thread(_: libc::c_int) {
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    HANDLED_ON.store(unsafe { libc::gettid() }, Ordering::SeqCst);
}

/// True when `SIGUSR1` is pending for this thread or the process.
fn pending_usr1() -> bool {
    // SAFETY: `set` is a valid sigset_t for sigpending to fill.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut set) == 0 && libc::sigismember(&set, libc::SIGUSR1) == 1
    }
}

fn a_signal_to_the_process_reaches_the_main_thread(out: &mut std::fs::File) -> bool {
    let started = match start_every_kind() {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(out, "starting hal's threads: {e}");
            return false;
        }
    };
    // SAFETY: the handler only stores into an atomic.
    if let Err(e) = unsafe { signal::signal(Signal::SIGUSR1, SigHandler::Handler(record_thread)) } {
        let _ = writeln!(out, "installing the handler: {e}");
        return false;
    }
    // The main thread holds the signal back while it is sent: if any hal
    // thread left it unblocked, the kernel gives it to that thread now.
    let usr1 = SigSet::from(Signal::SIGUSR1);
    let _ = signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&usr1), None);
    let _ = signal::kill(nix::unistd::getpid(), Signal::SIGUSR1);
    let pending = pending_usr1();
    let early = HANDLED_ON.load(Ordering::SeqCst);
    let _ = signal::pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&usr1), None);
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    let on = HANDLED_ON.load(Ordering::SeqCst);
    let _ = writeln!(
        out,
        "pending while blocked here: {pending:?}; handled before unblocking on {early}; \
         handled on {on}; main thread {me}"
    );
    drop(started.release);
    pending && early == 0 && on == me
}

#[test]
fn a_signal_sent_to_the_process_is_handled_by_the_applications_thread() {
    let (ok, report) = in_forked_child(a_signal_to_the_process_reaches_the_main_thread);
    assert!(ok, "{report}");
}

/// The library crates start threads only through
/// `hal_core::kit::os::thread`, the one place that blocks the signals: no
/// `std::thread::spawn`, `Builder` or scoped spawn in their code outside
/// test modules. (Tests may start what threads they like.)
#[test]
fn library_crates_start_threads_only_through_the_helper() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let crates = [
        "hal-core",
        "hal-cpu-shm",
        "hal-cuda",
        "hal-cuda-uvm",
        "hal-ascend",
        "hal-mock",
        "hal-ffi",
        "hal",
    ];
    let mut files = Vec::new();
    for c in crates {
        collect_sources(&root.join(c), &mut files);
    }
    assert!(files.len() > 50, "the sources were not found: {files:?}");
    let mut offenders = Vec::new();
    for f in &files {
        // The helper itself, and test modules kept in files of their own
        // (`#[cfg(test)] mod tests;`).
        if f.ends_with("hal-core/src/kit/os/thread.rs") || f.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        let code = text
            .split("#[cfg(test)]")
            .next()
            .unwrap_or("")
            .replace("os::thread::spawn", "");
        for needle in [
            "thread::spawn(",
            "thread::Builder",
            "s.spawn(",
            ".spawn_scoped(",
        ] {
            if code.contains(needle) {
                offenders.push(format!("{}: {needle}", f.display()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "threads started without hal_core::kit::os::thread: {offenders:#?}"
    );
}

/// Every `.rs` file under the `src` folders below `dir` (skipping build
/// outputs and tests).
fn collect_sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | "tests" | "examples" | "benches") {
                collect_sources(&p, out);
            }
        } else if name.ends_with(".rs") && p.components().any(|c| c.as_os_str() == "src") {
            out.push(p);
        }
    }
}
