//! The CUDA scenarios (`--backend cuda`), each against the bare driver
//! call measured in the same run between the same two processes:
//!
//! | scenario | hal | baseline |
//! |---|---|---|
//! | cuda-import-first | decode + lease + `cuIpcOpenMemHandle_v2` of a fresh allocation | a bare `cuIpcOpenMemHandle_v2` of 64 bytes already in hand (another fresh allocation) |
//! | cuda-import-cached | import of another range of an allocation already imported | the same bare open |
//! | cuda-read | a device-to-device copy out of memory imported from the exporter | the same copy out of the consumer's own allocation |
//! | cuda-vmm-import | decode + broker fetch + `cuMemImportFromShareableHandle` + reserve + map + access | the same four driver calls on a descriptor already in hand |
//! | cuda-free | the drop of a `CudaAllocation` of fresh device memory: `cuMemFree_v2` on a teardown worker, waited for (the free may synchronize the device) | a bare `cuMemFree_v2` of another fresh allocation, in the same process |
//! | cuda-notify-rtt | host `signal` → the other process's stream: `stream_wait_notify` + `record_notify` → host `wait` | a bare `cuStreamWaitValue32` / `cuStreamWriteValue32` ping-pong on two words of a registered shared page (`cuda_rtt.rs`) |
//! | cuda-channel-rtt | stream → the other process's stream → stream through two stream-ordered channels of device memory: memset + `publish_on`, `wait_on` + `release_on` on each side | a bare `cuStreamWriteValue32` / `cuStreamWaitValue32` ping-pong between the two streams (`cuda_channel.rs`) |

use hal::cuda::{CudaBackend, CudaDevice};
use hal::DeviceExt;
use hal::Vmm;
use hal::{
    AllocDesc, Allocation, Backend, ByteRange, Capabilities, Device, ExportOptions, Granularity,
    Memory, PhysicalDesc, PhysicalLocation, ShareableHandle,
};

use super::options::CUDA_MARKER;
use super::proto::{self, Cmd};
use super::report::{summarize, Line, Summary};
use super::{two, Bench, BANDWIDTH_FULL, IMPORT_WARMUP, REGION};
use crate::fail::{CmdResult, Context, Fail};
use crate::stats::ratio;

/// Allocations per batch of cuda-import-first (half exported by hal, half raw).
const CUDA_BATCH: usize = 250;
/// At most this many cuda-import-first samples of each kind: every one is a
/// fresh open of a fresh allocation.
const CUDA_IMPORTS_MAX: usize = 2000;
/// At most this many cuda-vmm-import samples of each kind.
const CUDA_VMM_MAX: usize = 500;
/// Physical allocations per batch of cuda-vmm-import, of each kind.
const CUDA_VMM_BATCH: usize = 50;
/// At most this many cuda-free samples of each kind.
const CUDA_FREES_MAX: usize = 2000;
/// The size of each cuda-free allocation.
const CUDA_FREE_SIZE: u64 = 1 << 20;
/// Descriptors per control message (the channel's bound).
const FDS_PER_MESSAGE: usize = 4;
/// `RawIpcHandle` bytes as a handle-list entry.
fn raw_text(raw: &hal::cuda::RawIpcHandle) -> String {
    raw.to_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

impl Bench<'_> {
    /// The CUDA scenarios.
    pub(super) fn cuda(&mut self) -> CmdResult {
        let ordinal = self.dev.info().ordinal;
        let dev = CudaBackend::new()
            .open(ordinal)
            .ctx("opening the CUDA device")?;
        if self.wants("cuda-import-first") || self.wants("cuda-import-cached") {
            let bare = self.cuda_import_first(&dev)?;
            if self.wants("cuda-import-cached") {
                self.cuda_import_cached(&dev, bare)?;
            }
        }
        if self.wants("cuda-read") {
            self.cuda_read(&dev)?;
        }
        if self.wants("cuda-vmm-import") {
            if dev.capabilities().contains(Capabilities::VMM) {
                self.cuda_vmm_import(&dev)?;
            } else {
                eprintln!("cuda-vmm-import: skipped, the device offers no VMM");
            }
        }
        if self.wants("cuda-free") {
            self.cuda_free(&dev)?;
        }
        if self.wants("cuda-notify-rtt") {
            if dev
                .capabilities()
                .contains(Capabilities::STREAM_ORDERED_NOTIFY)
            {
                self.cuda_notify_rtt(&dev)?;
            } else {
                eprintln!("cuda-notify-rtt: skipped, the device has no stream memory operations");
            }
        }
        if self.wants("cuda-channel-rtt") {
            let needed = Capabilities::STREAM_ORDERED_NOTIFY | Capabilities::IPC_EVENT;
            if dev.capabilities().contains(needed) {
                self.cuda_channel_rtt(&dev)?;
            } else {
                eprintln!(
                    "cuda-channel-rtt: skipped, the device has no stream memory operations or \
                     no interprocess events"
                );
            }
        }
        Ok(())
    }

    /// A region of `size` bytes of device memory starting with the marker.
    fn cuda_region(dev: &CudaDevice, size: u64) -> CmdResult<hal::cuda::CudaAllocation> {
        let a = dev
            .allocate(&AllocDesc::device(dev.info().ordinal, size))
            .ctx("allocating device memory")?;
        a.write(0, &[CUDA_MARKER]).ctx("writing device memory")?;
        Ok(a)
    }

    /// cuda-import-first; gives the bare opens' summary.
    fn cuda_import_first(&mut self, dev: &CudaDevice) -> CmdResult<Summary> {
        let total = self.plan.import_n.min(CUDA_IMPORTS_MAX) + IMPORT_WARMUP;
        let mut hal_all = Vec::with_capacity(total);
        let mut bare_all = Vec::with_capacity(total);
        while hal_all.len() < total {
            let n = (total - hal_all.len()).min(CUDA_BATCH);
            let mut regions = Vec::with_capacity(2 * n);
            let mut texts = Vec::with_capacity(2 * n);
            let mut exports = Vec::with_capacity(n);
            for _ in 0..n {
                let a = Self::cuda_region(dev, REGION)?;
                let ex = dev
                    .export_memory(&a, &ExportOptions::default())
                    .ctx("exporting device memory")?;
                texts.push(ex.to_text());
                exports.push(ex);
                regions.push(a);
            }
            for _ in 0..n {
                let a = Self::cuda_region(dev, REGION)?;
                let raw = dev.export_raw(&a, None).ctx("taking the raw handle")?;
                texts.push(raw_text(&raw));
                regions.push(a);
            }
            proto::send_handles(&self.peer.chan, &self.peer.who(), &texts)?;
            let (_, series) = self.peer.call(&Cmd::CudaImportFirst { hal: n })?;
            let [hal_ns, bare_ns] = two(series)?;
            hal_all.extend(hal_ns);
            bare_all.extend(bare_ns);
            // The consumer closed every open before it answered.
            drop(exports);
            drop(regions);
        }
        let v = summarize(hal_all.into_iter().skip(IMPORT_WARMUP).collect());
        let b = summarize(bare_all.into_iter().skip(IMPORT_WARMUP).collect());
        if self.wants("cuda-import-first") {
            let r = ratio(v.p50_ns as f64, b.p50_ns as f64);
            let line = Line::new(
                "cuda-import-first",
                &self.backend,
                v,
                Some((
                    "cuda-import-first: a bare cuIpcOpenMemHandle_v2 of the 64 bytes of a fresh \
                     allocation, already in hand, in the consumer",
                    b,
                )),
            )
            .target("ratio_p50 <= 1.3", r <= 1.3);
            self.printer.emit(line)?;
        }
        Ok(b)
    }

    /// cuda-import-cached, against the bare opens of cuda-import-first.
    fn cuda_import_cached(&mut self, dev: &CudaDevice, bare: Summary) -> CmdResult {
        let a = Self::cuda_region(dev, REGION)?;
        let whole = dev
            .export_memory(&a, &ExportOptions::default())
            .ctx("exporting device memory")?;
        let page = dev.info().page_size();
        let part = dev
            .export_memory(
                &a,
                &ExportOptions {
                    range: Some(ByteRange::new(page, page)),
                    ..ExportOptions::default()
                },
            )
            .ctx("exporting a range")?;
        proto::send_handles(
            &self.peer.chan,
            &self.peer.who(),
            &[whole.to_text(), part.to_text()],
        )?;
        let (reply, series) = self.peer.call(&Cmd::CudaImportCached {
            n: self.plan.cached_n.min(100_000),
        })?;
        let [hal_ns] = super::one(series)?;
        let v = summarize(hal_ns);
        let r = ratio(v.p50_ns as f64, bare.p50_ns as f64);
        let mut line = Line::new(
            "cuda-import-cached",
            &self.backend,
            v,
            Some((
                "cuda-import-cached: the bare cuIpcOpenMemHandle_v2 of cuda-import-first",
                bare,
            )),
        )
        .target("ratio_p50 <= 1/300", r <= 1.0 / 300.0);
        line.cached = Some(reply.values.first().copied() == Some(1.0));
        line.note =
            Some("another range of an allocation the consumer holds open; decoded before".into());
        self.printer.emit(line)?;
        drop((whole, part));
        a.wait_unleased(Some(proto::PEER_TIMEOUT))
            .ctx("waiting for the consumer's leases")?;
        Ok(())
    }

    /// cuda-read: the GPU copies out of imported memory and out of its own.
    fn cuda_read(&mut self, dev: &CudaDevice) -> CmdResult {
        let size = self.plan.bandwidth;
        let a = Self::cuda_region(dev, size)?;
        let ex = dev
            .export_memory(&a, &ExportOptions::default())
            .ctx("exporting the cuda-read region")?;
        proto::send_handles(&self.peer.chan, &self.peer.who(), &[ex.to_text()])?;
        let (_, series) = self.peer.call(&Cmd::CudaRead {
            passes: self.plan.passes,
        })?;
        let [imported_ns, own_ns] = two(series)?;
        let (v, b) = (summarize(imported_ns), summarize(own_ns));
        let gbps = |t: u64| ratio(size as f64, t as f64);
        let mut line = Line::new(
            "cuda-read",
            &self.backend,
            v,
            Some((
                "cuda-read: the same device-to-device copy out of the consumer's own allocation",
                b,
            )),
        );
        let r = ratio(gbps(v.p50_ns), gbps(b.p50_ns));
        line.ratio_p50 = Some(r);
        line.ratio_iqm = Some(ratio(b.iqm_ns, v.iqm_ns));
        line.gbps = Some(gbps(v.p50_ns));
        line.baseline_gbps = Some(gbps(b.p50_ns));
        line.size_bytes = Some(size);
        line.note = Some(if size == BANDWIDTH_FULL {
            "times are per copy of the whole region".into()
        } else {
            format!(
                "{} run: a {} region instead of {}; times are per copy",
                self.plan.name,
                crate::out::bytes(size),
                crate::out::bytes(BANDWIDTH_FULL)
            )
        });
        let line = line.target("ratio_p50 >= 0.95", r >= 0.95);
        self.printer.emit(line)?;
        drop(ex);
        if a.importers().ctx("counting importers")? != 0 {
            return Err(Fail::failed(
                "the consumer still holds the cuda-read region",
            ));
        }
        Ok(())
    }

    /// cuda-vmm-import: the consumer imports, reserves, maps and gives
    /// access to fresh physical allocations, against the bare driver calls
    /// on descriptors sent beforehand.
    fn cuda_vmm_import(&mut self, dev: &CudaDevice) -> CmdResult {
        let size = dev
            .granularity(Granularity::Minimum)
            .ctx("asking the granularity")?;
        let desc = PhysicalDesc::new(size)
            .location(PhysicalLocation::Device(dev.info().ordinal))
            .handle(ShareableHandle::PosixFd);
        let total = self.plan.import_n.min(CUDA_VMM_MAX) + IMPORT_WARMUP;
        let mut hal_all = Vec::with_capacity(total);
        let mut bare_all = Vec::with_capacity(total);
        while hal_all.len() < total {
            let n = (total - hal_all.len()).min(CUDA_VMM_BATCH);
            let mut physicals = Vec::with_capacity(2 * n);
            let mut texts = Vec::with_capacity(n);
            let mut exports = Vec::with_capacity(n);
            let mut fds = Vec::with_capacity(n);
            for i in 0..2 * n {
                let p = dev
                    .allocate_physical_with(&desc)
                    .ctx("allocating physical memory")?;
                let ex = dev
                    .export_physical(&p, &ExportOptions::default())
                    .ctx("exporting physical memory")?;
                if i < n {
                    texts.push(ex.to_text());
                    exports.push(ex);
                } else {
                    // The baseline's descriptor, sent ahead over the channel.
                    let mut shared = ex.share().ctx("the export's descriptor")?;
                    fds.append(&mut shared.fds);
                }
                physicals.push(p);
            }
            proto::send_handles(&self.peer.chan, &self.peer.who(), &texts)?;
            for part in fds.chunks(FDS_PER_MESSAGE) {
                let raw: Vec<std::os::fd::BorrowedFd<'_>> =
                    part.iter().map(std::os::fd::AsFd::as_fd).collect();
                self.peer.chan.send_json(&Cmd::CudaVmmFds, &raw)?;
                proto::recv_reply(&self.peer.chan, &self.peer.who())?;
            }
            drop(fds);
            let (_, series) = self.peer.call(&Cmd::CudaVmmImport { size })?;
            let [hal_ns, bare_ns] = two(series)?;
            hal_all.extend(hal_ns);
            bare_all.extend(bare_ns);
            drop(exports);
            drop(physicals);
        }
        let v = summarize(hal_all.into_iter().skip(IMPORT_WARMUP).collect());
        let b = summarize(bare_all.into_iter().skip(IMPORT_WARMUP).collect());
        let r = ratio(v.p50_ns as f64, b.p50_ns as f64);
        let line = Line::new(
            "cuda-vmm-import",
            &self.backend,
            v,
            Some((
                "cuda-vmm-import: cuMemImportFromShareableHandle + cuMemAddressReserve + \
                 cuMemMap + cuMemSetAccess on a descriptor already in hand, in the consumer",
                b,
            )),
        )
        .target("ratio_p50 <= 1.3", r <= 1.3);
        self.printer.emit(line)
    }

    /// cuda-free: dropping hal's device memory against a bare free, the
    /// two interleaved on fresh allocations of the same size.
    fn cuda_free(&mut self, dev: &CudaDevice) -> CmdResult {
        let total = self.plan.import_n.min(CUDA_FREES_MAX) + IMPORT_WARMUP;
        let desc = AllocDesc::device(dev.info().ordinal, CUDA_FREE_SIZE);
        let mut hal_ns = Vec::with_capacity(total);
        let mut bare_ns = Vec::with_capacity(total);
        for _ in 0..total {
            let a = dev.allocate(&desc).ctx("allocating device memory")?;
            let bare = dev
                .bare_alloc(CUDA_FREE_SIZE)
                .ctx("allocating bare device memory")?;
            let t = std::time::Instant::now();
            drop(a);
            hal_ns.push(t.elapsed().as_nanos() as u64);
            let t = std::time::Instant::now();
            bare.free().ctx("a bare cuMemFree_v2")?;
            bare_ns.push(t.elapsed().as_nanos() as u64);
        }
        let v = summarize(hal_ns.into_iter().skip(IMPORT_WARMUP).collect());
        let b = summarize(bare_ns.into_iter().skip(IMPORT_WARMUP).collect());
        let mut line = Line::new(
            "cuda-free",
            &self.backend,
            v,
            Some((
                "cuda-free: a bare cuMemFree_v2 of another fresh allocation, in the same process",
                b,
            )),
        );
        line.size_bytes = Some(CUDA_FREE_SIZE);
        line.note = Some(
            "no target: the price of freeing on a teardown worker, so that a free the driver \
             synchronizes cannot hang a drop behind work that waits for a crashed peer"
                .into(),
        );
        self.printer.emit(line)
    }
}
