//! Attacks that need user and pid namespaces, forged creators and recycled
//! pids, with real processes: the overflow uid, leases of importers the
//! exporter numbers differently, handles that name a genuine creator but
//! come from elsewhere, and a new process that gets an allowed pid.
//!
//! Namespaces are made with `unshare(2)` in a child right before it runs
//! (a `pre_exec` hook). Where the kernel refuses (no user namespaces for
//! this user, a seccomp profile), the test says `NOT RUN` and why
//! (`hal_core::testing::not_run`; a failure with `HAL_TESTS_STRICT=1`).

use hal_core::DeviceExt;
mod reliability;

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;

use hal_core::exchange;
use hal_core::kit::os;
use hal_core::{
    Allocation, Backend, Device, Error, ExportOptions, Exported, FdSource, Handle, ImportOptions,
    Importers, Memory, SharedHandle,
};
use hal_cpu_shm::CpuShm;
use reliability::*;

/// The child entry point: a role in a child process its parent started.
#[test]
#[ignore = "child entry point: run by its parent"]
fn __child() {
    let role = child_role();
    let (what, backend) = role.split_once(':').unwrap_or((role.as_str(), "cpu"));
    match what {
        "userns-exporter" => userns_exporter(),
        "userns-importer" => userns_importer(),
        "pidns-importer" => on_backend!(backend, |d| pidns_importer(&d)),
        "forger" => forger(),
        "allowed-importer" => allowed_importer(),
        other => panic!("unknown role {other}"),
    }
}

/// `unshare(2)` with the `CLONE_NEW*` bits of `flags`.
fn unshare(flags: i32) -> std::io::Result<()> {
    // SAFETY: unshare(2) takes flags only and touches no memory of ours.
    if unsafe { libc::unshare(flags) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Start `role` in new namespaces of `flags` (a user namespace: the child
/// enters it itself).
fn spawn_unshared(role: &str, args: &[(&str, String)], flags: i32) -> Kid {
    Kid::spawn_with(role, args, move |cmd| {
        // SAFETY: the hook runs in the forked child before exec and calls
        // only unshare(2), which is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || unshare(flags));
        }
    })
}

/// Start `role` as pid 1 of a new pid namespace. A process that unshared
/// its pid namespace cannot start threads, so the hook forks once more: the
/// new process (pid 1 there) goes on to run the role, and the one in
/// between closes every descriptor beyond the standard three (the spawn's
/// error pipe among them, so that spawning returns), waits for it and exits
/// with its status. [`Kid::pid`] is the one in between; the role reports
/// its own pid as this namespace numbers it.
fn spawn_in_new_pid_namespace(role: &str, args: &[(&str, String)]) -> Kid {
    Kid::spawn_with(role, args, |cmd| {
        // SAFETY: the hook runs in the forked child before exec and calls
        // only async-signal-safe functions: unshare, fork, close_range,
        // waitpid, _exit.
        unsafe {
            cmd.pre_exec(|| {
                unshare(libc::CLONE_NEWPID)?;
                let pid = libc::fork();
                if pid < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if pid == 0 {
                    return Ok(());
                }
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
                let code = if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    128 + libc::WTERMSIG(status)
                };
                libc::_exit(code)
            });
        }
    })
}

/// True when this kernel lets this process make `flags` namespaces.
fn can_unshare(flags: i32) -> Result<(), String> {
    // SAFETY: the child only calls unshare(2) and _exit(2).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err("fork failed".into());
    }
    if pid == 0 {
        let code = i32::from(unshare(flags).is_err());
        // SAFETY: leaves the forked child at once.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(format!("unshare({flags:#x}) is refused here"))
    }
}

fn overflow_uid() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/overflowuid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65534)
}

fn from_text(text: &str) -> SharedHandle {
    SharedHandle::from(exchange::decode(text).expect("a decodable handle text"))
}

fn export_pattern<D: Device>(d: &D, seed: u32) -> (D::Allocation, Exported) {
    let page = d.info().page_size();
    let desc = if d
        .capabilities()
        .contains(hal_core::Capabilities::MEMORY_IS_HOST)
    {
        hal_core::AllocDesc::host(4 * page)
    } else {
        hal_core::AllocDesc::device(d.info().ordinal, 4 * page)
    };
    let a = d.allocate(&desc).unwrap();
    a.write(0, &pattern(seed, a.len() as usize)).unwrap();
    let opts = ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    };
    let ex = d.export_memory(&a, &opts).unwrap();
    (a, ex)
}

fn holds_pattern(m: &impl Memory, seed: u32) -> bool {
    let mut got = vec![0u8; m.len() as usize];
    m.read(0, &mut got).unwrap();
    got == pattern(seed, got.len())
}

/// A raw fetch request (protocol version 2) and the status of the reply.
fn raw_fetch_status(name: &str, id: &[u8; 16]) -> u8 {
    let fd = broker_connect(name);
    send_raw(fd.as_fd(), &broker_request(id), &[]);
    raw_reply(fd.as_fd()).expect("a reply").0
}

// --- the overflow uid ----------------------------------------------------------

/// An exporter in a user namespace where no other user is mapped runs as
/// the overflow uid there, and every unmapped peer shows up as the overflow
/// uid too: its broker must serve none of them. And an importer in such a
/// namespace must not trust a broker that shows up as the overflow uid.
#[test]
fn broker_refuses_overflow_uid() {
    if let Err(why) = can_unshare(libc::CLONE_NEWUSER) {
        hal_core::testing::not_run(&format!(
            "{why}; the overflow-uid checks are covered by hal-core's unit tests"
        ));
        return;
    }
    // 1. The broker side.
    let mut exporter = spawn_unshared("userns-exporter", &[], libc::CLONE_NEWUSER);
    assert_eq!(exporter.expect("euid"), overflow_uid().to_string());
    let text = exporter.expect("export");
    let h = exchange::decode(&text).unwrap();
    let FdSource::Broker { name, .. } = &h.fds else {
        panic!("no broker in the handle")
    };
    assert_eq!(
        raw_fetch_status(name, &h.object_id),
        5,
        "an unmapped peer (the overflow uid, as the exporter sees it) is refused"
    );
    let d = CpuShm::new().host();
    let r = d.import_memory(from_text(&text), &ImportOptions::default());
    assert_eq!(kind(&r), "permission-denied", "{:?}", r.err());
    exporter.tell("done");
    exporter.finish();

    // 2. The importer side: a broker of an unmapped user (here root, seen
    // from inside the namespace as the overflow uid).
    let (alloc, ex) = export_pattern(&d, 3);
    let mut importer = spawn_unshared(
        "userns-importer",
        &[("handle", ex.to_text())],
        libc::CLONE_NEWUSER,
    );
    assert_eq!(importer.expect("euid"), overflow_uid().to_string());
    assert_eq!(importer.expect("import"), "permission-denied");
    importer.finish();
    assert_eq!(alloc.importers().unwrap(), 0);
}

fn userns_exporter() {
    say("euid", nix::unistd::geteuid().as_raw());
    let d = CpuShm::new().host();
    let (_alloc, ex) = export_pattern(&d, 1);
    say("export", ex.to_text());
    assert_eq!(hear(), "done");
}

fn userns_importer() {
    say("euid", nix::unistd::geteuid().as_raw());
    let d = CpuShm::new().host();
    let r = d.import_memory(from_text(&arg("handle")), &ImportOptions::default());
    say("import", kind(&r));
}

// --- leases across pid namespaces ------------------------------------------------

/// An importer in a child pid namespace has another pid there than the one
/// the exporter sees. Its lease must be counted under the exporter's view
/// while it holds the memory, stop counting when it gives it back, and stop
/// counting when it is killed.
#[test]
fn leases_count_importers_in_other_pid_namespaces_cpu() {
    pid_namespace_leases("cpu");
}

#[test]
fn leases_count_importers_in_other_pid_namespaces_mock() {
    pid_namespace_leases("mock");
}

fn pid_namespace_leases(backend: &str) {
    if let Err(why) = can_unshare(libc::CLONE_NEWPID) {
        hal_core::testing::not_run(&why);
        return;
    }
    on_backend!(backend, |d| {
        let (alloc, ex) = export_pattern(&d, 5);
        let mut launcher = spawn_in_new_pid_namespace(
            &format!("pidns-importer:{backend}"),
            &[("handle", ex.to_text())],
        );
        let inner: i32 = launcher.expect("host-pid").parse().unwrap();
        assert_eq!(
            launcher.expect("own-pid"),
            "1",
            "the importer runs as pid 1 of its own namespace"
        );
        for round in 0..3 {
            launcher.tell("import");
            assert_eq!(launcher.expect("import"), "ok", "round {round}");
            assert_eq!(alloc.importers().unwrap(), 1, "round {round}: counted");
            launcher.tell("drop");
            assert_eq!(launcher.expect("drop"), "ok");
            assert_eq!(alloc.importers().unwrap(), 0, "round {round}: given back");
        }
        launcher.tell("import");
        assert_eq!(launcher.expect("import"), "ok");
        assert_eq!(alloc.importers().unwrap(), 1);
        assert!(alloc
            .wait_unleased(Some(std::time::Duration::from_millis(50)))
            .unwrap_err()
            .is_timeout());
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(inner),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        alloc
            .wait_unleased(Some(LONG))
            .expect("the killed importer stops counting");
        assert_eq!(alloc.importers().unwrap(), 0);
        launcher.kill();
        drop((ex, alloc));
    });
}

fn pidns_importer<D: Device>(d: &D) {
    // /proc is the outer namespace's: /proc/self names this process there.
    let outer = std::fs::read_link("/proc/self").unwrap();
    say("host-pid", outer.display());
    say("own-pid", std::process::id());
    let text = arg("handle");
    let mut held = None;
    loop {
        match hear().as_str() {
            "import" => {
                let r = d.import_memory(from_text(&text), &ImportOptions::default());
                let answer = match &r {
                    Ok(m) if holds_pattern(m, 5) => "ok".to_string(),
                    Ok(_) => "wrong bytes".to_string(),
                    Err(e) => e.to_string(),
                };
                held = r.ok();
                say("import", answer);
            }
            "drop" => {
                held = None;
                say("drop", "ok");
            }
            _ => break,
        }
    }
    drop(held);
}

// --- forged creators and the import cache --------------------------------------------

/// A handle that names a live exporter as its creator, with no start time,
/// but is served by another process's broker, is refused; and a handle that
/// names a genuine object but carries another process's descriptors (as a
/// peer can send over a socket) is never cached, so a later import of the
/// genuine handle gets the genuine memory.
#[test]
fn forged_creator_refused_and_cache_not_poisoned() {
    let d = CpuShm::new().host();
    // The genuine exporter is another process; the forger a third.
    let (genuine_alloc, genuine) = export_pattern(&d, 11);
    let genuine_text = genuine.to_text();
    let mut forger = Kid::spawn("forger", &[("handle", genuine_text.clone())]);
    let forged_text = forger.expect("forged");
    let forged = exchange::decode(&forged_text).unwrap();
    assert_eq!(forged.creator_start, 0);
    assert_eq!(forged.object_id, genuine.handle().object_id);

    // 1. Served by the forger, not by the creator it names: refused.
    let r = d.import_memory(from_text(&forged_text), &ImportOptions::default());
    match &r {
        Err(Error::PermissionDenied { reason, .. }) => {
            assert!(reason.contains("not by the exporter"), "{reason}")
        }
        other => panic!("a forged creator was trusted: {:?}", other.as_ref().err()),
    }
    drop(r);

    // 2. The genuine handle with a peer's descriptors attached: the import
    // maps what it was given (nothing tells it apart), but does not cache it.
    let theirs = os::memfd("hal-forged", genuine_alloc.len(), None).unwrap();
    os::add_seals(theirs.as_fd(), os::EXPORT_SEALS).unwrap();
    let mut attached = SharedHandle::from(genuine.handle().clone());
    attached.fds = vec![theirs];
    let planted = d
        .import_memory(attached, &ImportOptions::default())
        .unwrap();
    assert!(!holds_pattern(&planted, 11));
    // The genuine handle, text alone: the genuine bytes, not the planted ones.
    let real = d
        .import_memory(from_text(&genuine_text), &ImportOptions::default())
        .unwrap();
    assert!(holds_pattern(&real, 11), "the import cache was poisoned");
    assert!(!real.same_mapping(&planted));
    drop((planted, real));
    forger.tell("done");
    forger.finish();
    assert_eq!(genuine_alloc.importers().unwrap(), 0);
}

/// Serves its own memory under the genuine object id, in a handle that
/// names the genuine creator with no start time.
fn forger() {
    let genuine: Handle = exchange::decode(&arg("handle")).unwrap();
    let fd: OwnedFd = os::memfd("hal-forger", genuine.size, None).unwrap();
    os::add_seals(fd.as_fd(), os::EXPORT_SEALS).unwrap();
    let mut h = genuine.clone();
    h.creator_start = 0;
    h.fds = FdSource::None;
    let ex = Exported::new(h, vec![fd]).unwrap();
    say("forged", ex.to_text());
    assert_eq!(hear(), "done");
}

// --- recycled pids on an allow-list ------------------------------------------------

/// An allow-list names a pid; that process exits and a new process gets the
/// same pid. The new process must not inherit the access: the exporter
/// pinned the pid to the process that had it.
#[test]
fn allow_list_refuses_a_recycled_pid() {
    if !is_root() {
        hal_core::testing::not_run(
            "choosing the next pid (/proc/sys/kernel/ns_last_pid) needs root",
        );
        return;
    }
    if std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/sys/kernel/ns_last_pid")
        .is_err()
    {
        hal_core::testing::not_run("/proc/sys/kernel/ns_last_pid cannot be written here");
        return;
    }
    let d = CpuShm::new().host();
    let page = d.info().page_size();
    let a = d.allocate(&hal_core::AllocDesc::host(4 * page)).unwrap();
    a.write(0, &pattern(21, a.len() as usize)).unwrap();
    // The first process: allowed, imports, exits.
    let mut first = Kid::spawn("allowed-importer", &[]);
    let pid = first.pid();
    let opts = ExportOptions {
        importers: Importers::Pids(vec![pid]),
        ..ExportOptions::default()
    };
    let ex = d.export_memory(&a, &opts).unwrap();
    first.tell(&ex.to_text());
    assert_eq!(first.expect("import"), "ok");
    first.finish();
    // Start times count clock ticks (10 ms at the usual 100 Hz): a process
    // that started in the same tick as the allowed one could not be told
    // apart. Let a few ticks pass (a guard, not a timing assertion).
    std::thread::sleep(std::time::Duration::from_millis(50));
    // A new process with the same pid (other processes, this binary's other
    // tests among them, may fork between the write and the spawn and take
    // it first: try again until this one gets it, for a while).
    let mut second = None;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).unwrap();
        let kid = Kid::spawn("allowed-importer", &[]);
        if kid.pid() == pid {
            second = Some(kid);
            break;
        }
        kid.kill();
    }
    let Some(mut second) = second else {
        hal_core::testing::not_run(&format!(
            "pid {pid} was never handed out again (a busy machine)"
        ));
        return;
    };
    second.tell(&ex.to_text());
    assert_eq!(
        second.expect("import"),
        "permission-denied",
        "a recycled pid inherited the allow-list"
    );
    second.finish();
    assert_eq!(a.importers().unwrap(), 0);
}

fn allowed_importer() {
    let d = CpuShm::new().host();
    let text = hear();
    let r = d.import_memory(from_text(&text), &ImportOptions::default());
    let answer = match &r {
        Ok(m) if holds_pattern(m, 21) => "ok",
        Ok(_) => "wrong bytes",
        Err(_) => kind(&r),
    };
    say("import", answer);
}
