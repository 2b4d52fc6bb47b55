//! What the test suites of this workspace, and of a backend built on it,
//! share about a test that cannot run where it runs.
//!
//! A test that needs what the machine lacks (root, user namespaces, a
//! writable `/proc/sys/kernel/ns_last_pid`) says why with [`not_run`] and
//! returns. In a normal run that is a line on standard error; with
//! `HAL_TESTS_STRICT=1` in the environment (what CI sets: it runs as root,
//! where every such test can run) it fails the test instead, so that no test
//! counts as passed without having run its check.
//!
//! ```
//! fn needs_root() {
//!     // SAFETY: geteuid(2) has no preconditions and cannot fail.
//!     if unsafe { libc::geteuid() } != 0 {
//!         hal_core::testing::not_run("this test needs root to act as another uid");
//!         return;
//!     }
//!     // ... the check ...
//! }
//! # if !hal_core::testing::strict() { needs_root(); }
//! ```

/// The environment variable that turns a test that cannot run into a
/// failure: `HAL_TESTS_STRICT=1`.
pub const STRICT_VAR: &str = "HAL_TESTS_STRICT";

/// The text a test that did not run prints, at the start of its line.
pub const NOT_RUN: &str = "NOT RUN";

/// True when `HAL_TESTS_STRICT=1`: every test must run its check.
pub fn strict() -> bool {
    std::env::var_os(STRICT_VAR).is_some_and(|v| v == "1")
}

/// Report that the calling test cannot run here, `why`; the caller then
/// returns without its check.
///
/// # Panics
///
/// With `HAL_TESTS_STRICT=1`, always: the test fails, naming `why`.
#[track_caller]
pub fn not_run(why: &str) {
    if strict() {
        panic!(
            "this test cannot run here ({why}), and {STRICT_VAR}=1 requires every test to run: \
             run it where it can (as root, with namespaces allowed), or unset {STRICT_VAR}"
        );
    }
    eprintln!("{NOT_RUN}: {why}");
}

/// The flag that runs an ignored test: a child entry point is an ignored
/// test (`#[ignore = "child entry point: run by its parent"]`), so that a
/// normal run does not count it as passed, and its parent names it.
pub const INCLUDE_IGNORED: &str = "--include-ignored";

/// A command that runs this test binary's test `entry` alone, by exact
/// name, ignored or not, with its output not captured: how a test starts
/// one of its child processes. The caller adds the child's environment and
/// standard streams.
///
/// # Panics
///
/// When the path of the running executable cannot be read (`/proc` absent).
pub fn child(entry: &str) -> std::process::Command {
    let exe = std::env::current_exe().expect("the path of the running test binary");
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        entry,
        "--exact",
        INCLUDE_IGNORED,
        "--nocapture",
        "--test-threads=1",
    ]);
    cmd
}

/// A test hook of the thread rule ([`Device`](crate::Device)): the vendor
/// context current on the calling thread, which no call of a backend may
/// change. Every backend implements it so that the conformance suite can
/// check the rule; a program has no use for it.
pub trait ContextProbe {
    /// The vendor context current on the calling thread, as an opaque id
    /// (CUDA `cuCtxGetCurrent`, Ascend `aclrtGetCurrentContext`), or `None`
    /// when none is current or the backend has no contexts.
    fn current_context(&self) -> crate::Result<Option<u64>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_run_fails_only_in_strict_mode() {
        // In a child of its own, so that the variable is set for it alone.
        const ROLE: &str = "HAL_TESTING_TEST_CHILD";
        if let Some(strict) = std::env::var_os(ROLE) {
            assert_eq!(super::strict(), strict == "1");
            not_run("the unit test's reason");
            println!("@testing@ returned");
            return;
        }
        let run = |strict: &str| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "testing::tests::not_run_fails_only_in_strict_mode",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(ROLE, strict)
                .env(STRICT_VAR, strict)
                .output()
                .unwrap()
        };
        let lax = run("0");
        assert!(lax.status.success(), "{lax:?}");
        assert!(String::from_utf8_lossy(&lax.stdout).contains("@testing@ returned"));
        assert!(String::from_utf8_lossy(&lax.stderr).contains("NOT RUN: the unit test's reason"));
        let strict = run("1");
        assert!(!strict.status.success(), "{strict:?}");
        let text = String::from_utf8_lossy(&strict.stdout).into_owned()
            + &String::from_utf8_lossy(&strict.stderr);
        assert!(!text.contains("@testing@ returned"), "{text}");
        assert!(
            text.contains("cannot run here (the unit test's reason)"),
            "{text}"
        );
    }
}
