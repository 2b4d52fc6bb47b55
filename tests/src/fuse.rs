//! A hostile FUSE file system for attack tests: one regular file, `f`,
//! whose daemon answers its own process at once and holds every request of
//! any other process (an `open`, a `getattr`, the `flush` of a `close`)
//! unanswered until the test lets it go.
//!
//! A process that sends such a request waits for the answer, and for the
//! `flush` of a `close` no signal ends that wait: this is what a hostile
//! user can do to a process that opens, `fstat`s or closes a descriptor
//! that user chose. A test mounts the file system in a child process of
//! its own (root is needed, and `/dev/fuse`), hands the file to the
//! process under attack the way an attacker would, checks that the victim
//! still works while the requests are held, and reads which processes sent
//! what ([`Fuse::requests_from`]); [`Fuse::stop`] (or dropping it) answers
//! every held request with `EIO` and aborts the connection, so that nothing
//! waits after the test, fixed code or not.
//!
//! The kernel's protocol is `include/uapi/linux/fuse.h`: a request starts
//! with `fuse_in_header` (length, opcode, unique, node id, uid, gid, pid of
//! the sending thread), a reply with `fuse_out_header` (length, error,
//! unique).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// `FUSE_LOOKUP`.
pub const LOOKUP: u32 = 1;
/// `FUSE_FORGET` (no reply).
pub const FORGET: u32 = 2;
/// `FUSE_GETATTR`: an `fstat` or `stat` that needs the attributes.
pub const GETATTR: u32 = 3;
/// `FUSE_OPEN`.
pub const OPEN: u32 = 14;
/// `FUSE_RELEASE`: the last reference to an open file went.
pub const RELEASE: u32 = 18;
/// `FUSE_FLUSH`: sent by every `close(2)` of a descriptor.
pub const FLUSH: u32 = 25;
/// `FUSE_INIT`.
pub const INIT: u32 = 26;
/// `FUSE_INTERRUPT` (no reply).
pub const INTERRUPT: u32 = 36;
/// `FUSE_BATCH_FORGET` (no reply).
pub const BATCH_FORGET: u32 = 42;

/// Bytes of `fuse_in_header`.
const IN_HEADER: usize = 40;
/// The root's node id.
const ROOT: u64 = 1;
/// The file's node id (and inode number).
const FILE: u64 = 2;
/// The file's name in the root.
pub const FILE_NAME: &str = "f";
/// Bytes of the file.
const FILE_SIZE: u64 = 4096;

/// A reply: `fuse_out_header`, then `body`.
fn reply(unique: u64, error: i32, body: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(16 + body.len());
    r.extend_from_slice(&((16 + body.len()) as u32).to_le_bytes());
    r.extend_from_slice(&error.to_le_bytes());
    r.extend_from_slice(&unique.to_le_bytes());
    r.extend_from_slice(body);
    r
}

/// `fuse_init_out` of protocol 7.31, asking for nothing.
fn init_body() -> Vec<u8> {
    let mut body = vec![0u8; 64];
    body[0..4].copy_from_slice(&7u32.to_le_bytes());
    body[4..8].copy_from_slice(&31u32.to_le_bytes());
    body[20..24].copy_from_slice(&4096u32.to_le_bytes()); // max_write
    body[24..28].copy_from_slice(&1u32.to_le_bytes()); // time_gran
    body
}

/// `fuse_attr` of node `node` (88 bytes).
fn attr(node: u64) -> Vec<u8> {
    let (mode, size, nlink) = if node == ROOT {
        (libc::S_IFDIR | 0o755, 0, 2)
    } else {
        (libc::S_IFREG | 0o666, FILE_SIZE, 1)
    };
    let mut a = Vec::with_capacity(88);
    a.extend_from_slice(&node.to_le_bytes()); // ino
    a.extend_from_slice(&size.to_le_bytes()); // size
    a.extend_from_slice(&(size / 512).to_le_bytes()); // blocks
    a.extend_from_slice(&[0u8; 24]); // atime, mtime, ctime
    a.extend_from_slice(&[0u8; 12]); // their nanoseconds
    a.extend_from_slice(&mode.to_le_bytes());
    a.extend_from_slice(&(nlink as u32).to_le_bytes());
    a.extend_from_slice(&[0u8; 8]); // uid, gid: root
    a.extend_from_slice(&0u32.to_le_bytes()); // rdev
    a.extend_from_slice(&4096u32.to_le_bytes()); // blksize
    a.extend_from_slice(&0u32.to_le_bytes()); // flags
    a
}

/// `fuse_entry_out` of the file: valid for an hour, so that the kernel
/// asks nothing again meanwhile.
fn entry_body() -> Vec<u8> {
    let mut e = Vec::with_capacity(128);
    e.extend_from_slice(&FILE.to_le_bytes()); // nodeid
    e.extend_from_slice(&0u64.to_le_bytes()); // generation
    e.extend_from_slice(&3600u64.to_le_bytes()); // entry_valid
    e.extend_from_slice(&3600u64.to_le_bytes()); // attr_valid
    e.extend_from_slice(&[0u8; 8]); // their nanoseconds
    e.extend_from_slice(&attr(FILE));
    e
}

/// `fuse_attr_out` of node `node`, valid for an hour.
fn attr_body(node: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(104);
    b.extend_from_slice(&3600u64.to_le_bytes());
    b.extend_from_slice(&[0u8; 8]);
    b.extend_from_slice(&attr(node));
    b
}

/// `fuse_open_out`: file handle 1, no flags.
fn open_body() -> Vec<u8> {
    let mut b = vec![0u8; 16];
    b[0..8].copy_from_slice(&1u64.to_le_bytes());
    b
}

/// The process (thread group) of thread `tid`, or `tid` when it is gone.
fn process_of(tid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(tid)
}

/// What the daemon shares with the [`Fuse`] that started it.
#[derive(Default)]
struct State {
    /// Every request of another process: (its pid, opcode).
    seen: Vec<(u32, u32)>,
    /// Requests held unanswered: their unique numbers.
    held: VecDeque<u64>,
}

/// A mounted hostile FUSE file system, served by a thread of this process.
pub struct Fuse {
    /// The mount's root, opened `O_PATH`.
    root: Option<OwnedFd>,
    /// The file `f`, opened read-write by this process.
    file: Option<File>,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    daemon: Option<JoinHandle<()>>,
}

impl Fuse {
    /// Mount the file system at the directory `dir` in a mount namespace of
    /// this process's own (the calling thread's, which this process must
    /// use for nothing else: call it first in a child process), start its
    /// daemon, and open `f`. An error saying why when this process may not
    /// mount (not root, no `/dev/fuse`).
    pub fn mount(dir: &str) -> Result<Fuse, String> {
        // SAFETY: unshare takes flags and touches no memory.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            return Err(format!("unshare: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: the strings are NUL-terminated and live for the call; a
        // null source, type and data are allowed for a propagation change.
        let r = unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
        if r != 0 {
            return Err(format!(
                "private mounts: {}",
                std::io::Error::last_os_error()
            ));
        }
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .map_err(|e| format!("/dev/fuse: {e}"))?;
        let options = format!("fd={},rootmode=40000,user_id=0,group_id=0", dev.as_raw_fd());
        let target = std::ffi::CString::new(dir).map_err(|e| e.to_string())?;
        let options = std::ffi::CString::new(options).map_err(|e| e.to_string())?;
        // SAFETY: the strings are NUL-terminated and live for the call.
        let r = unsafe {
            libc::mount(
                c"hal-test".as_ptr(),
                target.as_ptr(),
                c"fuse".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                options.as_ptr().cast(),
            )
        };
        if r != 0 {
            return Err(format!("mount fuse: {}", std::io::Error::last_os_error()));
        }
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let daemon = {
            let (state, stop) = (Arc::clone(&state), Arc::clone(&stop));
            std::thread::spawn(move || serve(dev, &state, &stop))
        };
        let mut fuse = Fuse {
            root: None,
            file: None,
            state,
            stop,
            daemon: Some(daemon),
        };
        // SAFETY: `target` is NUL-terminated; an O_PATH open sends the
        // daemon nothing.
        let fd = unsafe { libc::open(target.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(format!("open: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: open returned a new descriptor nothing else owns.
        fuse.root = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("{dir}/{FILE_NAME}"))
            .map_err(|e| format!("opening the FUSE file: {e}"))?;
        fuse.file = Some(file);
        Ok(fuse)
    }

    /// The mount's root directory, opened `O_PATH`.
    pub fn root(&self) -> &OwnedFd {
        self.root.as_ref().expect("mounted")
    }

    /// The file `f`, opened read-write by this process: the descriptor to
    /// hand to the victim.
    pub fn file(&self) -> &File {
        self.file.as_ref().expect("mounted")
    }

    /// The opcodes of the requests process `pid` sent (each sending thread
    /// counted under its process).
    pub fn requests_from(&self, pid: u32) -> Vec<u32> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state
            .seen
            .iter()
            .filter(|(p, _)| *p == pid)
            .map(|&(_, op)| op)
            .collect()
    }

    /// Every request of another process than this one: (pid, opcode).
    pub fn requests(&self) -> Vec<(u32, u32)> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.seen.clone()
    }

    /// How many requests are held unanswered now.
    pub fn held(&self) -> usize {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.held.len()
    }

    /// Answer every held request with `EIO`, stop the daemon and abort the
    /// connection: from then on every request fails at once.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(d) = self.daemon.take() {
            let _ = d.join();
        }
    }
}

impl Drop for Fuse {
    fn drop(&mut self) {
        self.stop();
        // The connection is aborted: closing the file waits for nothing.
        drop(self.file.take());
        drop(self.root.take());
    }
}

/// The daemon: answer `INIT`, and this process's own requests, at once;
/// hold every other process's request (but `RELEASE`, which nobody waits
/// for) until `stop`, then answer the held ones with `EIO` and return,
/// closing `/dev/fuse`, which aborts the connection.
fn serve(dev: File, state: &Mutex<State>, stop: &AtomicBool) {
    let me = std::process::id();
    let mut dev = dev;
    let mut buf = vec![0u8; (1 << 20) + 4096];
    while !stop.load(Ordering::SeqCst) {
        let mut poll = libc::pollfd {
            fd: dev.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `poll` is one valid pollfd, alive for the call.
        let ready = unsafe { libc::poll(&mut poll, 1, 50) };
        if ready <= 0 {
            continue;
        }
        let n = match dev.read(&mut buf) {
            Ok(n) if n >= IN_HEADER => n,
            Ok(_) => break,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let word = |at: usize| u32::from_le_bytes(buf[at..at + 4].try_into().unwrap());
        let opcode = word(4);
        let unique = u64::from_le_bytes(buf[8..16].try_into().unwrap());
        let node = u64::from_le_bytes(buf[16..24].try_into().unwrap());
        let pid = process_of(word(32));
        if matches!(opcode, FORGET | BATCH_FORGET | INTERRUPT) {
            continue;
        }
        let mine = pid == me || opcode == INIT || opcode == RELEASE;
        if !mine {
            let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
            st.seen.push((pid, opcode));
            st.held.push_back(unique);
            continue;
        }
        let body = &buf[IN_HEADER..n];
        let answer = match opcode {
            INIT => reply(unique, 0, &init_body()),
            LOOKUP if node == ROOT && body.split(|&b| b == 0).next() == Some(b"f") => {
                reply(unique, 0, &entry_body())
            }
            LOOKUP => reply(unique, -libc::ENOENT, &[]),
            GETATTR => reply(unique, 0, &attr_body(node)),
            OPEN => reply(unique, 0, &open_body()),
            RELEASE | FLUSH => reply(unique, 0, &[]),
            _ => reply(unique, -libc::ENOSYS, &[]),
        };
        let _ = dev.write(&answer);
    }
    let held: Vec<u64> = {
        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
        st.held.drain(..).collect()
    };
    for unique in held {
        let _ = dev.write(&reply(unique, -libc::EIO, &[]));
    }
    // Dropping `dev` closes this connection's only device descriptor: the
    // kernel aborts the connection.
}
