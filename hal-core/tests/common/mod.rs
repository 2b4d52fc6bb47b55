//! The child processes of this folder's cross-process tests: each test
//! binary starts itself again with `--exact child_process
//! --include-ignored`, names the child's role and argument in two
//! environment variables of its own, talks to it in lines on its standard
//! input, and reads its answers from `RESULT ` lines on its standard output.

// Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

pub mod imports;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

/// A child process, killed and reaped if the test fails early.
pub struct Kid {
    child: Option<Child>,
    stdout: Option<BufReader<ChildStdout>>,
}

impl Kid {
    /// Start this test binary's `child_process` entry point with `role` in
    /// `role_var` and `arg` in `arg_var`; `setup` adds to the command.
    pub fn start(
        (role_var, role): (&str, &str),
        (arg_var, arg): (&str, &str),
        setup: impl FnOnce(&mut Command),
    ) -> Kid {
        let mut cmd = hal_core::testing::child("child_process");
        cmd.env(role_var, role)
            .env(arg_var, arg)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        setup(&mut cmd);
        let mut child = cmd.spawn().expect("spawn child");
        let stdout = child.stdout.take().map(BufReader::new);
        Kid {
            child: Some(child),
            stdout,
        }
    }

    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// True once the child has exited (it is reaped by [`Kid::finish`]).
    pub fn exited(&mut self) -> bool {
        let child = self.child.as_mut().expect("child");
        child.try_wait().expect("try_wait").is_some()
    }

    /// Write `line` to the child's standard input.
    pub fn tell(&mut self, line: &str) {
        let stdin = self.child.as_mut().and_then(|c| c.stdin.as_mut());
        let stdin = stdin.expect("stdin");
        writeln!(stdin, "{line}").expect("write to child");
        stdin.flush().expect("flush");
    }

    /// The next `RESULT ` line of the child (other output is libtest's).
    pub fn result(&mut self) -> String {
        let out = self.stdout.as_mut().expect("stdout");
        let mut line = String::new();
        let mut seen = String::new();
        loop {
            line.clear();
            let n = out.read_line(&mut line).expect("read child output");
            assert!(
                n > 0,
                "the child ended without a RESULT line; it wrote:\n{seen}"
            );
            seen.push_str(&line);
            // libtest may have written "test child_process ... " on the same line.
            if let Some(at) = line.find("RESULT ") {
                return line[at + 7..].trim_end().to_owned();
            }
        }
    }

    /// Ask `question`; the answer.
    pub fn ask(&mut self, question: &str) -> String {
        self.tell(question);
        self.result()
    }

    /// Wait for the child; it must have passed.
    pub fn finish(mut self) {
        let mut child = self.child.take().expect("child");
        drop(child.stdin.take());
        let mut rest = String::new();
        if let Some(mut out) = self.stdout.take() {
            let _ = out.read_to_string(&mut rest);
        }
        let status = child.wait().expect("wait child");
        assert!(status.success(), "child failed ({status}); output:\n{rest}");
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// In a child: answer the parent with a `RESULT` line.
pub fn say(result: impl std::fmt::Display) {
    println!("RESULT {result}");
    let _ = std::io::stdout().flush();
}

/// In a child: the parent's next line, trimmed; empty at the end of its
/// input.
pub fn read_line() -> String {
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    line.trim().to_owned()
}
