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
    // Decimal, as every size and offset a caller passes (and the bindings'
    // messages) are written.
    Error::invalid(format!(
        "an access of {len} bytes at offset {offset} is outside the {size}-byte range"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_access_out_of_bounds_is_told_in_decimal() {
        check_bounds(7999, 1, 8000).unwrap();
        let e = check_bounds(7999, 2, 8000).unwrap_err().to_string();
        assert!(
            e.contains("an access of 2 bytes at offset 7999 is outside the 8000-byte range"),
            "{e}"
        );
        assert!(!e.contains("0x"), "{e}");
        let e = check_bounds(u64::MAX, 1, 16).unwrap_err().to_string();
        assert!(e.contains(&format!("offset {}", u64::MAX)), "{e}");
    }
}
