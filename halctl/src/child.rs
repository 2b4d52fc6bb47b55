//! The consumer process that `halctl demo` and `halctl bench` start: this
//! binary again, under a hidden subcommand, reached over a control channel
//! whose peer is checked to be that child; killed if it is still running
//! when dropped, so that an exporter giving up early leaves no process
//! behind.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::channel::{Channel, Listener};
use crate::fail::{CmdResult, Fail};

/// A running consumer process.
pub struct ConsumerProcess {
    child: Option<Child>,
    pid: u32,
    /// How messages name it: "the consumer", "a consumer".
    noun: &'static str,
}

impl ConsumerProcess {
    /// Start this binary as `subcommand --control SOCKET [extra...]` and
    /// accept its control connection (from its pid only) within `timeout`,
    /// which the channel then keeps for every exchange. `socket_prefix`
    /// names the control socket; `noun` names the process in errors
    /// ("the consumer", "a consumer").
    pub fn spawn(
        subcommand: &str,
        extra: &[String],
        socket_prefix: &str,
        noun: &'static str,
        timeout: Duration,
    ) -> CmdResult<(ConsumerProcess, Channel)> {
        ConsumerProcess::spawn_env(subcommand, extra, &[], socket_prefix, noun, timeout)
    }

    /// [`ConsumerProcess::spawn`], with these variables added to the
    /// consumer's environment (UCX reads its configuration there).
    pub fn spawn_env(
        subcommand: &str,
        extra: &[String],
        envs: &[(&str, &str)],
        socket_prefix: &str,
        noun: &'static str,
        timeout: Duration,
    ) -> CmdResult<(ConsumerProcess, Channel)> {
        let exe = std::env::current_exe().map_err(|e| {
            Fail::failed(format!(
                "finding the halctl binary to start the consumer: {e}"
            ))
        })?;
        let control = Listener::bind(socket_prefix)?;
        let child = Command::new(exe)
            .arg(subcommand)
            .arg("--control")
            .arg(control.name())
            .args(extra)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Fail::failed(format!("starting {noun} process: {e}")))?;
        let pid = child.id();
        // Dropped on any error below: the child is killed and reaped.
        let process = ConsumerProcess {
            child: Some(child),
            pid,
            noun,
        };
        let chan = control.accept_from(pid, timeout)?;
        chan.set_timeout(timeout)?;
        Ok((process, chan))
    }

    /// The consumer's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Wait for the consumer to exit; true when it exited successfully.
    pub fn wait(mut self) -> CmdResult<bool> {
        match self.child.take() {
            Some(mut c) => c
                .wait()
                .map(|s| s.success())
                .map_err(|e| Fail::failed(format!("waiting for {}: {e}", self.noun))),
            None => Ok(false),
        }
    }
}

impl Drop for ConsumerProcess {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
