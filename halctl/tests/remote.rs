//! `halctl remote serve`, `read` and `write` in separate processes, over
//! UCX's TCP transport (`UCX_TLS=tcp`): on this host, and across two hosts
//! made of network namespaces joined by a veth pair
//! ([`hal_tests::hosts::Hosts`]).
//!
//! Where UCX is not installed, or the machine refuses namespaces, a test
//! says `NOT RUN` and why (a failure with `HAL_TESTS_STRICT=1`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use hal::remote::Node;
use hal::testing::not_run;
use hal_tests::hosts::Hosts;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");
/// Generous: a stuck command fails its test instead of hanging the suite.
const TIMEOUT: Duration = Duration::from_secs(60);

/// UCX is loadable here; otherwise the test says it did not run.
fn ucx_here() -> bool {
    match Node::bind("127.0.0.1:0".parse().unwrap()) {
        Ok(_) => true,
        Err(e @ (hal::Error::Unavailable { .. } | hal::Error::Unsupported { .. })) => {
            not_run(&format!("UCX cannot be used here: {e}"));
            false
        }
        Err(e) => panic!("making a node: {e}"),
    }
}

/// A running `halctl remote serve`, its stdout's lines as they come;
/// killed if the test fails half-way.
struct Server {
    child: Option<Child>,
    lines: Receiver<String>,
    stderr: Receiver<String>,
}

impl Server {
    fn start(mut cmd: Command, args: &[&str]) -> Server {
        let mut child = cmd
            .args(["remote", "serve"])
            .args(args)
            .env("UCX_TLS", "tcp")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting halctl remote serve");
        let lines = pipe_lines(child.stdout.take().unwrap());
        let stderr = pipe_lines(child.stderr.take().unwrap());
        Server {
            child: Some(child),
            lines,
            stderr,
        }
    }

    /// The next line of its stdout.
    fn line(&self) -> String {
        self.lines
            .recv_timeout(TIMEOUT)
            .unwrap_or_else(|_| panic!("no line from the server; stderr: {}", self.errors()))
    }

    /// The next line of its stdout that starts with `prefix`.
    fn line_starting(&self, prefix: &str) -> String {
        loop {
            let l = self.line();
            if l.starts_with(prefix) {
                return l;
            }
        }
    }

    fn errors(&self) -> String {
        self.stderr.try_iter().collect::<Vec<_>>().join(" | ")
    }

    /// Wait for it to exit; its status and what it wrote on stderr.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                break s;
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut err = Vec::new();
        while let Ok(l) = self.stderr.recv_timeout(TIMEOUT) {
            err.push(l);
        }
        (status, err.join("\n"))
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.as_ref().unwrap().id() as i32)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn pipe_lines(r: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines() {
            match l {
                Ok(l) => {
                    if tx.send(l).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    });
    rx
}

/// Run `halctl remote ARGS` to its end over TCP.
fn remote(mut cmd: Command, args: &[&str]) -> Output {
    cmd.arg("remote")
        .args(args)
        .env("UCX_TLS", "tcp")
        .stdin(Stdio::null())
        .output()
        .expect("running halctl remote")
}

fn here() -> Command {
    Command::new(BIN)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Serve on `serve`, read and write from `client`: the reads see the fill,
/// a write lands and signals, a read-only export refuses writes, and
/// SIGTERM ends the server cleanly.
fn serve_read_write(serve: impl Fn() -> Command, client: impl Fn() -> Command, listen: &str) {
    let server = Server::start(
        serve(),
        &["--listen", listen, "--size", "64K", "--fill", "0xab"],
    );
    let text = server.line();
    assert!(text.starts_with("hal1r."), "{text}");

    let o = remote(
        client(),
        &["read", &text, "--offset", "100", "--len", "1000"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, vec![0xab; 1000]);
    assert!(
        stderr(&o).contains("read 1000 bytes at offset 100"),
        "{}",
        stderr(&o)
    );

    let o = remote(
        client(),
        &[
            "write", &text, "--offset", "10", "--data", "hello", "--signal",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("wrote 5 bytes at offset 10"), "{said}");
    assert_eq!(
        server.line_starting("signal"),
        "signal from an importer (1 so far)"
    );

    let o = remote(client(), &["read", &text, "--offset", "8", "--len", "9"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, b"\xab\xabhello\xab\xab");

    // Past the end: refused before anything is sent.
    let o = remote(
        client(),
        &["read", &text, "--offset", "65535", "--len", "2"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("halctl: error: "), "{}", stderr(&o));

    kill(server.pid(), Signal::SIGTERM).unwrap();
    let (status, err) = server.finish();
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("SIGTERM received"), "{err}");

    // The export is gone: connecting fails, in one line.
    let o = remote(client(), &["read", &text, "--len", "8"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.starts_with("halctl: error: connecting to the export at"),
        "{e}"
    );
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
}

#[test]
fn serve_read_write_over_tcp_on_one_host() {
    if ucx_here() {
        serve_read_write(here, here, "127.0.0.1");
    }
}

#[test]
fn serve_read_write_across_network_namespaces() {
    if !ucx_here() {
        return;
    }
    let Some(hosts) = Hosts::new_or_not_run() else {
        return;
    };
    let listen = hosts.address(0).to_string();
    serve_read_write(|| hosts.command(0, BIN), || hosts.command(1, BIN), &listen);
}

#[test]
fn a_read_only_export_refuses_writes() {
    if !ucx_here() {
        return;
    }
    let server = Server::start(here(), &["--size", "4096", "--read-only", "--fill", "7"]);
    let text = server.line();
    let o = remote(here(), &["write", &text, "--data", "x"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("read-only"), "{}", stderr(&o));
    let o = remote(here(), &["read", &text, "--len", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, [7, 7, 7, 7]);
    kill(server.pid(), Signal::SIGINT).unwrap();
    let (status, err) = server.finish();
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("SIGINT received"), "{err}");
}

#[test]
fn serve_exits_after_a_signal_when_asked() {
    if !ucx_here() {
        return;
    }
    let server = Server::start(
        here(),
        &["--size", "4096", "--fill", "pattern", "--exit-after-signal"],
    );
    let text = server.line();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    std::fs::write(&input, b"0123456789").unwrap();
    let o = remote(
        here(),
        &[
            "write",
            &text,
            "--offset",
            "4086",
            "--in",
            input.to_str().unwrap(),
            "--signal",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (status, err) = server.finish();
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("an importer signalled"), "{err}");
}

#[test]
fn bad_input_is_refused_in_one_line() {
    // No network: these are refused before a node is made.
    let o = remote(here(), &["read", "hal1r.AAAA"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("halctl: error: decoding the remote handle"),
        "{}",
        stderr(&o)
    );
    let o = remote(here(), &["serve", "--listen", "0.0.0.0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--advertise"), "{}", stderr(&o));
    let o = remote(here(), &["write", "hal1r.AAAA"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = remote(here(), &["serve", "--fill", "zebra"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
