//! Copies that touch home pages: host-synchronous, after the stream's
//! earlier work, straight between the registered pages and the GPU's
//! memory (`cuMemcpyHtoD` / `cuMemcpyDtoH` from registered pages run at
//! pinned speed, 55 GB/s measured), never through a bounce buffer.

use hal_core::device::check_bounds;
use hal_core::{Error, Memory, Result};

/// The home pages `offset..offset + len` of `home` as bytes.
fn bytes(home: &dyn Memory, offset: u64, len: u64) -> Result<&[u8]> {
    check_bounds(offset, len, home.len())?;
    let base = home
        .host_ptr()
        .ok_or_else(|| Error::invalid("home pages without a host address"))?;
    let len = usize::try_from(len).map_err(|_| Error::invalid("a copy too large for memory"))?;
    // SAFETY: the range lies inside the mapping (bounds checked), which
    // `home` keeps mapped while the borrow lives. The pages are shared with
    // other processes and the GPU: what they write meanwhile is plain data
    // to this copy, as for every shared mapping.
    Ok(unsafe { std::slice::from_raw_parts(base.add(offset as usize), len) })
}

/// The home pages `offset..offset + len` of `home` as writable bytes.
#[allow(clippy::mut_from_ref)]
fn bytes_mut(home: &dyn Memory, offset: u64, len: u64) -> Result<&mut [u8]> {
    if home.is_read_only() {
        return Err(Error::PermissionDenied {
            pid: None,
            reason: "the shared managed buffer is mapped read-only here; writes are refused".into(),
        });
    }
    let b = bytes(home, offset, len)?;
    // SAFETY: as in `bytes`, and the mapping is writable (checked above);
    // the slice lives only for the copy into it.
    Ok(unsafe { std::slice::from_raw_parts_mut(b.as_ptr().cast_mut(), b.len()) })
}

/// Copy `len` bytes from `src` at `src_offset` into `dst` at `dst_offset`,
/// at least one of them home pages (`dst_home`, `src_home`).
pub fn copy(
    dst: &dyn Memory,
    dst_offset: u64,
    dst_home: bool,
    src: &dyn Memory,
    src_offset: u64,
    src_home: bool,
    len: u64,
) -> Result<()> {
    check_bounds(src_offset, len, src.len())?;
    check_bounds(dst_offset, len, dst.len())?;
    match (dst_home, src_home) {
        // The GPU's memory from the home pages.
        (false, true) => dst.write(dst_offset, bytes(src, src_offset, len)?),
        // The home pages from the GPU's memory.
        (true, false) => src.read(src_offset, bytes_mut(dst, dst_offset, len)?),
        // Home to home: a bounce keeps overlapping ranges of one buffer right.
        _ => {
            let staged = bytes(src, src_offset, len)?.to_vec();
            dst.write(dst_offset, &staged)
        }
    }
}

/// Set `len` bytes of the home pages `dst` at `offset` to `value`.
pub fn fill(dst: &dyn Memory, offset: u64, len: u64, value: u8) -> Result<()> {
    bytes_mut(dst, offset, len)?.fill(value);
    Ok(())
}
