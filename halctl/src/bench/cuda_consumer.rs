//! The consumer's side of the CUDA scenarios ([`super::cuda`]).

use std::time::Instant;

use hal::cuda::{CudaBackend, RawIpcHandle};
use hal::dynamic::{DynDevice, DynMapping, DynMemRef};
use hal::{
    Access, AccessGrant, AccessTarget, AllocDesc, Backend, Handle, ImportOptions, SharedHandle,
};

use super::options::CUDA_MARKER;
use crate::fail::{CmdResult, Context, Fail};

fn ns(t0: Instant) -> u64 {
    t0.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64
}

fn decode(text: &str) -> CmdResult<Handle> {
    Handle::from_text(text).map_err(|e| Fail::failed(format!("decoding a handle: {e}")))
}

fn decode_raw(hex: &str) -> CmdResult<RawIpcHandle> {
    let bytes: Option<Vec<u8>> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    let bytes = bytes.ok_or_else(|| Fail::failed("a raw handle that is not hex"))?;
    RawIpcHandle::from_bytes(&bytes).ctx("decoding a raw handle")
}

fn import(dev: &dyn DynDevice, text: &str) -> CmdResult<Box<dyn DynMapping>> {
    dev.import_memory(SharedHandle::from(decode(text)?), &ImportOptions::default())
        .ctx("importing device memory")
}

/// cuda-import-first: the first `hal` handles are hal's, the rest raw.
/// Series: hal (decode + import), bare opens.
pub(super) fn import_first(
    dev: &dyn DynDevice,
    handles: &[String],
    hal: usize,
) -> CmdResult<Vec<Vec<u64>>> {
    let cuda = CudaBackend::new()
        .open(dev.info().ordinal)
        .ctx("opening the CUDA device")?;
    let (texts, raws) = handles.split_at(hal.min(handles.len()));
    let raws: Vec<RawIpcHandle> = raws
        .iter()
        .map(|h| decode_raw(h))
        .collect::<CmdResult<_>>()?;
    let mut hal_ns = Vec::with_capacity(texts.len());
    let mut bare_ns = Vec::with_capacity(raws.len());
    // Everything opened stays open until the batch ends, as a consumer
    // importing many blocks keeps them.
    let mut kept = Vec::with_capacity(texts.len());
    let mut bare_kept = Vec::with_capacity(raws.len());
    for (i, (text, raw)) in texts.iter().zip(&raws).enumerate() {
        // Alternate which goes first.
        for step in 0..2 {
            if (i + step) % 2 == 0 {
                let t0 = Instant::now();
                let opened = cuda.bare_ipc_open(raw);
                bare_ns.push(ns(t0));
                bare_kept.push(opened.ctx("a bare cuIpcOpenMemHandle_v2")?);
            } else {
                let t0 = Instant::now();
                let m = import(dev, text);
                hal_ns.push(ns(t0));
                kept.push(m?);
            }
        }
    }
    let mut first = [0u8; 1];
    for m in &kept {
        m.read(0, &mut first).ctx("reading an import")?;
        if first[0] != CUDA_MARKER {
            return Err(Fail::failed("an import read a wrong first byte"));
        }
    }
    drop((kept, bare_kept));
    Ok(vec![hal_ns, bare_ns])
}

/// cuda-import-cached: the whole region held, another range imported `n`
/// times. Series: hal; reply value: 1 when every import was a range of
/// the open held.
pub(super) fn import_cached(
    dev: &dyn DynDevice,
    handles: &[String],
    n: u32,
) -> CmdResult<(f64, Vec<Vec<u64>>)> {
    let [whole, part] = handles else {
        return Err(Fail::failed("cuda-import-cached takes two handles"));
    };
    let held = import(dev, whole)?;
    let part = decode(part)?;
    let offset = part.offset;
    let opts = ImportOptions::default();
    let mut hal_ns = Vec::with_capacity(n as usize);
    let mut same = true;
    for _ in 0..n {
        let shared = SharedHandle::from(part.clone());
        let t0 = Instant::now();
        let again = dev.import_memory(shared, &opts);
        hal_ns.push(ns(t0));
        let again = again.ctx("importing a range again")?;
        same &= again.addr() == held.addr() + offset;
    }
    Ok((if same { 1.0 } else { 0.0 }, vec![hal_ns]))
}

/// cuda-read: `passes` copies of the imported region into a buffer of
/// this process, interleaved with the same copy out of an allocation of
/// its own. Series: imported, own.
pub(super) fn read(dev: &dyn DynDevice, text: &str, passes: u32) -> CmdResult<Vec<Vec<u64>>> {
    let m = import(dev, text)?;
    let len = m.len();
    let ordinal = dev.info().ordinal;
    let own = dev
        .allocate(&AllocDesc::device(ordinal, len))
        .ctx("allocating the own region")?;
    let dst = dev
        .allocate(&AllocDesc::device(ordinal, len))
        .ctx("allocating the copy's target")?;
    let stream = dev.create_stream().ctx("creating a stream")?;
    let mut imported_ns = Vec::with_capacity(passes as usize);
    let mut own_ns = Vec::with_capacity(passes as usize);
    for i in 0..passes {
        for step in 0..2 {
            let from_import = (i + step) % 2 == 0;
            let src = if from_import {
                DynMemRef::Mapping(m.as_ref())
            } else {
                DynMemRef::Allocation(own.as_ref())
            };
            let t0 = Instant::now();
            dev.copy_async(
                stream.as_ref(),
                DynMemRef::Allocation(dst.as_ref()),
                0,
                src,
                0,
                len,
            )
            .ctx("queueing a copy")?;
            dev.synchronize(stream.as_ref(), None)
                .ctx("waiting for a copy")?;
            let dt = ns(t0);
            if from_import {
                imported_ns.push(dt);
                let mut first = [0u8; 1];
                dst.read(0, &mut first).ctx("reading the copy")?;
                if first[0] != CUDA_MARKER {
                    return Err(Fail::failed("the copy out of the import read a wrong byte"));
                }
            } else {
                own_ns.push(dt);
            }
        }
    }
    Ok(vec![imported_ns, own_ns])
}

/// cuda-vmm-import: each listed physical handle imported, reserved, mapped
/// and given access, interleaved with bare imports of `fds`. Series: hal,
/// bare.
pub(super) fn vmm_import(
    dev: &dyn DynDevice,
    handles: &[String],
    fds: &[std::os::fd::OwnedFd],
    size: u64,
) -> CmdResult<Vec<Vec<u64>>> {
    use std::os::fd::AsFd;

    let ordinal = dev.info().ordinal;
    let cuda = CudaBackend::new()
        .open(ordinal)
        .ctx("opening the CUDA device")?;
    let grant = [AccessGrant {
        target: AccessTarget::Device(ordinal),
        access: Access::ReadWrite,
    }];
    let mut hal_ns = Vec::with_capacity(handles.len());
    let mut bare_ns = Vec::with_capacity(fds.len());
    let mut kept = Vec::with_capacity(handles.len());
    let mut bare_kept = Vec::with_capacity(fds.len());
    for (i, (text, fd)) in handles.iter().zip(fds).enumerate() {
        for step in 0..2 {
            if (i + step) % 2 == 0 {
                let t0 = Instant::now();
                let bare = cuda.bare_vmm_import(fd.as_fd(), size);
                bare_ns.push(ns(t0));
                bare_kept.push(bare.ctx("a bare VMM import")?);
            } else {
                let t0 = Instant::now();
                let made = (|| {
                    let shared = SharedHandle::from(decode(text)?);
                    let phys = dev
                        .vmm()
                        .import_physical(shared, &ImportOptions::default())
                        .ctx("importing physical memory")?;
                    let res = dev.vmm().reserve(size, 0).ctx("reserving")?;
                    dev.vmm()
                        .map(res.as_ref(), 0, phys.as_ref())
                        .ctx("mapping")?;
                    dev.vmm()
                        .set_access_for(res.as_ref(), 0, size, &grant)
                        .ctx("setting access")?;
                    CmdResult::Ok((phys, res))
                })();
                hal_ns.push(ns(t0));
                kept.push(made?);
            }
        }
    }
    // Undone outside the clock: mappings first, then the allocations.
    for (phys, res) in kept {
        drop(res);
        drop(phys);
    }
    drop(bare_kept);
    Ok(vec![hal_ns, bare_ns])
}
