//! `halctl export` and `halctl import` between users (root and uid 65534,
//! both ways, and two uids that are neither), as real processes: an export to anyone reaches the
//! other user, one to its own user's processes does not (and says what
//! would work), and an import of another user's export takes its
//! descriptors once `--trust-uid` names that user.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_halctl");
const NOBODY: u32 = 65534;

/// A running `halctl export`, as `uid`; killed when dropped.
struct Exporter {
    child: Child,
    handle: String,
}

impl Exporter {
    fn start(uid: u32, args: &[&str]) -> Exporter {
        let mut cmd = Command::new(BIN);
        cmd.arg("export")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if uid != 0 {
            cmd.uid(uid).gid(uid);
        }
        let mut child = cmd.spawn().expect("spawn halctl export");
        let mut handle = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut handle)
            .expect("the handle line");
        assert!(!handle.trim().is_empty(), "the export printed nothing");
        Exporter {
            child,
            handle: handle.trim().to_owned(),
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `halctl import HANDLE args...` as `uid`: its exit code and stderr.
fn import(uid: u32, handle: &str, args: &[&str]) -> (i32, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("import").arg(handle).args(args);
    if uid != 0 {
        cmd.uid(uid).gid(uid);
    }
    let out = cmd.output().expect("run halctl import");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn export_to_anyone_reaches_another_user_both_ways() {
    if !nix::unistd::geteuid().is_root() {
        hal::testing::not_run("running halctl as another user needs root");
        return;
    }
    let common = ["--backend", "cpu-shm", "--size", "8K"];
    // Root exports to anyone: uid 65534 imports it.
    let open = Exporter::start(
        0,
        &[&common[..], &["--fill", "0x5a", "--importers", "anyone"]].concat(),
    );
    let (code, err) = import(NOBODY, &open.handle, &["--expect", "0x5a"]);
    assert_eq!(
        code, 0,
        "another user's import of an export to anyone: {err}"
    );
    // Root exports to its own user's processes: refused, with what works.
    let own = Exporter::start(0, &[&common[..], &["--importers", "same-user"]].concat());
    let (code, err) = import(NOBODY, &own.handle, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--importers anyone"), "{err}");
    // Uid 65534 exports to anyone: root refuses its broker until it trusts
    // that user, then imports.
    let theirs = Exporter::start(
        NOBODY,
        &[&common[..], &["--fill", "0x33", "--importers", "anyone"]].concat(),
    );
    let (code, err) = import(0, &theirs.handle, &["--expect", "0x33"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--trust-uid 65534"), "{err}");
    let (code, err) = import(
        0,
        &theirs.handle,
        &["--expect", "0x33", "--trust-uid", "65534"],
    );
    assert_eq!(code, 0, "a trusted user's export: {err}");
    // Two users that are neither root (uids of no account): the same.
    let (a, b) = (40_011, 40_012);
    let between = Exporter::start(
        a,
        &[&common[..], &["--fill", "0x44", "--importers", "anyone"]].concat(),
    );
    let (code, err) = import(b, &between.handle, &["--expect", "0x44"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--trust-uid 40011"), "{err}");
    let trusted = ["--expect", "0x44", "--trust-uid", "40011"];
    let (code, err) = import(b, &between.handle, &trusted);
    assert_eq!(code, 0, "{err}");
    let own = Exporter::start(a, &[&common[..], &["--importers", "same-user"]].concat());
    let (code, err) = import(b, &own.handle, &["--trust-uid", "40011"]);
    assert_eq!(code, 1, "an export to its own user's processes: {err}");
    assert!(err.contains("--importers anyone"), "{err}");
}
