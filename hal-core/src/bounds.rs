//! The bounds check every byte-range access makes.

use crate::error::{Error, Result};

/// Check that `offset..offset+len` lies inside `size` bytes.
#[inline]
pub fn check_bounds(offset: u64, len: u64, size: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(outside(offset, len, size)),
    }
}

/// The error of an access out of bounds (out of line: the check above is
/// on every access, the error on none that succeeds).
#[cold]
#[inline(never)]
fn outside(offset: u64, len: u64, size: u64) -> Error {
    Error::invalid(format!(
        "access {offset:#x}+{len:#x} is outside the {size:#x}-byte range"
    ))
}
