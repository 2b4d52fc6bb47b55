//! What the tests of this crate share: the stand-in runtime, a backend on
//! it, and re-running a test in a child process.

#![allow(dead_code)]

use std::process::{Command, Output};

use hal_ascend::AscendBackend;

/// The stand-in runtime cargo built for this test.
pub fn standin() -> std::path::PathBuf {
    hal_mock_libascendcl::built_library()
}

/// A backend on the stand-in.
pub fn backend() -> AscendBackend {
    AscendBackend::with_library(standin())
}

/// The variable that tells a re-run test which role it plays.
pub const ROLE: &str = "HAL_ASCEND_TEST_ROLE";

/// This test's role in a child, if it is one.
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// Re-run test `name` alone in a child with `env`, and its output.
pub fn child(name: &str, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([name, "--exact", "--nocapture", "--test-threads=1"]);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Panic with the child's output unless it succeeded having run its one
/// test (a name that matched nothing would run none, and pass).
pub fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(" 1 passed;"),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How many times the stand-in ran `symbol` in this process.
pub fn calls(symbol: &str) -> u64 {
    let name = std::ffi::CString::new(symbol).unwrap();
    // SAFETY: the stand-in is loaded (by the backend); halStandinCalls is
    // its counter, (const char*) -> uint64_t.
    unsafe {
        let lib = libloading::Library::new(standin()).unwrap();
        let f = lib
            .get::<unsafe extern "C" fn(*const std::ffi::c_char) -> u64>(b"halStandinCalls")
            .unwrap();
        f(name.as_ptr())
    }
}

/// `aclrtSetDevice(id)` on the calling thread, straight to the stand-in:
/// its `aclError` (0 on success).
pub fn set_device(id: i32) -> i32 {
    // SAFETY: the stand-in is loaded (by the backend); the symbol is
    // aclrtSetDevice(int32_t) -> aclError.
    unsafe {
        let lib = libloading::Library::new(standin()).unwrap();
        let f = lib
            .get::<unsafe extern "C" fn(i32) -> i32>(b"aclrtSetDevice")
            .unwrap();
        f(id)
    }
}

/// Run `body` alone in a child re-running test `name` (where the stand-in's
/// counters are the body's own), and require it to finish: `body` prints
/// `@done` last.
pub fn alone_in_a_child(name: &str, body: fn()) {
    const ALONE: &str = "alone";
    if role().as_deref() == Some(ALONE) {
        body();
        println!("@done");
        return;
    }
    let out = child(name, &[(ROLE, ALONE)]);
    assert_ok(&out, name);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("@done"),
        "{name}: the child never finished"
    );
}
