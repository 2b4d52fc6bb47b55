//! Two hosts on one machine, for tests of processes that talk over the
//! network as if on two computers.
//!
//! [`Hosts::new`] makes two hosts, each a network namespace and a mount
//! namespace of its own, joined by a veth pair:
//!
//! - host `i` has the address [`Hosts::address`]`(i)` (`192.0.2.1/24` and
//!   `192.0.2.2/24`, from TEST-NET-1, RFC 5737) on its end of the pair,
//!   [`Hosts::interface`]`(i)`, and its own loopback, up;
//! - each host has a fresh tmpfs on `/dev/shm`, shared by the processes of
//!   that host and by no one else, and its own sysfs on `/sys`, so that
//!   `/sys/class/net` lists the host's interfaces (`lo` and its end of the
//!   pair), as a program that looks for network devices there expects.
//!
//! [`Hosts::spawn`] starts a real child process of the test binary on a
//! host, through [`ChildProc`] (the child side needs nothing special);
//! [`Hosts::command`] runs any program there.
//!
//! The namespaces have no global names: each host is held by an *anchor*,
//! a `cat` child process that made the namespaces (`unshare(2)` in a
//! `pre_exec` hook) and then waits on its standard input, and by
//! descriptors of those namespaces that this process holds. A process is
//! placed on a host with `setns(2)` on them. Interface names are derived
//! from this process's pid and a counter, so parallel tests, in this
//! process or in other test binaries, never meet; and the pair is made
//! inside host 0's namespace with its peer sent straight to host 1's, so
//! its names never appear in the namespace of the test process at all.
//! Addresses are the same for every pair of hosts: no two pairs share a
//! namespace.
//!
//! **Needs**: root (`CAP_SYS_ADMIN` for the namespaces and mounts,
//! `CAP_NET_ADMIN` for the veth pair), the `veth` module, and the `ip`
//! program of iproute2 and `cat`. Where the kernel or the machine refuses,
//! [`Hosts::new`] answers [`HostsError::Refused`] or
//! [`HostsError::MissingProgram`], which a test turns into its `NOT RUN`
//! report ([`Hosts::new_or_not_run`] does it; with `HAL_TESTS_STRICT=1`
//! that is a failure).
//!
//! **Leaves**: nothing. Dropping [`Hosts`] kills and reaps the anchors and
//! closes the descriptors; the namespaces, and with them the veth pair and
//! the tmpfs of each host, go with the last process that is in them. Drop
//! (or finish) the children started on the hosts first: a child still
//! running keeps its host's namespaces alive until it is reaped. A test
//! process killed before it drops its hosts leaves nothing either: the
//! anchors see their standard input close and exit, its descriptors close
//! with it, and the children of [`ChildProc`] lose their standard input too.
//!
//! ```no_run
//! # fn test() {
//! let Some(hosts) = hal_tests::hosts::Hosts::new_or_not_run() else {
//!     return;
//! };
//! let mut server = hosts.spawn(0, "roles", "server", &[]);
//! let port = server.expect("listening");
//! let client = hosts.spawn(
//!     1,
//!     "roles",
//!     "client",
//!     &[("to", format!("{}:{port}", hosts.address(0)))],
//! );
//! client.finish();
//! server.finish();
//! # }
//! ```

use std::ffi::{CStr, CString, OsStr};
use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::process::ChildProc;

/// The addresses of host 0 and host 1 (TEST-NET-1).
pub const ADDRESSES: [Ipv4Addr; 2] = [Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2)];

/// The prefix length of [`ADDRESSES`]: both are on one `/24`.
pub const PREFIX_LEN: u8 = 24;

/// Counts the pairs of hosts this process made, for unique interface names.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Why two hosts could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum HostsError {
    /// A program the hosts need is not installed.
    MissingProgram {
        /// The program, looked for in `PATH`.
        program: &'static str,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// The kernel or the machine refuses what the hosts need: not root, no
    /// `CAP_SYS_ADMIN` or `CAP_NET_ADMIN`, no `veth` module, a seccomp
    /// profile that forbids namespaces.
    Refused {
        /// What was refused.
        what: String,
        /// The kernel's or the program's answer.
        why: String,
    },
    /// A step failed that should not fail where the others worked.
    Failed {
        /// The step.
        what: String,
        /// Its error.
        why: String,
    },
}

impl HostsError {
    /// True when the machine cannot host the test ([`HostsError::Refused`],
    /// [`HostsError::MissingProgram`]): a test reports that it did not
    /// run rather than fail.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, HostsError::Failed { .. })
    }
}

impl fmt::Display for HostsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostsError::MissingProgram { program, package } => write!(
                f,
                "two hosts need the `{program}` program, which is not in PATH: install the \
                 `{package}` package"
            ),
            HostsError::Refused { what, why } => write!(
                f,
                "two hosts cannot be made here: {what} was refused ({why}); run as root with \
                 CAP_SYS_ADMIN and CAP_NET_ADMIN, namespaces allowed and the veth module available"
            ),
            HostsError::Failed { what, why } => write!(f, "making two hosts: {what} failed: {why}"),
        }
    }
}

impl std::error::Error for HostsError {}

/// One host: its anchor process and descriptors of its namespaces.
#[derive(Debug)]
struct Host {
    anchor: Child,
    net: Arc<OwnedFd>,
    mnt: Arc<OwnedFd>,
    interface: String,
}

/// Two hosts joined by a veth pair; see the [module](self) documentation.
/// Dropping it removes both.
#[derive(Debug)]
pub struct Hosts {
    hosts: Vec<Host>,
    ip: PathBuf,
}

impl Hosts {
    /// Make two hosts, each with a network namespace and a mount namespace
    /// of its own, joined by a veth pair, addressed and up.
    ///
    /// # Errors
    ///
    /// [`HostsError::MissingProgram`] without `ip` or `cat`,
    /// [`HostsError::Refused`] where the kernel refuses the namespaces,
    /// the mounts or the veth pair ([`HostsError::is_refusal`]), and
    /// [`HostsError::Failed`] for a step that failed where the others
    /// worked.
    pub fn new() -> Result<Hosts, HostsError> {
        let cat = find_program("cat").ok_or(HostsError::MissingProgram {
            program: "cat",
            package: "coreutils",
        })?;
        let ip = find_program("ip").ok_or(HostsError::MissingProgram {
            program: "ip",
            package: "iproute2",
        })?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff;
        let pid = std::process::id();
        // At most 2 + 7 + 1 + 4 + 1 = 15 characters (pids stay below 2^22).
        let names = [format!("hv{pid:x}-{n:x}a"), format!("hv{pid:x}-{n:x}b")];
        let mut hosts = Hosts {
            hosts: Vec::with_capacity(2),
            ip,
        };
        // Once in `hosts`, a host is removed by its drop, whatever fails next.
        for name in names {
            hosts.hosts.push(Host::make(&cat, name)?);
        }
        let (a, b) = (
            hosts.interface(0).to_string(),
            hosts.interface(1).to_string(),
        );
        let peer_ns = hosts.anchor_pid(1).to_string();
        hosts
            .ip(
                0,
                &[
                    "link", "add", &a, "type", "veth", "peer", "name", &b, "netns", &peer_ns,
                ],
            )
            .map_err(|(what, why)| HostsError::Refused { what, why })?;
        for (i, address) in ADDRESSES.iter().enumerate() {
            let address = format!("{address}/{PREFIX_LEN}");
            let interface = hosts.interface(i).to_string();
            for args in [
                &["addr", "add", &address, "dev", &interface][..],
                &["link", "set", &interface, "up"],
                &["link", "set", "lo", "up"],
            ] {
                hosts
                    .ip(i, args)
                    .map_err(|(what, why)| HostsError::Failed { what, why })?;
            }
        }
        hosts.wait_until_up()?;
        Ok(hosts)
    }

    /// Wait until both ends of the veth pair are up (`operstate`): the
    /// second end comes up a moment after `ip link set` returns, and a
    /// program that lists its devices before (UCX does, at start) would
    /// not see it.
    fn wait_until_up(&self) -> Result<(), HostsError> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for i in 0..2 {
            let state = PathBuf::from(format!(
                "/proc/{}/root/sys/class/net/{}/operstate",
                self.anchor_pid(i),
                self.interface(i)
            ));
            loop {
                let now = std::fs::read_to_string(&state).unwrap_or_default();
                if now.trim() == "up" {
                    break;
                }
                if std::time::Instant::now() >= deadline {
                    return Err(HostsError::Failed {
                        what: format!("waiting for {} to come up", self.interface(i)),
                        why: format!("{} says {:?} after 10 s", state.display(), now.trim()),
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        Ok(())
    }

    /// [`Hosts::new`] for a test: where the machine refuses, report that
    /// the test did not run ([`hal_core::testing::not_run`]) and answer
    /// `None`, so that the test returns.
    ///
    /// # Panics
    ///
    /// With `HAL_TESTS_STRICT=1` where the machine refuses, and on a
    /// [`HostsError::Failed`]: the test fails, with the error.
    #[track_caller]
    pub fn new_or_not_run() -> Option<Hosts> {
        match Hosts::new() {
            Ok(hosts) => Some(hosts),
            Err(e) if e.is_refusal() => {
                hal_core::testing::not_run(&e.to_string());
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// The address of host `i` (0 or 1) on the veth pair.
    ///
    /// # Panics
    ///
    /// When `i` is neither 0 nor 1.
    #[track_caller]
    pub fn address(&self, i: usize) -> Ipv4Addr {
        self.host(i);
        ADDRESSES[i]
    }

    /// The name of host `i`'s end of the veth pair, inside host `i`.
    ///
    /// # Panics
    ///
    /// When `i` is neither 0 nor 1.
    #[track_caller]
    pub fn interface(&self, i: usize) -> &str {
        &self.host(i).interface
    }

    /// The pid of host `i`'s anchor, the process that made its namespaces
    /// and lives as long as this value: `/proc/PID/ns/net` and
    /// `/proc/PID/ns/mnt` are the host's namespaces.
    ///
    /// # Panics
    ///
    /// When `i` is neither 0 nor 1.
    #[track_caller]
    pub fn anchor_pid(&self, i: usize) -> u32 {
        self.host(i).anchor.id()
    }

    /// Host `i`'s `/dev/shm` as the test process sees it (through its
    /// anchor's root, `/proc/PID/root/dev/shm`).
    ///
    /// # Panics
    ///
    /// When `i` is neither 0 nor 1.
    #[track_caller]
    pub fn dev_shm(&self, i: usize) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root/dev/shm", self.anchor_pid(i)))
    }

    /// Start this test binary's `<test_module>::__child` test on host `i`
    /// with `role` and `args`, as [`ChildProc::spawn`] does.
    ///
    /// # Panics
    ///
    /// When `i` is neither 0 nor 1, and when the child cannot be started.
    #[track_caller]
    pub fn spawn(
        &self,
        i: usize,
        test_module: &str,
        role: &str,
        args: &[(&str, String)],
    ) -> ChildProc {
        self.host(i);
        ChildProc::spawn_with(test_module, role, args, |cmd| self.place(i, cmd))
    }

    /// A command that runs `program` on host `i`.
    ///
    /// # Panics
    ///
    /// When `i` is neither 0 nor 1.
    #[track_caller]
    pub fn command(&self, i: usize, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        self.place(i, &mut cmd);
        cmd
    }

    /// Make `cmd` start its process on host `i`: in the host's network
    /// and mount namespaces, in the directory it would have started in (its
    /// own, or this process's). The command holds the namespaces until it
    /// is dropped, so it may outlive these hosts.
    ///
    /// # Panics
    ///
    /// When `i` is neither 0 nor 1.
    #[track_caller]
    pub fn place(&self, i: usize, cmd: &mut Command) {
        let host = self.host(i);
        let net = Arc::clone(&host.net);
        let mnt = Arc::clone(&host.mnt);
        let dir = cmd
            .get_current_dir()
            .map(Path::to_path_buf)
            .or_else(|| std::env::current_dir().ok())
            .and_then(|d| CString::new(d.into_os_string().as_bytes()).ok());
        // SAFETY: the hook runs in the forked child before exec; `enter`
        // makes only async-signal-safe system calls and allocates nothing.
        unsafe {
            cmd.pre_exec(move || enter(net.as_raw_fd(), mnt.as_raw_fd(), dir.as_deref()));
        }
    }

    #[track_caller]
    fn host(&self, i: usize) -> &Host {
        self.hosts
            .get(i)
            .unwrap_or_else(|| panic!("there are two hosts, 0 and 1, not {i}"))
    }

    /// Run `ip ARGS` on host `i`; the command line and its error on failure.
    fn ip(&self, i: usize, args: &[&str]) -> Result<(), (String, String)> {
        let line = format!("`ip {}` on host {i}", args.join(" "));
        let out = self
            .command(i, &self.ip)
            .args(args)
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => {
                let why = format!(
                    "{}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                Err((line, why))
            }
            Err(e) => Err((line, e.to_string())),
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for host in &mut self.hosts {
            let _ = host.anchor.kill();
            let _ = host.anchor.wait();
        }
        // The descriptors close with `self.hosts`.
    }
}

impl Host {
    /// Start an anchor in new network and mount namespaces, and open them.
    fn make(cat: &Path, interface: String) -> Result<Host, HostsError> {
        let mut cmd = Command::new(cat);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: the hook runs in the forked child before exec;
        // `make_namespaces` makes only async-signal-safe system calls and
        // allocates nothing.
        unsafe {
            cmd.pre_exec(make_namespaces);
        }
        let mut anchor = cmd.spawn().map_err(|e| HostsError::Refused {
            what: "making a network and a mount namespace (unshare), with a tmpfs on /dev/shm \
                   and a sysfs on /sys"
                .into(),
            why: e.to_string(),
        })?;
        let open = |ns: &str| {
            let path = format!("/proc/{}/ns/{ns}", anchor.id());
            std::fs::File::open(&path)
                .map(|f| Arc::new(OwnedFd::from(f)))
                .map_err(|e| HostsError::Failed {
                    what: format!("opening {path}"),
                    why: e.to_string(),
                })
        };
        match (open("net"), open("mnt")) {
            (Ok(net), Ok(mnt)) => Ok(Host {
                anchor,
                net,
                mnt,
                interface,
            }),
            (Err(e), _) | (_, Err(e)) => {
                let _ = anchor.kill();
                let _ = anchor.wait();
                Err(e)
            }
        }
    }
}

/// `Ok` when a system call answered 0, else its `errno`.
fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// In an anchor, before exec: new network and mount namespaces, mounts
/// private, a fresh tmpfs on `/dev/shm` and this namespace's sysfs on
/// `/sys`.
fn make_namespaces() -> io::Result<()> {
    let none = std::ptr::null();
    // SAFETY: unshare(2) and mount(2) with NUL-terminated static strings or
    // null pointers where the call allows them; no memory of ours changes.
    unsafe {
        check(libc::unshare(libc::CLONE_NEWNET | libc::CLONE_NEWNS))?;
        check(libc::mount(
            none,
            c"/".as_ptr(),
            none,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            c"tmpfs".as_ptr(),
            c"/dev/shm".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"mode=1777".as_ptr().cast(),
        ))?;
        check(libc::mount(
            c"sysfs".as_ptr(),
            c"/sys".as_ptr(),
            c"sysfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ))
    }
}

/// In a child, before exec: join a host's namespaces, then go back to the
/// directory `dir` (joining a mount namespace moves to its root).
fn enter(net: libc::c_int, mnt: libc::c_int, dir: Option<&CStr>) -> io::Result<()> {
    // SAFETY: setns(2) on descriptors the caller holds open, chdir(2) on a
    // NUL-terminated string; no memory of ours changes.
    unsafe {
        check(libc::setns(net, libc::CLONE_NEWNET))?;
        check(libc::setns(mnt, libc::CLONE_NEWNS))?;
        if let Some(dir) = dir {
            check(libc::chdir(dir.as_ptr()))?;
        }
    }
    Ok(())
}

/// `name` in a directory of `PATH` or of the system's own (`/usr/sbin`, where
/// Debian installs `ip`, is not in every user's `PATH`), if there.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
