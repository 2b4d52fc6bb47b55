//! A bench process's side of the remote scenarios: a UCX node on the
//! loopback address, memory exported to the other process or imported from
//! it, and a notify each way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hal::cpu_shm::CpuShm;
use hal::dynamic::{DynAllocation, DynDevice};
use hal::remote::{Node, NodeOptions, RemoteExported, RemoteMemory, RemoteNotify, RemoteOptions};
use hal::{AllocDesc, DeviceExt, Notify};

use super::proto::PEER_TIMEOUT;
use crate::fail::{CmdResult, Context, Fail};
use crate::pattern::{self, Content};

/// The pattern the served memory holds.
const SEED: u64 = 11;

/// The nodes' spin ([`NodeOptions::spin`]): a caller waiting for an
/// answer drives the worker itself, and an idle progress thread polls,
/// for this long before either sleeps, as `ucx_perftest` polls its worker
/// without sleeping.
pub const BUSY: Duration = Duration::from_secs(1);

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// One process's remote state.
pub struct RemoteSide {
    node: Node,
    /// A node with the defaults (no spin), for the cold connections: what
    /// a first import costs a program that does not poll.
    plain: Node,
    /// This process's notify, signalled by the other process (its
    /// signals are waited for through its export).
    _mine: Arc<dyn Notify>,
    mine_export: RemoteExported,
    /// The served memory and its export (the serving process).
    served: Option<(RemoteExported, Box<dyn DynAllocation>)>,
    /// The memory's text and its import (the reading process).
    memory: Option<(String, RemoteMemory)>,
    /// The other process's notify.
    theirs: Option<RemoteNotify>,
}

impl RemoteSide {
    /// A node on the loopback address that polls its worker as
    /// `ucx_perftest` does ([`BUSY`]), and a notify exported from it.
    pub fn new() -> CmdResult<RemoteSide> {
        let mut opts = NodeOptions::new(
            "127.0.0.1:0"
                .parse()
                .map_err(|_| Fail::failed("an address"))?,
        );
        let plain = Node::with_options(opts.clone()).ctx("starting a UCX node")?;
        opts.spin = BUSY;
        let node = Node::with_options(opts).ctx("starting a UCX node")?;
        let notify = CpuShm::new()
            .host()
            .create_notify()
            .ctx("creating a notify")?;
        let mine: Arc<dyn Notify> = Arc::new(notify);
        let mine_export = node
            .export_notify(Arc::clone(&mine))
            .ctx("exporting a notify to the other process")?;
        Ok(RemoteSide {
            node,
            plain,
            _mine: mine,
            mine_export,
            served: None,
            memory: None,
            theirs: None,
        })
    }

    /// Serve `size` bytes of host memory of `dev`, filled with a pattern;
    /// the texts of the memory and of this process's notify.
    pub fn serve(&mut self, dev: &dyn DynDevice, size: u64) -> CmdResult<String> {
        let alloc = dev
            .allocate(&AllocDesc::host(size))
            .ctx("allocating the served region")?;
        pattern::fill(alloc.as_ref(), Content::Pattern(SEED))?;
        let export = self
            .node
            .export(alloc.as_ref(), RemoteOptions::default())
            .ctx("exporting the region to the other process")?;
        let text = format!("{} {}", export.text(), self.mine_export.text());
        self.served = Some((export, alloc));
        Ok(text)
    }

    /// Connect to the other process's notify, and to its memory when
    /// `memory` names it (checking its first bytes); this process's
    /// notify's text.
    pub fn join(&mut self, memory: Option<String>, notify: &str) -> CmdResult<String> {
        if let Some(text) = memory {
            let m = self
                .node
                .connect(&text)
                .ctx("connecting to the served region")?;
            let mut first = [0u8; 64];
            m.read(0, &mut first).ctx("reading the served region")?;
            if (0..64).any(|o| first[o] != pattern::byte(SEED, o as u64)) {
                return Err(Fail::failed("the served region read back wrong bytes"));
            }
            self.memory = Some((text, m));
        }
        self.theirs = Some(
            self.node
                .connect_notify(notify)
                .ctx("connecting to the other process's notify")?,
        );
        Ok(self.mine_export.text())
    }

    fn memory(&self) -> CmdResult<&(String, RemoteMemory)> {
        self.memory
            .as_ref()
            .ok_or_else(|| Fail::failed("no remote memory is connected"))
    }

    /// `n` reads of `len` bytes at offset 0, each timed.
    pub fn reads(&self, len: u64, n: u32) -> CmdResult<Vec<u64>> {
        let (_, m) = self.memory()?;
        let mut buf = vec![0u8; len as usize];
        let mut times = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let t0 = Instant::now();
            m.read(0, &mut buf).ctx("a remote read")?;
            times.push(ns(t0.elapsed()));
        }
        if buf.first() != Some(&pattern::byte(SEED, 0)) {
            return Err(Fail::failed("a remote read returned wrong bytes"));
        }
        Ok(times)
    }

    /// `n` times: a new connection to the served region and its first
    /// read of 8 bytes, timed together, from a node with the defaults (no
    /// spin); the connection is closed between.
    pub fn colds(&self, n: u32) -> CmdResult<Vec<u64>> {
        let (text, _) = self.memory()?;
        let mut times = Vec::with_capacity(n as usize);
        let mut b = [0u8; 8];
        for _ in 0..n {
            let t0 = Instant::now();
            let m = self.plain.connect(text).ctx("connecting to the region")?;
            m.read(0, &mut b).ctx("a first remote read")?;
            times.push(ns(t0.elapsed()));
            drop(m);
            if b[0] != pattern::byte(SEED, 0) {
                return Err(Fail::failed("a first remote read returned wrong bytes"));
            }
        }
        Ok(times)
    }

    /// `rounds` round trips of signals: the pinging side signals the
    /// other process's notify and waits for its own, timing each round
    /// trip; the other side answers.
    pub fn pingpong(&self, rounds: u32, ping: bool) -> CmdResult<Vec<u64>> {
        let theirs = self
            .theirs
            .as_ref()
            .ok_or_else(|| Fail::failed("no remote notify is connected"))?;
        let mine = &self.mine_export;
        let mut times = Vec::with_capacity(if ping { rounds as usize } else { 0 });
        for _ in 0..rounds {
            if ping {
                let t0 = Instant::now();
                theirs.signal().ctx("signalling the other process")?;
                mine.wait_signal(PEER_TIMEOUT)
                    .ctx("waiting for the answer")?;
                times.push(ns(t0.elapsed()));
            } else {
                mine.wait_signal(PEER_TIMEOUT).ctx("waiting for a signal")?;
                theirs.signal().ctx("answering")?;
            }
        }
        Ok(times)
    }
}

/// The remote state in `slot`, made on first use.
pub fn ensure(slot: &mut Option<RemoteSide>) -> CmdResult<&mut RemoteSide> {
    if slot.is_none() {
        *slot = Some(RemoteSide::new()?);
    }
    slot.as_mut()
        .ok_or_else(|| Fail::failed("the remote node could not be made"))
}
