//! The bench's consumer process, driven over its control channel.

use super::proto::{self, Cmd, PEER_TIMEOUT};
use crate::channel::Channel;
use crate::child::ConsumerProcess;
use crate::fail::{CmdResult, Fail};

/// A consumer process and its control channel; killed if still running
/// when dropped.
pub(super) struct Peer {
    process: ConsumerProcess,
    pub(super) chan: Channel,
    pub(super) pid: u32,
}

impl Peer {
    pub(super) fn spawn(cpu: Option<usize>) -> CmdResult<Peer> {
        Peer::spawn_env(cpu, &[])
    }

    /// A consumer with these variables added to its environment.
    pub(super) fn spawn_env(cpu: Option<usize>, envs: &[(&str, &str)]) -> CmdResult<Peer> {
        let extra = match cpu {
            Some(cpu) => vec!["--cpu".to_string(), cpu.to_string()],
            None => Vec::new(),
        };
        let (process, chan) = ConsumerProcess::spawn_env(
            "__bench-consumer",
            &extra,
            envs,
            "halctl-bench",
            "a consumer",
            PEER_TIMEOUT,
        )?;
        let pid = process.pid();
        Ok(Peer { process, chan, pid })
    }

    pub(super) fn who(&self) -> String {
        format!("consumer (pid {})", self.pid)
    }

    pub(super) fn call(&self, cmd: &Cmd) -> CmdResult<(proto::Reply, Vec<Vec<u64>>)> {
        proto::call(&self.chan, &self.who(), cmd)
    }

    pub(super) fn open(&self, backend: &str, device: u32) -> CmdResult {
        self.call(&Cmd::Open {
            backend: backend.to_string(),
            device,
        })
        .map(|_| ())
    }

    pub(super) fn quit(self) -> CmdResult {
        self.call(&Cmd::Quit)?;
        let who = self.who();
        if !self.process.wait()? {
            return Err(Fail::failed(format!("{who} exited with an error")));
        }
        Ok(())
    }
}
