//! Samples in place handed to C: what `hal_receive_sample` and
//! `hal_remote_receive_sample` answer, and what `hal_sample_read` and
//! `hal_remote_sample_read` copy out, for a sample of either kind of
//! subscriber ([`SampleObj`]).

use std::ffi::c_void;
use std::sync::Arc;

use hal_facade::objects::{SampleObj, SampleSource};

use crate::device::{need, put};
use crate::status::Failure;
use crate::table::Table;

/// Keep `sample` in `table` and hand it out: `out` receives its token (as
/// `*mut O`), `out_ptr` (may be NULL) its address where the slots are
/// host-visible (NULL otherwise), `out_len` its length, `out_seq` (may be
/// NULL) its sequence number.
///
/// # Safety
///
/// `out` and `out_len` are not NULL (checked before the sample was
/// received) and valid for a write; `out_ptr` and `out_seq` NULL or valid
/// for a write.
pub(crate) unsafe fn hand_out<S: SampleSource, O>(
    table: &Table<SampleObj<S>>,
    sample: SampleObj<S>,
    out: *mut *mut O,
    out_ptr: *mut *const c_void,
    out_len: *mut u64,
    out_seq: *mut u64,
) -> Result<(), Failure> {
    let (host, len, seq) = (sample.host(), sample.len(), sample.sequence());
    let token = table.insert(Arc::new(sample));
    if !out_ptr.is_null() {
        let at = host.map_or(std::ptr::null(), |h| h.cast::<c_void>());
        // SAFETY: not NULL, and valid per the contract.
        unsafe { out_ptr.write(at) };
    }
    if !out_seq.is_null() {
        // SAFETY: not NULL, and valid per the contract.
        unsafe { out_seq.write(seq) };
    }
    // SAFETY: not NULL and valid per the contract.
    unsafe { put(out_len, len, "out_len") }?;
    // SAFETY: as above.
    unsafe { put(out, token as *mut O, "out") }
}

/// Copy `len` bytes of the sample `token` of `table` from `offset` into
/// `dst`.
///
/// # Safety
///
/// `dst` is valid for a write of `len` bytes (or `len` is 0).
pub(crate) unsafe fn read_out<S: SampleSource>(
    table: &Table<SampleObj<S>>,
    token: usize,
    offset: u64,
    dst: *mut c_void,
    len: usize,
) -> Result<(), Failure> {
    let sample = table.get(token, "sample")?;
    sample.check(offset, len as u64)?;
    if len == 0 {
        return Ok(());
    }
    need(dst, "dst")?;
    // SAFETY: not NULL, and valid for `len` bytes per the contract.
    let out = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), len) };
    Ok(sample.read(offset, out)?)
}
