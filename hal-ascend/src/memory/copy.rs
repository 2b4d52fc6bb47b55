//! Host copies: device memory read into and written from host buffers
//! with `aclrtMemcpy`, with the device current, never dereferenced.

use hal_core::device::check_bounds;
use hal_core::Result;

use crate::context::Ctx;
use crate::ffi::result::mem;

/// Copy out of the live device range `base..base + len` (`aclrtMemcpy`
/// device to host), with the device current.
pub(crate) fn copy_out(ctx: &Ctx, base: u64, len: u64, offset: u64, dst: &mut [u8]) -> Result<()> {
    check_bounds(offset, dst.len() as u64, len)?;
    if dst.is_empty() {
        return Ok(());
    }
    ctx.call(|| mem::copy_to_host(&ctx.rt, dst, base + offset))
}

/// Copy into the live device range `base..base + len` (`aclrtMemcpy` host
/// to device), with the device current.
pub(crate) fn copy_in(ctx: &Ctx, base: u64, len: u64, offset: u64, src: &[u8]) -> Result<()> {
    check_bounds(offset, src.len() as u64, len)?;
    if src.is_empty() {
        return Ok(());
    }
    ctx.call(|| mem::copy_from_host(&ctx.rt, base + offset, src))
}
