//! A bench process's side of the remote channel scenarios
//! (remote-channel-throughput, remote-channel-pingpong): a channel of
//! cpu-shm host memory published here and offered on a UCX node of the
//! loopback address (`hal::remote`), and a remote subscription to the
//! other process's offer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hal::channel::{ChannelOptions, Publisher};
use hal::cpu_shm::{CpuDevice, CpuShm};
use hal::remote::{
    ChannelOffer, Node, NodeOptions, RemoteChannelOptions, RemoteSubscribeOptions, RemoteSubscriber,
};

use super::proto::PEER_TIMEOUT;
use crate::fail::{CmdResult, Context, Fail};

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

/// One process's channel state. Fields drop in order: the subscription,
/// the offer (its proxies end), the publisher, the node.
pub struct RemoteChannelSide {
    sub: Option<RemoteSubscriber>,
    offer: Option<ChannelOffer>,
    publisher: Option<Publisher>,
    node: Node,
    device: Arc<CpuDevice>,
    /// Channels made so far: each a name of its own.
    made: u32,
    /// Samples published on this process's channel, and received from the
    /// other's: a sample's first bytes hold its number.
    sent: u64,
    got: u64,
}

impl RemoteChannelSide {
    /// A node on the loopback address that polls its worker as
    /// `ucx_perftest` does ([`super::remote_peer::BUSY`]).
    pub fn new() -> CmdResult<RemoteChannelSide> {
        let mut opts = NodeOptions::new(
            "127.0.0.1:0"
                .parse()
                .map_err(|_| Fail::failed("an address"))?,
        );
        opts.spin = super::remote_peer::BUSY;
        let node = Node::with_options(opts).ctx("starting a UCX node")?;
        Ok(RemoteChannelSide {
            sub: None,
            offer: None,
            publisher: None,
            node,
            device: Arc::new(CpuShm::new().host()),
            made: 0,
            sent: 0,
            got: 0,
        })
    }

    /// Publish a channel of `slots` slots of `slot_size` bytes and offer
    /// it on the node (what there was before is dropped first); the
    /// offer's text.
    pub fn offer(&mut self, slots: usize, slot_size: u64) -> CmdResult<String> {
        self.close();
        self.made += 1;
        let name = format!("halctl-bench-rc-{}-{}", std::process::id(), self.made);
        let publisher = Publisher::create(
            &*self.device,
            &name,
            &ChannelOptions::default().slots(slots).slot_size(slot_size),
        )
        .ctx("creating the bench's channel")?;
        let device: Arc<dyn hal::dynamic::DynDevice> = self.device.clone();
        let offer = self
            .node
            .offer_channel(device, &name, &RemoteChannelOptions::default())
            .ctx("offering the bench's channel")?;
        let text = offer.text().to_string();
        self.publisher = Some(publisher);
        self.offer = Some(offer);
        self.sent = 0;
        Ok(text)
    }

    /// Subscribe to the other process's offer `text`, slots in this
    /// process's host memory.
    pub fn subscribe(&mut self, text: &str) -> CmdResult {
        self.sub = None;
        self.sub = Some(
            RemoteSubscriber::connect(
                &self.node,
                &*self.device,
                text,
                &RemoteSubscribeOptions::default().timeout(Some(PEER_TIMEOUT)),
            )
            .ctx("subscribing to the other process's channel")?,
        );
        self.got = 0;
        Ok(())
    }

    /// Drop the subscription, the offer and the channel.
    pub fn close(&mut self) {
        self.sub = None;
        self.offer = None;
        self.publisher = None;
    }

    fn publisher(&mut self) -> CmdResult<&mut Publisher> {
        self.publisher
            .as_mut()
            .ok_or_else(|| Fail::failed("no channel is published here"))
    }

    fn sub(&self) -> CmdResult<&RemoteSubscriber> {
        self.sub
            .as_ref()
            .ok_or_else(|| Fail::failed("no remote channel is subscribed"))
    }

    /// Publish one sample of `len` bytes, its number in its first bytes
    /// (the rest as the slot holds it).
    fn publish(&mut self, len: u64) -> CmdResult {
        let seq = self.sent;
        let loan = self.publisher()?.loan().ctx("loaning a slot")?;
        let mark = seq.to_le_bytes();
        let n = (len as usize).min(mark.len());
        loan.write(0, &mark[..n]).ctx("writing a sample")?;
        loan.publish(len).ctx("publishing a sample")?;
        self.sent += 1;
        Ok(())
    }

    /// Receive one sample, check its number, release it.
    fn receive(&mut self) -> CmdResult {
        let seq = self.got;
        let s = self.sub()?.receive().ctx("receiving a sample")?;
        let mut mark = [0u8; 8];
        let n = (s.len() as usize).min(mark.len());
        s.read(0, &mut mark[..n]).ctx("reading a sample")?;
        let want = seq.to_le_bytes();
        if mark[..n] != want[..n] {
            return Err(Fail::failed(format!(
                "sample {} arrived with the mark of another",
                s.sequence()
            )));
        }
        drop(s);
        self.got += 1;
        Ok(())
    }

    /// Publish `n` samples of `len` bytes, as fast as the remote
    /// subscriber releases slots.
    pub fn publish_n(&mut self, n: u32, len: u64) -> CmdResult {
        for _ in 0..n {
            self.publish(len)?;
        }
        Ok(())
    }

    /// Receive, check and release `n` samples; each one's time, from the
    /// previous one's release (the first's from the call: its wait for the
    /// publisher counts too).
    pub fn receive_n(&mut self, n: u32) -> CmdResult<Vec<u64>> {
        let mut times = Vec::with_capacity(n as usize);
        let mut last = Instant::now();
        for _ in 0..n {
            self.receive()?;
            let now = Instant::now();
            times.push(ns(now - last));
            last = now;
        }
        Ok(times)
    }

    /// `rounds` round trips of samples of `len` bytes: the pinging side publishes and waits for the answer on its
    /// subscription, timing each round trip; the other side receives, then
    /// publishes its answer.
    pub fn pingpong(&mut self, rounds: u32, len: u64, ping: bool) -> CmdResult<Vec<u64>> {
        let mut times = Vec::with_capacity(if ping { rounds as usize } else { 0 });
        for _ in 0..rounds {
            if ping {
                let t0 = Instant::now();
                self.publish(len)?;
                self.receive()?;
                times.push(ns(t0.elapsed()));
            } else {
                self.receive()?;
                self.publish(len)?;
            }
        }
        Ok(times)
    }
}

/// The channel state in `slot`, made on first use.
pub fn ensure(slot: &mut Option<RemoteChannelSide>) -> CmdResult<&mut RemoteChannelSide> {
    if slot.is_none() {
        *slot = Some(RemoteChannelSide::new()?);
    }
    slot.as_mut()
        .ok_or_else(|| Fail::failed("the remote node could not be made"))
}
