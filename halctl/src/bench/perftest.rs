//! The baseline of the remote scenarios: UCX's own `ucx_perftest`
//! (package ucx-utils), a server and a client process on the loopback
//! address, run with the same UCX environment as hal's two processes.
//! Its CSV output (`-v`) gives each run's median latency.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::fail::{CmdResult, Fail};

/// The program.
pub const PROGRAM: &str = "ucx_perftest";

/// How long one run may take before it is killed.
const RUN_LIMIT: Duration = Duration::from_secs(120);
/// How long a client may fail to connect before its server is started
/// again.
const CONNECT_LIMIT: Duration = Duration::from_secs(10);
/// Servers started for one run, at most.
const SERVER_TRIES: u32 = 3;

/// What one run of `ucx_perftest` measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerfRun {
    /// Iterations it reports.
    pub iterations: u64,
    /// Its median latency per iteration, in microseconds (for ping-pong
    /// tests, half a round trip: it divides by two).
    pub p50_us: f64,
    /// Its average latency per iteration, in microseconds.
    pub avg_us: f64,
}

/// `ucx_perftest` found on `PATH`.
#[derive(Debug, Clone)]
pub struct Perftest {
    path: PathBuf,
}

impl Perftest {
    /// The program on `PATH`, if it is there.
    pub fn find() -> Option<Perftest> {
        let paths = std::env::var_os("PATH")?;
        std::env::split_paths(&paths)
            .map(|d| d.join(PROGRAM))
            .find(|p| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .map(|path| Perftest { path })
    }

    /// The command line of a run's client, for the report.
    pub fn command(env: &[(&str, &str)], test: &str, size: u64, n: u32, warmup: u32) -> String {
        let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "{} {PROGRAM} 127.0.0.1 -t {test} -s {size} -n {n} -w {warmup} -p PORT -v \
             (its server: the same without 127.0.0.1)",
            env.join(" ")
        )
    }

    /// Run test `test` with messages of `size` bytes, `n` iterations after
    /// `warmup`, between a server and a client on 127.0.0.1.
    pub fn run(
        &self,
        env: &[(&str, &str)],
        test: &str,
        size: u64,
        n: u32,
        warmup: u32,
    ) -> CmdResult<PerfRun> {
        let deadline = Instant::now() + RUN_LIMIT;
        let mut last = String::new();
        // A server that exits before its client connects (its port taken
        // in the meantime) is started again, on another port.
        for _ in 0..SERVER_TRIES {
            let port = free_port()?;
            let args = |c: &mut Command| {
                c.args(["-t", test, "-s", &size.to_string()])
                    .args(["-n", &n.to_string(), "-w", &warmup.to_string()])
                    .args(["-p", &port.to_string(), "-v"])
                    .envs(env.iter().copied())
                    .stdin(Stdio::null());
            };
            let mut server = Command::new(&self.path);
            args(&mut server);
            let mut server = Killed(Some(
                server
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| Fail::failed(format!("starting {PROGRAM}'s server: {e}")))?,
            ));
            let connect_by = Instant::now() + CONNECT_LIMIT;
            // The client fails at once while the server is not listening yet.
            while Instant::now() < connect_by.min(deadline) {
                if let Some(why) = server.exited()? {
                    last = format!("its server exited: {why}");
                    break;
                }
                let mut client = Command::new(&self.path);
                client.arg("127.0.0.1");
                args(&mut client);
                let child = client
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| Fail::failed(format!("starting {PROGRAM}'s client: {e}")))?;
                let out = finish(child, deadline)?;
                let stdout = String::from_utf8_lossy(&out.stdout);
                if out.status.success() {
                    let run = parse_csv(&stdout).ok_or_else(|| {
                        Fail::failed(format!(
                            "{PROGRAM} printed no result this bench can read: {:?}",
                            stdout.trim()
                        ))
                    })?;
                    server.finish(deadline)?;
                    return Ok(run);
                }
                last = last_line(&out.stderr, &stdout);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Err(Fail::failed(format!(
            "{PROGRAM} -t {test} -s {size} did not run ({SERVER_TRIES} servers tried): {last}"
        )))
    }
}

/// The last line that says something, of standard error, else of
/// standard output.
fn last_line(stderr: &[u8], stdout: &str) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("")
        .to_string()
}

/// A port of 127.0.0.1 free a moment ago.
fn free_port() -> CmdResult<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Fail::failed(format!("finding a free port for {PROGRAM}: {e}")))
}

/// Wait for `child` until `deadline` (killed then), and take its output.
fn finish(mut child: Child, deadline: Instant) -> CmdResult<std::process::Output> {
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                break;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(Fail::failed(format!("waiting for {PROGRAM}: {e}"))),
        }
    }
    child
        .wait_with_output()
        .map_err(|e| Fail::failed(format!("reading {PROGRAM}'s output: {e}")))
}

/// A process killed and reaped when dropped.
struct Killed(Option<Child>);

impl Killed {
    /// Why it exited, if it did already (it is reaped then).
    fn exited(&mut self) -> CmdResult<Option<String>> {
        let Some(c) = self.0.as_mut() else {
            return Ok(Some("it is gone".into()));
        };
        match c.try_wait() {
            Ok(None) => Ok(None),
            Ok(Some(status)) => {
                let out = self.0.take().map(|c| c.wait_with_output());
                let said = match out {
                    Some(Ok(o)) => last_line(&o.stderr, ""),
                    _ => String::new(),
                };
                Ok(Some(format!("{status} {said}").trim().to_string()))
            }
            Err(e) => Err(Fail::failed(format!("waiting for {PROGRAM}'s server: {e}"))),
        }
    }

    /// Wait for it to exit by itself until `deadline`.
    fn finish(mut self, deadline: Instant) -> CmdResult {
        if let Some(c) = self.0.take() {
            let out = finish(c, deadline)?;
            if !out.status.success() {
                return Err(Fail::failed(format!(
                    "{PROGRAM}'s server exited with {}",
                    out.status
                )));
            }
        }
        Ok(())
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The final result of `ucx_perftest -v`'s CSV: the header names the
/// columns (`iterations,50.0_percentile_lat,avg_lat,...`); progress lines
/// start with `[thread N]`; the last line of numbers is the result.
pub fn parse_csv(out: &str) -> Option<PerfRun> {
    let mut lines = out.lines().map(str::trim);
    let header: Vec<&str> = lines
        .by_ref()
        .find(|l| l.starts_with("iterations,"))?
        .split(',')
        .map(str::trim)
        .collect();
    let col = |pred: &dyn Fn(&str) -> bool| header.iter().position(|h| pred(h));
    let p50 = col(&|h| h.ends_with("percentile_lat"))?;
    let avg = col(&|h| h == "avg_lat")?;
    let last = lines
        .filter(|l| !l.starts_with('['))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            (f.len() == header.len()).then_some(f)
        })
        .filter_map(|f| {
            Some(PerfRun {
                iterations: f[0].parse().ok()?,
                p50_us: f[p50].parse().ok()?,
                avg_us: f[avg].parse().ok()?,
            })
        })
        .next_back()?;
    (last.p50_us.is_finite() && last.p50_us > 0.0).then_some(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_final_line_of_the_csv() {
        // As ucx_perftest 1.13.1 prints it (`-v`), a progress line included.
        let out = "iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n\
                   [thread 0] 698,5.542,727.722,727.722,0.01,0.01,1374,1374\n\
                   2000,5.507,68.064,298.285,0.11,0.03,14692,3353\n";
        assert_eq!(
            parse_csv(out),
            Some(PerfRun {
                iterations: 2000,
                p50_us: 5.507,
                avg_us: 68.064
            })
        );
        let one = "Waiting for connection...\n\
                   iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr\n\
                   \x20 50,2724.443,2980.142,2980.142,1342.22,1342.22,336,336\n";
        assert_eq!(parse_csv(one).map(|r| r.p50_us), Some(2724.443));
        assert_eq!(parse_csv(""), None);
        assert_eq!(parse_csv("iterations,50.0_percentile_lat,avg_lat\n"), None);
        assert_eq!(parse_csv("iterations,x,avg_lat\n10,1,2\n"), None);
        assert_eq!(
            parse_csv("iterations,50.0_percentile_lat,avg_lat\n10,nan,2\n"),
            None
        );
    }
}
