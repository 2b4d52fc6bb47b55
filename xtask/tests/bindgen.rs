//! `cargo xtask bindgen` on a machine without libclang answers one line
//! saying what to install, with a failing exit code, never a panic.

use std::process::Command;

#[test]
fn without_libclang_bindgen_says_what_to_install_in_one_line() {
    // An empty folder as the only place to look: libclang is not found
    // here even where it is installed (LIBCLANG_PATH replaces the search).
    let empty = tempfile::tempdir().unwrap();
    for args in [&["bindgen"][..], &["bindgen", "--check"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(args)
            .env("LIBCLANG_PATH", empty.path())
            // A panic would print its backtrace: the test would see it.
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(
            stderr.starts_with("xtask bindgen: libclang is needed: apt-get install libclang-dev"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing written");
    }
    assert!(
        std::fs::read_dir(empty.path()).unwrap().next().is_none(),
        "nothing left behind"
    );
}
