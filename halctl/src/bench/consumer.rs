//! The consumer side of `halctl bench`: a second process (this binary,
//! hidden subcommand `__bench-consumer`) that runs the exporter's commands
//! and times what happens on its side: imports, ping-pong answers, idle
//! waits and reads.

use std::hint::black_box;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use hal::channel::{Publisher, Subscriber};
use hal::dynamic::{DynBackend, DynDevice, DynMapping, DynNotify};
use hal::group::{Group, GroupOptions};
use hal::kit::os::{self, Prot, SharedMap};
use hal::registry::Registry;
use hal::{
    AllocDesc, Capabilities, ExportOptions, Exported, Handle, ImportOptions, Importers,
    SharedHandle, WaitOptions,
};

use super::firsts::Firsts;
use super::host::pin_to;
use super::options::{
    blocking_wait, busy_channel, busy_subscriber, export_options, spin_wait, CHANNEL_SAMPLE,
};
use super::proto::{self, Block, Cmd, IdleMode, Pong, Reply, PEER_TIMEOUT};
use super::remote_channel_peer::{self, RemoteChannelSide};
use super::remote_peer::{self, RemoteSide};
use super::spin::{self, SpinPair};
use crate::backend;
use crate::channel::Channel;
use crate::fail::{CmdResult, Context, Fail};
use crate::pattern::{self, ReadPath};
use crate::raw::FutexPair;

/// Arguments of the hidden consumer subcommand.
#[derive(Debug, clap::Args)]
pub struct ConsumerArgs {
    /// Abstract socket name of the exporter's control channel.
    #[arg(long)]
    control: String,
    /// Pin this process to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
}

/// A raw memfd mapped shared in this process, filled with the pattern.
struct RawRegion {
    map: SharedMap,
    words: usize,
}

impl RawRegion {
    fn new(words: usize) -> CmdResult<RawRegion> {
        let len = (words * 8) as u64;
        let fd = os::memfd("halctl-bench-raw-read", len, None).ctx("raw memfd")?;
        let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None).ctx("raw mmap")?;
        let mut chunk = vec![0u8; pattern::CHUNK];
        let mut k = 0u64;
        for off in (0..len).step_by(pattern::CHUNK) {
            let n = (len - off).min(pattern::CHUNK as u64) as usize;
            for w in chunk[..n].chunks_exact_mut(8) {
                w.copy_from_slice(&pattern::word(7, k).to_le_bytes());
                k += 1;
            }
            map.write(off, &chunk[..n]).ctx("raw write")?;
        }
        Ok(RawRegion { map, words })
    }

    fn words(&self) -> &[u64] {
        // SAFETY: the mapping is page-aligned (so aligned for u64), holds
        // `words * 8` bytes and lives as long as `self`; only this process
        // maps it (its memfd was never shared) and nothing writes it while
        // the slice is borrowed.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<u64>(), self.words) }
    }
}

/// The words of a host-visible mapping, read in place.
fn shared_words(mapping: &dyn DynMapping, words: usize) -> Option<&[u64]> {
    let ptr = mapping.host_ptr()?;
    if words as u64 * 8 > mapping.len() || ptr.align_offset(8) != 0 {
        return None;
    }
    // SAFETY: the Memory contract makes `host_ptr` valid for `len` bytes
    // while the mapping lives, and the slice borrows the mapping; the pointer
    // is aligned for u64 (checked). The exporter wrote the region before it
    // sent the handle and does not write it while the consumer reads (the
    // bench's protocol), so no byte changes under the slice.
    Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u64>().cast_const(), words) })
}

/// The notifies and raw pairs of the ping-pong.
struct Pingpong {
    futex: FutexPair,
    spin: SpinPair,
    mine: Box<dyn DynNotify>,
    _mine_exported: Exported,
    theirs: Box<dyn DynNotify>,
    /// The exporter's channel, subscribed.
    chan_in: Subscriber,
    /// The channel back to the exporter.
    chan_out: Publisher,
}

#[derive(Default)]
struct State {
    backend: Option<Box<dyn DynBackend>>,
    dev: Option<Box<dyn DynDevice>>,
    handles: Vec<String>,
    pingpong: Option<Pingpong>,
    futex_round: u32,
    spin_round: u32,
    /// Descriptors of physical allocations for the bare VMM imports.
    vmm_fds: Vec<std::os::fd::OwnedFd>,
    /// The thread queuing cuda-notify-rtt's round trips.
    rtt: Option<std::thread::JoinHandle<CmdResult>>,
    /// The remote scenarios' node, memory and notifies.
    remote: Option<RemoteSide>,
    /// The remote channel scenarios' node, channel and subscription.
    remote_channel: Option<RemoteChannelSide>,
}

/// Run the consumer (started by `halctl bench`).
pub fn consumer(args: &ConsumerArgs) -> CmdResult {
    if let Some(cpu) = args.cpu {
        pin_to(cpu)?;
    }
    let chan = Channel::connect(&args.control)?;
    chan.set_timeout(PEER_TIMEOUT)?;
    let mut st = State::default();
    loop {
        let (cmd, fds) = chan.recv_json::<Cmd>()?;
        if matches!(cmd, Cmd::Quit) {
            return proto::send_reply(&chan, Reply::default(), &[]);
        }
        let mut series: Vec<Vec<u64>> = Vec::new();
        let reply = match st.run(cmd, fds, &mut series) {
            Ok(r) => r,
            Err(f) => Reply {
                error: Some(f.message),
                ..Reply::default()
            },
        };
        let refs: Vec<&[u64]> = series.iter().map(Vec::as_slice).collect();
        proto::send_reply(&chan, reply, &refs)?;
    }
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

fn decode(text: &str) -> CmdResult<Handle> {
    Handle::from_text(text).map_err(|e| Fail::failed(format!("decoding a handle: {e}")))
}

/// Decode, import, and touch the first byte: a consumer's whole first import.
fn import_touch(dev: &dyn DynDevice, text: &str) -> CmdResult<(Box<dyn DynMapping>, u8)> {
    let handle = decode(text)?;
    let mapping = dev
        .import_memory(SharedHandle::from(handle), &ImportOptions::default())
        .ctx("importing a region")?;
    let mut first = [0u8; 1];
    mapping.read(0, &mut first).ctx("first touch")?;
    Ok((mapping, first[0]))
}

impl State {
    fn dev(&self) -> CmdResult<&dyn DynDevice> {
        self.dev
            .as_deref()
            .ok_or_else(|| Fail::failed("no device is open"))
    }

    fn first_handle(&self) -> CmdResult<&str> {
        self.handles
            .first()
            .map(String::as_str)
            .ok_or_else(|| Fail::failed("no handle was sent"))
    }

    fn run(
        &mut self,
        cmd: Cmd,
        fds: Vec<std::os::fd::OwnedFd>,
        series: &mut Vec<Vec<u64>>,
    ) -> CmdResult<Reply> {
        let mut reply = Reply::default();
        match cmd {
            Cmd::Open { backend, device } => {
                let registry = Registry::new();
                let b = backend::open(&registry, &backend)?;
                self.dev = Some(backend::device(b.as_ref(), device)?);
                self.backend = Some(b);
            }
            Cmd::AddHandles { clear, texts } => {
                if clear {
                    self.handles.clear();
                }
                self.handles.extend(texts);
            }
            Cmd::ImportFirst {
                raw_socket,
                shm_prefix,
                size,
                fresh_connection,
                group,
                direct,
            } => {
                let queue = fds
                    .into_iter()
                    .next()
                    .ok_or_else(|| Fail::failed("the baseline's queue did not arrive"))?;
                let firsts = Firsts {
                    raw_socket: &raw_socket,
                    shm_prefix: &shm_prefix,
                    size,
                    fresh_connection,
                    group,
                    queue: &queue,
                };
                let (taken, _) = hal::exchange::pidfd_getfd_counts();
                let asked_none = hal::exchange::direct_import_count();
                // The broker's scenarios ask it whatever the default is.
                hal::exchange::set_pidfd_getfd(Some(direct));
                let ran = firsts.run(self.dev()?, &self.handles);
                hal::exchange::set_pidfd_getfd(None);
                series.extend(ran?);
                // How many of these imports took their descriptors by
                // pidfd_getfd (`direct`), and how many
                // of those asked no one, for the line's note.
                reply.values = vec![
                    (hal::exchange::pidfd_getfd_counts().0 - taken) as f64,
                    (hal::exchange::direct_import_count() - asked_none) as f64,
                ];
            }
            Cmd::ImportCached { n } => {
                let dev = self.dev()?;
                let handle = decode(self.first_handle()?)?;
                let opts = ImportOptions::default();
                let (held, _) = import_touch(dev, self.first_handle()?)?;
                let mut hal_ns = Vec::with_capacity(n as usize);
                let mut same = true;
                for _ in 0..n {
                    // The handle is decoded and cloned before the clock
                    // starts: what is timed is the import call alone.
                    let shared = SharedHandle::from(handle.clone());
                    let t0 = Instant::now();
                    let again = dev.import_memory(shared, &opts);
                    let dt = t0.elapsed();
                    let again = again.ctx("importing the region again")?;
                    same &= again.addr() == held.addr();
                    drop(again);
                    hal_ns.push(ns(dt));
                }
                let mut timer_ns = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let t0 = Instant::now();
                    timer_ns.push(ns(black_box(t0).elapsed()));
                }
                drop(held);
                reply.values = vec![if same { 1.0 } else { 0.0 }];
                series.push(hal_ns);
                series.push(timer_ns);
            }
            Cmd::ImportEach { direct } => {
                let dev = self.dev()?;
                hal::exchange::set_pidfd_getfd(Some(direct));
                let mut hal_ns = Vec::with_capacity(self.handles.len());
                for text in &self.handles {
                    let t0 = Instant::now();
                    let (mapping, _) = import_touch(dev, text)?;
                    hal_ns.push(ns(t0.elapsed()));
                    drop(mapping);
                }
                hal::exchange::set_pidfd_getfd(None);
                series.push(hal_ns);
            }
            Cmd::Rendezvous {
                name,
                size,
                rounds,
                region,
            } => {
                let dev = self.dev()?;
                let (gathers, imports) = rendezvous(dev, &name, size, rounds, region)?;
                series.push(gathers);
                series.push(imports);
            }
            Cmd::ImportKeep { rounds, direct } => {
                let dev = self.dev()?;
                hal::exchange::set_pidfd_getfd(Some(direct));
                let mut hal_ns = Vec::with_capacity(self.handles.len() * rounds as usize);
                for _ in 0..rounds {
                    let mut kept = Vec::with_capacity(self.handles.len());
                    for text in &self.handles {
                        let t0 = Instant::now();
                        let (mapping, _) = import_touch(dev, text)?;
                        hal_ns.push(ns(t0.elapsed()));
                        kept.push(mapping);
                    }
                }
                hal::exchange::set_pidfd_getfd(None);
                series.push(hal_ns);
            }
            Cmd::NotifySetup { notify, channel } => {
                let [futex_fd, spin_fd]: [std::os::fd::OwnedFd; 2] = fds
                    .try_into()
                    .map_err(|_| Fail::failed("the raw pairs' memfds did not arrive"))?;
                let dev = self.dev()?;
                let parent = std::os::unix::process::parent_id();
                let mine = dev.create_notify().ctx("creating the consumer's notify")?;
                let mine_exported = dev
                    .export_notify(mine.as_ref(), &export_options(dev, &[parent]))
                    .ctx("exporting the consumer's notify")?;
                let theirs = dev
                    .import_notify(
                        SharedHandle::from(decode(&notify)?),
                        &ImportOptions::default(),
                    )
                    .ctx("importing the exporter's notify")?;
                let chan_in = Subscriber::open(dev, &channel, &busy_subscriber())
                    .ctx("subscribing to the exporter's channel")?;
                let chan_out = Publisher::create(dev, &format!("{channel}-back"), &busy_channel())
                    .ctx("creating the consumer's channel")?;
                reply.text = Some(mine_exported.to_text());
                self.pingpong = Some(Pingpong {
                    chan_in,
                    chan_out,
                    futex: FutexPair::open(&futex_fd)?,
                    spin: SpinPair::open(&spin_fd)?,
                    mine,
                    _mine_exported: mine_exported,
                    theirs,
                });
            }
            Cmd::PingPong { plan } => self.answer(&plan)?,
            Cmd::ChannelThroughput {
                channel,
                region,
                sample,
                samples,
                passes,
            } => {
                let dev = self.dev()?;
                series.extend(super::throughput_peer::run(
                    dev,
                    &channel,
                    decode(&region)?,
                    sample,
                    samples,
                    passes,
                )?);
            }
            Cmd::Idle { mode, wait_ns } => {
                let p = self
                    .pingpong
                    .as_ref()
                    .ok_or_else(|| Fail::failed("no notify is set up"))?;
                let wait = Duration::from_nanos(wait_ns);
                let opts = match mode {
                    IdleMode::Blocking => WaitOptions {
                        timeout: Some(wait),
                        spin: Duration::ZERO,
                    },
                    IdleMode::Spin => WaitOptions {
                        timeout: Some(wait),
                        spin: wait,
                    },
                    IdleMode::Adaptive => WaitOptions::timeout(wait),
                };
                let cpu0 = spin::process_cpu()?;
                let t0 = Instant::now();
                let r = p.mine.wait(opts);
                let wall = t0.elapsed();
                let cpu = spin::process_cpu()?.saturating_sub(cpu0);
                match r {
                    Err(e) if e.is_timeout() => {}
                    Err(e) => return Err(Fail::hal("an idle wait", e)),
                    Ok(()) => return Err(Fail::failed("an idle wait was woken by a signal")),
                }
                reply.values = vec![ns(cpu) as f64, ns(wall) as f64];
            }
            Cmd::Bandwidth { passes } => {
                let dev = self.dev()?;
                let (mapping, _) = import_touch(dev, self.first_handle()?)?;
                let path = ReadPath::for_memory(mapping.as_ref());
                let words = (mapping.len() / 8) as usize;
                let mut private: Vec<u64> = Vec::new();
                private.try_reserve_exact(words).map_err(|_| {
                    Fail::failed(format!(
                        "cannot allocate the {}-byte private buffer of the bandwidth baseline",
                        words * 8
                    ))
                })?;
                private.extend((0..words as u64).map(|k| pattern::word(7, k)));
                // A raw memfd of the same size, written and read in place in
                // this process: the floor for memory that can be shared.
                let raw = RawRegion::new(words)?;
                let mut bounce = vec![0u8; pattern::CHUNK];
                // The first pass maps the pages in (page faults); it is
                // reported on its own, not in the percentiles.
                let t0 = Instant::now();
                pattern::read_pass(mapping.as_ref(), path, &mut bounce)?;
                let first = t0.elapsed();
                pattern::read_private(&private, path, &mut bounce);
                pattern::read_private(raw.words(), path, &mut bounce);
                // Host-visible memory and both baselines are read in place by
                // one function at one call site: the same sum compiled at
                // different places (`pattern::read_pass` against
                // `pattern::read_private`) ran up to 8% apart here.
                let in_place = shared_words(mapping.as_ref(), words);
                let mut times: [Vec<u64>; 3] =
                    std::array::from_fn(|_| Vec::with_capacity(passes as usize));
                for i in 0..passes as usize {
                    // The order rotates from pass to pass.
                    for step in 0..3 {
                        let which = (i + step) % 3;
                        let t0 = Instant::now();
                        match (which, in_place) {
                            (0, None) => {
                                pattern::read_pass(mapping.as_ref(), path, &mut bounce)?;
                            }
                            (_, None) => {
                                let w = if which == 1 {
                                    &private[..]
                                } else {
                                    raw.words()
                                };
                                pattern::read_private(w, path, &mut bounce);
                            }
                            (_, Some(shared)) => {
                                let w = [shared, &private[..], raw.words()][which];
                                black_box(crate::pattern::sum_words(black_box(w)));
                            }
                        }
                        times[which].push(ns(t0.elapsed()));
                    }
                }
                reply.values = vec![ns(first) as f64, (words * 8) as f64];
                reply.text = Some(path.label().to_string());
                series.extend(times);
            }
            Cmd::CudaImportFirst { hal } => {
                series.extend(super::cuda_consumer::import_first(
                    self.dev()?,
                    &self.handles,
                    hal,
                )?);
            }
            Cmd::CudaImportCached { n } => {
                let (same, s) = super::cuda_consumer::import_cached(self.dev()?, &self.handles, n)?;
                reply.values = vec![same];
                series.extend(s);
            }
            Cmd::CudaRead { passes } => {
                series.extend(super::cuda_consumer::read(
                    self.dev()?,
                    self.first_handle()?,
                    passes,
                )?);
            }
            Cmd::CudaVmmFds => self.vmm_fds.extend(fds),
            Cmd::CudaVmmImport { size } => {
                let fds = std::mem::take(&mut self.vmm_fds);
                series.extend(super::cuda_consumer::vmm_import(
                    self.dev()?,
                    &self.handles,
                    &fds,
                    size,
                )?);
            }
            Cmd::CudaRttArm { plan } => {
                let fd = fds
                    .into_iter()
                    .next()
                    .ok_or_else(|| Fail::failed("cuda-notify-rtt's page came without its memfd"))?;
                let ordinal = self.dev()?.info().ordinal;
                self.rtt = Some(super::cuda_rtt_peer::arm(ordinal, &self.handles, fd, plan)?);
            }
            Cmd::CudaRttDone => super::cuda_rtt_peer::done(self.rtt.take())?,
            Cmd::CudaChannelRtt {
                ping,
                pong,
                rounds,
                phases,
            } => {
                let fd = fds.into_iter().next().ok_or_else(|| {
                    Fail::failed("cuda-channel-rtt's page came without its memfd")
                })?;
                let ordinal = self.dev()?.info().ordinal;
                let dev = hal::Backend::open(&hal::cuda::CudaBackend::new(), ordinal)
                    .ctx("opening the CUDA device")?;
                series.extend(super::cuda_channel_peer::peer(
                    &dev, &ping, &pong, rounds, phases, &fd,
                )?);
            }
            Cmd::RemoteServe { size } => {
                let dev = self
                    .dev
                    .as_deref()
                    .ok_or_else(|| Fail::failed("no device is open"))?;
                let side = remote_peer::ensure(&mut self.remote)?;
                reply.text = Some(side.serve(dev, size)?);
            }
            Cmd::RemoteJoin { memory, notify } => {
                let side = remote_peer::ensure(&mut self.remote)?;
                reply.text = Some(side.join(memory, &notify)?);
            }
            Cmd::RemoteRead { len, n } => {
                series.push(remote_peer::ensure(&mut self.remote)?.reads(len, n)?);
            }
            Cmd::RemoteCold { n } => {
                series.push(remote_peer::ensure(&mut self.remote)?.colds(n)?);
            }
            Cmd::RemotePingPong { rounds, ping } => {
                let side = remote_peer::ensure(&mut self.remote)?;
                series.push(side.pingpong(rounds, ping)?);
            }
            Cmd::RemoteRendezvous {
                at,
                name,
                size,
                secret,
            } => {
                series.push(super::remote_group_peer::rendezvous(
                    &at, &name, size, &secret,
                )?);
            }
            Cmd::RemoteChannelOffer { slots, slot_size } => {
                let side = remote_channel_peer::ensure(&mut self.remote_channel)?;
                reply.text = Some(side.offer(slots, slot_size)?);
            }
            Cmd::RemoteChannelSubscribe { text } => {
                remote_channel_peer::ensure(&mut self.remote_channel)?.subscribe(&text)?;
            }
            Cmd::RemoteChannelPublish { n, len } => {
                remote_channel_peer::ensure(&mut self.remote_channel)?.publish_n(n, len)?;
            }
            Cmd::RemoteChannelReceive { n } => {
                series.push(remote_channel_peer::ensure(&mut self.remote_channel)?.receive_n(n)?);
            }
            Cmd::RemoteChannelPingPong { rounds, len, ping } => {
                let side = remote_channel_peer::ensure(&mut self.remote_channel)?;
                series.push(side.pingpong(rounds, len, ping)?);
            }
            Cmd::RemoteChannelClose => {
                if let Some(side) = self.remote_channel.as_mut() {
                    side.close();
                }
            }
            Cmd::Quit => {}
        }
        Ok(reply)
    }

    /// Answer the exporter's round trips: wait for its ping on our side,
    /// answer on its side.
    fn answer(&mut self, plan: &[Block]) -> CmdResult {
        let p = self
            .pingpong
            .as_mut()
            .ok_or_else(|| Fail::failed("no notify is set up"))?;
        for block in plan {
            for kind in (0..block.cycles).flat_map(|_| block.kinds.iter().copied()) {
                match kind {
                    Pong::RawFutex => {
                        self.futex_round = self.futex_round.wrapping_add(1);
                        p.futex.pong(self.futex_round, PEER_TIMEOUT)?;
                    }
                    Pong::RawSpin => {
                        self.spin_round = self.spin_round.wrapping_add(1);
                        p.spin.pong(self.spin_round, PEER_TIMEOUT)?;
                    }
                    Pong::HalBlocking | Pong::HalSpin | Pong::HalAdaptive => {
                        let opts = match kind {
                            Pong::HalBlocking => blocking_wait(),
                            Pong::HalSpin => spin_wait(),
                            _ => WaitOptions::timeout(PEER_TIMEOUT),
                        };
                        p.mine
                            .wait(opts)
                            .ctx("waiting for the exporter's ping on our notify")?;
                        p.theirs.signal().ctx("signalling the exporter's notify")?;
                    }
                    Pong::HalChannel => {
                        drop(p.chan_in.receive().ctx("receiving the exporter's sample")?);
                        let loan = p.chan_out.loan().ctx("loaning a slot back")?;
                        loan.write(0, &[1u8; CHANNEL_SAMPLE])
                            .ctx("writing the answer")?;
                        loan.publish(CHANNEL_SAMPLE as u64)
                            .ctx("publishing the answer")?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// One member of the rendezvous scenario: join, export a region, and
/// `rounds` times all-gather the handles and import the next rank's.
fn rendezvous(
    dev: &dyn DynDevice,
    name: &str,
    size: usize,
    rounds: u32,
    region: u64,
) -> CmdResult<(Vec<u64>, Vec<u64>)> {
    let mut group = Group::join(name, size, &GroupOptions::default().timeout(PEER_TIMEOUT))
        .ctx("joining the group")?;
    let mine = dev
        .allocate(&rendezvous_desc(dev, region))
        .ctx("allocating the member's region")?;
    let exported = dev
        .export_memory(
            mine.as_ref(),
            &ExportOptions {
                importers: Importers::Anyone,
                ..Default::default()
            },
        )
        .ctx("exporting the member's region")?;
    let text = exported.to_text();
    let next = (group.rank() + 1) % size;
    let mut gathers = Vec::with_capacity(rounds as usize);
    let mut imports = Vec::with_capacity(rounds as usize);
    for _ in 0..rounds {
        let t0 = Instant::now();
        let all = group
            .all_gather(text.as_bytes())
            .ctx("all-gathering the handles")?;
        gathers.push(ns(t0.elapsed()));
        let theirs = String::from_utf8(all[next].clone())
            .map_err(|_| Fail::failed("a member gathered a handle that is not text"))?;
        let t0 = Instant::now();
        let (mapping, _) = import_touch(dev, &theirs)?;
        imports.push(ns(t0.elapsed()));
        drop(mapping);
    }
    // Nobody drops its export while another may still import it.
    group.barrier().ctx("the group's last barrier")?;
    Ok((gathers, imports))
}

fn rendezvous_desc(dev: &dyn DynDevice, size: u64) -> AllocDesc {
    if dev.capabilities().contains(Capabilities::MEMORY_IS_HOST) {
        AllocDesc::host(size)
    } else {
        AllocDesc::device(dev.info().ordinal, size)
    }
}
