//! Child entry points: `#[test]` functions marked
//! `#[ignore = "child entry point: run by its parent"]`, which a normal
//! run does not count, run by their parent by exact name in a process of
//! their own.

#![allow(dead_code)] // Each test binary uses what it needs.

use std::process::Command;

/// The command that runs this executable's entry point `name` alone.
pub fn command(name: &str) -> Command {
    hal_core::testing::child(name)
}

/// Run the entry point `name` with `env` added to its environment, and
/// require that it ran (one test), exited 0 and printed `child done`; its
/// standard output. `what` names the child in the failure, which carries
/// the child's output.
pub fn passes(name: &str, what: &str, env: &[(&str, &str)]) -> String {
    let out = command(name)
        .envs(env.iter().copied())
        .output()
        .expect("starting the child test process");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("child done") && stdout.contains("1 passed"),
        "{what}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
