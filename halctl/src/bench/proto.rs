//! What the bench's processes say to each other over the control channel
//! ([`crate::channel`]): commands from the exporter, replies from a consumer,
//! and long series of samples in binary chunks (a JSON message is bounded by
//! the channel's message size).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::channel::Channel;
use crate::fail::{CmdResult, Fail};

/// How long either side waits for the other before giving up.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(60);

/// Handle texts per [`Cmd::AddHandles`] message (a text is about 200 bytes;
/// a message carries at most 64 KiB).
pub const HANDLES_PER_MESSAGE: usize = 200;

/// Samples per binary chunk (8 bytes each, under the 64 KiB message bound).
const SAMPLES_PER_CHUNK: usize = 8000;

/// One kind of round trip of the ping-pong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pong {
    /// Raw futex ping-pong on a shared memfd (blocking waits).
    RawFutex,
    /// Raw atomic ping-pong on a shared memfd (both sides spin).
    RawSpin,
    /// hal notifies, blocking waits (`WaitOptions::spin` zero).
    HalBlocking,
    /// hal notifies, busy polling (a spin as long as the timeout).
    HalSpin,
    /// hal notifies, the default `WaitOptions` (a short spin, then sleep).
    HalAdaptive,
    /// A sample of 64 bytes each way on two hal channels, both sides
    /// busy polling.
    HalChannel,
}

/// A block of round trips: `cycles` times, one round trip of each of
/// `kinds` in turn. Kinds that wait alike are interleaved round by round, so
/// that hal and its baseline meet the same state of the machine (on a
/// virtual machine whose idle CPUs poll for a while before they halt, a
/// blocking wake-up took about 1 us or about 45 us depending on that state
/// in the runs of this bench on a 2-core VM with the `haltpoll` idle driver
/// recorded by commit be81f85).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Block {
    /// Which kinds, in order.
    pub kinds: Vec<Pong>,
    /// How many cycles.
    pub cycles: u32,
    /// False for warm-up blocks.
    pub timed: bool,
}

/// How an idle waiter waits, for the CPU-per-idle-second figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdleMode {
    /// `WaitOptions::spin` zero.
    Blocking,
    /// A spin as long as the wait.
    Spin,
    /// The default `WaitOptions`.
    Adaptive,
}

/// A command from the exporter to a consumer. Every command is answered by
/// one [`Reply`], followed by the series of samples it announces.
#[derive(Debug, Serialize, Deserialize)]
pub enum Cmd {
    /// Open the backend and device the exports come from.
    Open { backend: String, device: u32 },
    /// Append handle texts to the consumer's list (after clearing it).
    AddHandles { clear: bool, texts: Vec<String> },
    /// First imports of every listed handle, each interleaved with three
    /// baseline imports: a raw memfd received over a new connection to
    /// `raw_socket`, the named region `/{shm_prefix}{i}`, and a memfd
    /// queued on the socket that travels with the command. `group` 1: each
    /// import on its own (a new broker connection each when
    /// `fresh_connection`); more: `group` handles per
    /// `import_memory_batch` call, and every sample is a group's time per
    /// handle (the baselines grouped alike). Series: hal, raw, named,
    /// received. Reply values: the imports taken by `pidfd_getfd`, and
    /// those of them that asked no one.
    ImportFirst {
        raw_socket: String,
        shm_prefix: String,
        size: u64,
        fresh_connection: bool,
        group: usize,
        /// The direct path on for these imports (the exporter's board,
        /// `pidfd_getfd`, as `HAL_PIDFD_GETFD=1` turns it on), or off (every
        /// import asks the broker, as `HAL_PIDFD_GETFD=0`).
        direct: bool,
    },
    /// Import the first listed handle once and keep it; then time `n`
    /// imports of it again; series: hal, timer overhead.
    ImportCached { n: u32 },
    /// Import (mapping and first touch) and drop each listed handle in
    /// turn; series: hal.
    ImportEach {
        /// The direct path on for these imports (`HAL_PIDFD_GETFD=1`), or
        /// off (`HAL_PIDFD_GETFD=0`).
        direct: bool,
    },
    /// `rounds` times: import every listed handle and keep the mappings,
    /// then drop them all; series: hal.
    ImportKeep {
        rounds: u32,
        /// The direct path on for these imports (`HAL_PIDFD_GETFD=1`), or
        /// off (`HAL_PIDFD_GETFD=0`).
        direct: bool,
    },
    /// Open the raw futex and spin pairs (their memfds travel with the
    /// command, in that order), create the consumer's notify, export it to
    /// the exporter, import the exporter's; subscribe to the exporter's
    /// channel `channel` and publish the channel `{channel}-back`; reply
    /// text: the consumer's notify handle.
    NotifySetup { notify: String, channel: String },
    /// Join the group `name` of `size` members, export a region of `size`
    /// bytes to anyone, then `rounds` times all-gather its handle with the
    /// other members and import the next rank's handle; series: the
    /// all-gathers, the imports (decode + import + first touch).
    Rendezvous {
        name: String,
        size: usize,
        rounds: u32,
        region: u64,
    },
    /// Answer the round trips of `plan`, in order.
    PingPong { plan: Vec<Block> },
    /// Subscribe to the channel `channel`, import the region `region`, read
    /// `passes` pieces of `sample` bytes of it in place, in turn, then
    /// receive `samples` samples, each read in place and released; series:
    /// the pieces' read times, the times from one sample's release to the
    /// next's.
    ChannelThroughput {
        channel: String,
        region: String,
        sample: u64,
        samples: u32,
        passes: u32,
    },
    /// Wait on the consumer's own notify, which nobody signals, for
    /// `wait_ns`; reply values: CPU time of this process (ns), wall time (ns).
    Idle { mode: IdleMode, wait_ns: u64 },
    /// Read the first listed handle's region `passes` times in place,
    /// interleaved with a private buffer and a raw memfd of the same size;
    /// reply values: first pass over the shared region (ns), bytes; series:
    /// shared, private, raw memfd pass times (ns); reply text: how the
    /// region was read.
    Bandwidth { passes: u32 },
    /// CUDA: first imports of the first `hal` listed handles, interleaved
    /// with bare opens of the raw handles listed after them (hex of
    /// `RawIpcHandle::to_bytes`); series: hal, bare.
    CudaImportFirst { hal: usize },
    /// CUDA: hold the first listed handle's import, then time `n` imports
    /// of the second (another range of the same allocation); reply value:
    /// 1 when every one was a range of the open held; series: hal.
    CudaImportCached { n: u32 },
    /// CUDA: `passes` device-to-device copies out of the first listed
    /// handle's import, interleaved with copies out of an allocation of
    /// the consumer's own; series: imported, own.
    CudaRead { passes: u32 },
    /// CUDA: keep the descriptors that come with this command (at most
    /// four per message) for [`Cmd::CudaVmmImport`].
    CudaVmmFds,
    /// CUDA: VMM imports (import, reserve, map, access) of the listed
    /// physical handles, interleaved with bare imports of the descriptors
    /// kept by [`Cmd::CudaVmmFds`], each of `size` bytes; series: hal, bare.
    CudaVmmImport { size: u64 },
    /// CUDA: queue on a stream the round trips of `plan` (true: on the
    /// notifies of the two listed handles, ping then pong; false: bare
    /// stream memory operations on the ping and pong words of the spin
    /// page whose memfd comes with this command, rounds numbered from 1);
    /// the reply comes once the queuing started.
    CudaRttArm { plan: Vec<bool> },
    /// CUDA: reply once the stream armed by [`Cmd::CudaRttArm`] ran every
    /// round trip.
    CudaRttDone,
    /// CUDA: subscribe to the stream-ordered channel `ping`, publish
    /// `pong`, and queue `phases` times `rounds` bare round trips (on the
    /// words of the spin page whose memfd comes with this command) then
    /// `rounds` channel round trips on a stream, the mirror image of the
    /// exporter's; the reply comes once the stream ran them.
    CudaChannelRtt {
        ping: String,
        pong: String,
        rounds: u32,
        phases: u32,
    },
    /// Remote: start this process's UCX node on the loopback address (UCX
    /// configured by the environment the process was started with) and
    /// serve `size` bytes of host memory of the open device; reply text:
    /// the memory's `hal1r.` text and this process's notify's, separated by
    /// a space.
    RemoteServe { size: u64 },
    /// Remote: connect to the other process's notify, and to its memory
    /// when `memory` names it; reply text: this process's notify's text.
    RemoteJoin {
        memory: Option<String>,
        notify: String,
    },
    /// Remote: `n` reads of `len` bytes of the connected memory; series:
    /// each read.
    RemoteRead { len: u64, n: u32 },
    /// Remote: `n` new connections to the memory, each with its first
    /// read of 8 bytes; series: each connection and read.
    RemoteCold { n: u32 },
    /// Remote: `rounds` round trips of signals between the two notifies,
    /// pinging (and timing: series, the round trips) or answering.
    RemotePingPong { rounds: u32, ping: bool },
    /// Remote: join the group across hosts `name` of `size` members at
    /// `at` ("IP:PORT") with `secret` (32 hex digits) from a node of this
    /// process's own, all-gather the members' pids, meet at a barrier and
    /// leave; series: when the join was called and when it returned, in
    /// nanoseconds of the system clock.
    RemoteRendezvous {
        at: String,
        name: String,
        size: usize,
        secret: String,
    },
    /// Remote channel: publish a channel of `slots` slots of `slot_size`
    /// bytes of host memory and offer it on this process's node (what
    /// there was dropped first); reply text: the offer's `hal1r.` text.
    RemoteChannelOffer { slots: usize, slot_size: u64 },
    /// Remote channel: subscribe to the other process's offer `text`.
    RemoteChannelSubscribe { text: String },
    /// Remote channel: publish `n` samples of `len` bytes; the reply comes
    /// once the last is published.
    RemoteChannelPublish { n: u32, len: u64 },
    /// Remote channel: receive, check and release `n` samples; series:
    /// each one's time from the previous one's release (the first's from
    /// the command's start).
    RemoteChannelReceive { n: u32 },
    /// Remote channel: `rounds` round trips of samples of `len` bytes,
    /// pinging (and timing: series, the round trips) or answering.
    RemoteChannelPingPong { rounds: u32, len: u64, ping: bool },
    /// Remote channel: drop the subscription, the offer and the channel.
    RemoteChannelClose,
    /// End.
    Quit,
}

/// A consumer's answer.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Reply {
    /// Why the command failed, if it did.
    pub error: Option<String>,
    /// A text result (a handle, a description).
    pub text: Option<String>,
    /// Small numeric results.
    pub values: Vec<f64>,
    /// Lengths of the series of samples that follow, in order.
    pub series: Vec<usize>,
}

/// Send `reply` and the series it announces.
pub fn send_reply(chan: &Channel, mut reply: Reply, series: &[&[u64]]) -> CmdResult {
    reply.series = series.iter().map(|s| s.len()).collect();
    chan.send_json(&reply, &[])?;
    for s in series {
        for chunk in s.chunks(SAMPLES_PER_CHUNK) {
            let bytes: Vec<u8> = chunk.iter().flat_map(|v| v.to_le_bytes()).collect();
            chan.send(&bytes, &[])?;
        }
    }
    Ok(())
}

/// Receive a reply and its series; a reply that reports an error becomes
/// the error, prefixed with `who`.
pub fn recv_reply(chan: &Channel, who: &str) -> CmdResult<(Reply, Vec<Vec<u64>>)> {
    let (reply, _) = chan.recv_json::<Reply>()?;
    let mut all = Vec::with_capacity(reply.series.len());
    for &len in &reply.series {
        let mut s = Vec::with_capacity(len);
        while s.len() < len {
            let (bytes, _) = chan.recv()?;
            if bytes.len() % 8 != 0 || s.len() + bytes.len() / 8 > len {
                return Err(Fail::failed(format!("{who}: a malformed chunk of samples")));
            }
            s.extend(
                bytes
                    .chunks_exact(8)
                    .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))),
            );
        }
        all.push(s);
    }
    if let Some(e) = &reply.error {
        return Err(Fail::failed(format!("{who}: {e}")));
    }
    Ok((reply, all))
}

/// Send `cmd` and wait for its reply.
pub fn call(chan: &Channel, who: &str, cmd: &Cmd) -> CmdResult<(Reply, Vec<Vec<u64>>)> {
    chan.send_json(cmd, &[])?;
    recv_reply(chan, who)
}

/// Send handle texts in messages of bounded size (the first clears the list).
pub fn send_handles(chan: &Channel, who: &str, texts: &[String]) -> CmdResult {
    if texts.is_empty() {
        call(
            chan,
            who,
            &Cmd::AddHandles {
                clear: true,
                texts: Vec::new(),
            },
        )?;
    }
    for (i, part) in texts.chunks(HANDLES_PER_MESSAGE).enumerate() {
        call(
            chan,
            who,
            &Cmd::AddHandles {
                clear: i == 0,
                texts: part.to_vec(),
            },
        )?;
    }
    Ok(())
}
