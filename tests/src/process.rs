//! Real child processes for the cross-process cases.
//!
//! The parent re-executes the current test binary
//! ([`std::env::current_exe`]) with `--exact <module>::__child
//! --include-ignored --nocapture --test-threads=1` and environment variables
//! naming the child's role and its arguments. The `__child` test that
//! [`conformance_suite!`] generates is ignored in a normal run (a child entry
//! point, not a test of its own); run so, it builds the backend with the same
//! expression as the parent and runs the role [`ROLE_ENV`] names.
//!
//! The two processes talk in lines: the child prints protocol lines
//! (prefixed with [`LINE_PREFIX`]) on its standard output, the parent writes
//! plain lines to the child's standard input. A child that fails panics, so
//! its test fails and its exit status tells the parent, which then fails with
//! the child's output in its message.
//!
//! [`conformance_suite!`]: crate::conformance_suite

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The environment variable naming the child's role.
pub const ROLE_ENV: &str = "HAL_TESTS_CHILD_ROLE";
/// The environment variable naming the suite module the child belongs to.
pub const MODULE_ENV: &str = "HAL_TESTS_CHILD_MODULE";
/// The prefix of the child's argument variables (`HAL_TESTS_ARG_<KEY>`).
pub const ARG_ENV_PREFIX: &str = "HAL_TESTS_ARG_";
/// The prefix of a protocol line on the child's standard output (found
/// anywhere in a line).
pub const LINE_PREFIX: &str = "@hal-tests@ ";

/// How long the parent waits for one protocol line before it declares the
/// child hung. A guard against hangs, not a timing assertion.
const LINE_PATIENCE: Duration = Duration::from_secs(60);

/// A child process running one role of the suite, seen from the parent.
/// Dropping it kills and reaps the child if it is still running.
#[derive(Debug)]
pub struct ChildProc {
    role: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stdout_log: Arc<Mutex<String>>,
    stderr_log: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

impl ChildProc {
    /// Start the test binary's `<test_module>::__child` test in a new process
    /// with `role` and `args` (each becomes `HAL_TESTS_ARG_<KEY>`).
    pub fn spawn(test_module: &str, role: &str, args: &[(&str, String)]) -> ChildProc {
        ChildProc::spawn_with(test_module, role, args, |_| {})
    }

    /// As [`ChildProc::spawn`], letting `setup` adjust the command first:
    /// a `pre_exec` hook that places the child in namespaces of its own
    /// ([`Hosts::spawn`](crate::hosts::Hosts::spawn)), a uid.
    pub fn spawn_with(
        test_module: &str,
        role: &str,
        args: &[(&str, String)],
        setup: impl FnOnce(&mut Command),
    ) -> ChildProc {
        let mut cmd = hal_core::testing::child(&format!("{test_module}::__child"));
        cmd.env(ROLE_ENV, role)
            .env(MODULE_ENV, test_module)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (key, value) in args {
            cmd.env(
                format!("{ARG_ENV_PREFIX}{}", key.to_ascii_uppercase()),
                value,
            );
        }
        setup(&mut cmd);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning the `{role}` child process failed: {e}"));
        crate::probe::record_pid(child.id());
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        let stdout_log = Arc::new(Mutex::new(String::new()));
        let stderr_log = Arc::new(Mutex::new(String::new()));
        let out_log = Arc::clone(&stdout_log);
        let out_reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                push_log(&out_log, &line);
                // The harness may have printed `test name ... ` on the same line.
                if let Some(at) = line.find(LINE_PREFIX) {
                    let msg = line[at + LINE_PREFIX.len()..].trim_end();
                    if tx.send(msg.to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        let err_log = Arc::clone(&stderr_log);
        let err_reader = std::thread::spawn(move || {
            let mut buf = String::new();
            let mut stderr = stderr;
            let _ = stderr.read_to_string(&mut buf);
            push_log(&err_log, &buf);
        });
        ChildProc {
            role: role.to_string(),
            child: Some(child),
            stdin,
            lines,
            stdout_log,
            stderr_log,
            readers: vec![out_reader, err_reader],
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Wait for the protocol line `tag ...` and return what follows the tag.
    /// Fails (with the child's output) if the child exits or hangs first, or
    /// reports `fail`.
    #[track_caller]
    pub fn expect(&mut self, tag: &str) -> String {
        loop {
            match self.lines.recv_timeout(LINE_PATIENCE) {
                Ok(line) => {
                    let (got, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
                    if got == tag {
                        return rest.to_string();
                    }
                    if got == "fail" {
                        self.fail(&format!("reported failure: {rest}"));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("no `{tag}` line within {LINE_PATIENCE:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.fail(&format!("exited before reporting `{tag}`"))
                }
            }
        }
    }

    /// Write one line to the child's standard input.
    #[track_caller]
    pub fn send(&mut self, line: &str) {
        let ok = match self.stdin.as_mut() {
            Some(stdin) => writeln!(stdin, "{line}")
                .and_then(|_| stdin.flush())
                .is_ok(),
            None => false,
        };
        if !ok {
            self.fail(&format!(
                "could not send `{line}`: its standard input is closed"
            ));
        }
    }

    /// Close the child's standard input, wait for it to exit and require a
    /// successful exit.
    #[track_caller]
    pub fn finish(mut self) {
        self.stdin = None;
        let status = self
            .child
            .as_mut()
            .map(|c| c.wait().expect("waiting for a child process"));
        self.join_readers();
        match status {
            Some(s) if s.success() => {}
            Some(s) => self.fail(&format!("exited with {s}")),
            None => self.fail("was already reaped"),
        }
        self.child = None;
    }

    /// Kill the child with `SIGKILL` and reap it.
    pub fn kill(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stdin = None;
        self.join_readers();
    }

    fn join_readers(&mut self) {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }

    #[track_caller]
    fn fail(&mut self, what: &str) -> ! {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stdin = None;
        self.join_readers();
        let out = self
            .stdout_log
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        let err = self
            .stderr_log
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        panic!(
            "the `{}` child process {what}\n--- child stdout ---\n{}\n--- child stderr ---\n{}",
            self.role,
            tail(&out),
            tail(&err)
        );
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stdin = None;
        self.join_readers();
    }
}

fn push_log(log: &Mutex<String>, text: &str) {
    if let Ok(mut s) = log.lock() {
        s.push_str(text);
        s.push('\n');
    }
}

fn tail(s: &str) -> &str {
    const MAX: usize = 8000;
    if s.len() <= MAX {
        return s;
    }
    let mut start = s.len() - MAX;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Child side: print a protocol line `tag value` for the parent.
pub fn report(tag: &str, value: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{LINE_PREFIX}{tag} {value}");
    let _ = out.flush();
}

/// Child side: the argument `key` the parent passed.
#[track_caller]
pub fn arg(key: &str) -> String {
    let var = format!("{ARG_ENV_PREFIX}{}", key.to_ascii_uppercase());
    std::env::var(&var).unwrap_or_else(|_| panic!("the parent did not pass {var}"))
}

/// Child side: the argument `key`, if the parent passed it.
pub fn opt_arg(key: &str) -> Option<String> {
    std::env::var(format!("{ARG_ENV_PREFIX}{}", key.to_ascii_uppercase())).ok()
}

/// Child side: wait for the parent's line `tag ...` on standard input and
/// return what follows the tag. An end of input before it fails the child.
#[track_caller]
pub fn wait_for(tag: &str) -> String {
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        line.clear();
        let n = stdin
            .lock()
            .read_line(&mut line)
            .expect("reading the parent's instructions");
        assert!(n > 0, "the parent closed its end before sending `{tag}`");
        let l = line.trim_end();
        let (got, rest) = l.split_once(' ').unwrap_or((l, ""));
        if got == tag {
            return rest.to_string();
        }
    }
}

/// Child side: block until the parent closes standard input (or kills us).
pub fn wait_for_eof() {
    let mut sink = Vec::new();
    let _ = std::io::stdin().lock().read_to_end(&mut sink);
}

/// Run this executable's test `name` alone in a child process with `env`
/// added to its environment, and require that it exited 0 having printed
/// `child done`; its standard output. `name` may be an ignored child entry
/// point (`#[ignore = "child entry point: run by its parent"]`): it is run
/// with `--include-ignored`. `what` names the child in the
/// failure, which carries the child's output. The simple form of a child,
/// for a test that runs itself again under other switches (a stand-in
/// driver's, say) and checks inside.
pub fn child_passes(name: &str, what: &str, env: &[(&str, &str)]) -> String {
    let out = hal_core::testing::child(name)
        .envs(env.iter().copied())
        .output()
        .expect("starting the child test process");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("child done"),
        "{what}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
