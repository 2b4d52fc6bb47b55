//! Placement hints: NUMA policy (`mbind`), transparent huge pages
//! (`madvise(MADV_HUGEPAGE)`) and prefaulting (`MADV_POPULATE_WRITE`, or a
//! touch of every page on kernels without it).

use std::path::Path;

use hal_core::kit::os;
use hal_core::{Error, HugePages, NumaPolicy, Placement, Result};

use crate::view::View;

const MPOL_PREFERRED: i32 = 1;
const MPOL_BIND: i32 = 2;
const MPOL_INTERLEAVE: i32 = 3;
const MADV_POPULATE_WRITE: i32 = 23;
const NODE_DIR: &str = "/sys/devices/system/node";

fn check_nodes(nodes: &[u32]) -> Result<()> {
    if nodes.is_empty() {
        return Err(Error::invalid("a NUMA policy needs at least one node"));
    }
    let have = os::numa_nodes();
    for n in nodes {
        if !have.contains(n) && !Path::new(&format!("{NODE_DIR}/node{n}")).exists() {
            return Err(Error::invalid(format!(
                "NUMA node {n} does not exist on this machine (nodes: {have:?})"
            )));
        }
    }
    Ok(())
}

/// Apply `placement` to a fresh mapping: NUMA policy first, then huge-page
/// advice, then prefault (which then allocates under the policy).
pub(crate) fn apply(view: &View, placement: &Placement) -> Result<()> {
    match &placement.numa {
        NumaPolicy::Default => {}
        NumaPolicy::Bind(nodes) => mbind(view, MPOL_BIND, nodes)?,
        NumaPolicy::Interleave(nodes) => mbind(view, MPOL_INTERLEAVE, nodes)?,
        NumaPolicy::Preferred(node) => mbind(view, MPOL_PREFERRED, &[*node])?,
    }
    if placement.huge_pages == HugePages::Transparent {
        if let Err(e) = view.advise(0, view.len(), libc::MADV_HUGEPAGE) {
            log::warn!(
                "transparent huge pages are not available ({e}); the region uses normal pages"
            );
        }
    }
    if placement.prefault {
        prefault(view)?;
    }
    Ok(())
}

fn mbind(view: &View, mode: i32, nodes: &[u32]) -> Result<()> {
    check_nodes(nodes)?;
    let max = nodes.iter().copied().max().unwrap_or(0) as usize;
    let mut mask = vec![0u64; max / 64 + 1];
    for &n in nodes {
        mask[n as usize / 64] |= 1 << (n % 64);
    }
    // The kernel reads `maxnode - 1` bits.
    let maxnode = (mask.len() * 64 + 1) as libc::c_ulong;
    // SAFETY: the range is a live mapping owned by `view`; the mask buffer
    // holds `maxnode - 1` bits and outlives the call; mbind changes no memory
    // contents (flags 0: no page migration).
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            view.ptr(),
            view.len() as libc::c_ulong,
            mode,
            mask.as_ptr(),
            maxnode,
            0u32,
        )
    };
    if r != 0 {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENOSYS) if nodes == [0] => {
                log::warn!("this kernel has no NUMA support; policy on node 0 ignored");
                Ok(())
            }
            Some(libc::EPERM) => Err(Error::PermissionDenied {
                pid: None,
                reason: format!(
                    "mbind refused ({err}); a container's seccomp profile may forbid NUMA \
                     policies without CAP_SYS_NICE"
                ),
            }),
            _ => Err(Error::io(format!("mbind to NUMA nodes {nodes:?}"), err)),
        };
    }
    Ok(())
}

fn prefault(view: &View) -> Result<()> {
    if view.advise(0, view.len(), MADV_POPULATE_WRITE).is_ok() {
        return Ok(());
    }
    log::warn!("MADV_POPULATE_WRITE is not available; prefaulting by touching every page");
    let page = View::page();
    let mut off = 0;
    let mut byte = [0u8; 1];
    while off < view.len() {
        view.read(off, &mut byte)?;
        view.write(off, &byte)?;
        off += page;
    }
    Ok(())
}
