//! The bytes of a raw IPC handle that a backend gives another library: the
//! vendor's own handle bytes, then the range's offset and size as
//! little-endian `u64`s.
//!
//! ```
//! use hal_core::kit::vendor::raw_ipc;
//!
//! let out: [u8; 4 + raw_ipc::RANGE_LEN] = raw_ipc::encode(&[1, 2, 3, 4], 8, 16);
//! let (vendor, offset, size) = raw_ipc::decode::<4>(&out, "raw example handle")?;
//! assert_eq!((vendor, offset, size), ([1, 2, 3, 4], 8, 16));
//! assert!(raw_ipc::decode::<4>(&out[1..], "raw example handle").is_err());
//! # Ok::<(), hal_core::Error>(())
//! ```

use crate::error::{HandleError, Result};
use crate::handle::Handle;
use crate::kit::export::{new_handle, HandleSpec};
use crate::types::ExportOptions;

/// The bytes of the range after the vendor's: the offset and the size.
pub const RANGE_LEN: usize = 16;

/// `vendor`, `offset` and `size` in `M` bytes, `vendor.len() + RANGE_LEN`
/// (a shorter or longer `M` panics).
pub fn encode<const M: usize>(vendor: &[u8], offset: u64, size: u64) -> [u8; M] {
    let n = vendor.len();
    assert_eq!(M, n + RANGE_LEN, "a raw IPC handle of {n} vendor bytes");
    let mut out = [0u8; M];
    out[..n].copy_from_slice(vendor);
    out[n..n + 8].copy_from_slice(&offset.to_le_bytes());
    out[n + 8..].copy_from_slice(&size.to_le_bytes());
    out
}

/// The handle that describes a raw handle another library made, once
/// opened: `spec` and `opts` as an export's, the range `offset` and
/// `size`, the backend's `payload`, and no creator (a raw handle names
/// none).
pub fn opened(
    spec: &HandleSpec,
    opts: &ExportOptions,
    offset: u64,
    size: u64,
    payload: Vec<u8>,
) -> Result<Handle> {
    let mut handle = new_handle(spec, opts)?;
    (
        handle.creator_pid,
        handle.creator_start,
        handle.creator_pid_ns,
    ) = (0, 0, 0);
    handle.offset = offset;
    handle.size = size;
    handle.payload = payload;
    Ok(handle)
}

/// Read what [`encode`] wrote with `N` vendor bytes: the vendor's bytes,
/// the offset and the size; [`HandleError::Malformed`] naming `field` for
/// bytes of another length.
pub fn decode<const N: usize>(b: &[u8], field: &'static str) -> Result<([u8; N], u64, u64)> {
    let len = N + RANGE_LEN;
    if b.len() != len {
        return Err(HandleError::Malformed {
            field,
            detail: format!("{len} bytes expected, {} given", b.len()),
        }
        .into());
    }
    let mut vendor = [0u8; N];
    vendor.copy_from_slice(&b[..N]);
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    Ok((vendor, word(N), word(N + 8)))
}
