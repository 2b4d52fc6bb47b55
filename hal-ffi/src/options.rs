//! The option structures: read as far as the caller's `size` says, so that
//! they can grow without breaking callers built against an older header.

use std::mem::{offset_of, size_of};

use hal_facade::objects::pids_importers;
use hal_facade::{ExportOptions, Importers};

use crate::status::Failure;

/// Who may import: the backend's default (anyone on CPU shared memory and
/// CUDA, nobody until pids are added on Ascend).
pub const HAL_IMPORTERS_DEFAULT: u32 = 0;
/// Who may import: any process on this machine, of any user (an importer
/// of another user takes the descriptors once it trusts the exporter's
/// user: `hal_trust_exporter_uid`, or `HAL_TRUST_EXPORTER_UIDS`).
pub const HAL_IMPORTERS_ANYONE: u32 = 1;
/// Who may import: only the processes `pids` lists.
pub const HAL_IMPORTERS_PIDS: u32 = 2;
/// Who may import: any process of this process's user, however many,
/// checked by the exporter's broker against each importer's uid (root is
/// another user). Where the backend's sharing cannot check it (legacy CUDA
/// IPC, Ascend, named regions) the export answers
/// `HAL_ERR_UNSUPPORTED`.
pub const HAL_IMPORTERS_SAME_USER: u32 = 3;

/// Options of `hal_export`, `hal_notify_export`, `hal_event_export` and
/// `hal_export_tensor`. NULL options mean the defaults (importers:
/// the backend's default; writable).
///
/// ```c
/// uint32_t pid = child;
/// hal_export_options opts = {sizeof opts, HAL_IMPORTERS_PIDS, &pid, 1, false};
/// ```
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct hal_export_options {
    /// `sizeof(hal_export_options)`: fields past it are taken as zero.
    pub size: u32,
    /// `HAL_IMPORTERS_DEFAULT`, `HAL_IMPORTERS_ANYONE`, `HAL_IMPORTERS_PIDS`
    /// or `HAL_IMPORTERS_SAME_USER`.
    pub importers_kind: u32,
    /// With `HAL_IMPORTERS_PIDS`: the process ids allowed to import.
    pub pids: *const u32,
    /// How many ids `pids` holds.
    pub n_pids: usize,
    /// Importers map the memory read-only.
    pub read_only: bool,
}

/// Options of `hal_import`, `hal_notify_import`, `hal_event_import` and
/// `hal_import_tensor`. NULL options mean the defaults.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct hal_import_options {
    /// `sizeof(hal_import_options)`: fields past it are taken as zero.
    pub size: u32,
    /// Refuse writes through this import (`hal_write`, and the DLPack
    /// read-only flag of an imported tensor).
    pub read_only: bool,
}

/// `hal_export_options` as read: a `bool` written by C may hold any byte.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawExport {
    size: u32,
    importers_kind: u32,
    pids: *const u32,
    n_pids: usize,
    read_only: u8,
}

/// `hal_import_options` as read.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawImport {
    size: u32,
    read_only: u8,
}

/// Copy as much of the structure at `ptr` as its `size` field says, into a
/// zeroed `R` (fields past `size` read as zero).
///
/// # Safety
///
/// `ptr` is not NULL and points to at least `size` readable bytes, `size`
/// being the `u32` it starts with; `R` is a `repr(C)` structure of integers
/// and raw pointers that starts with that `u32`.
pub(crate) unsafe fn read_sized<R: Copy>(ptr: *const u8, what: &str) -> Result<R, Failure> {
    // SAFETY: every structure starts with its `u32` size, readable per the
    // contract; it may be unaligned.
    let size = unsafe { ptr.cast::<u32>().read_unaligned() } as usize;
    if size < size_of::<u32>() * 2 {
        return Err(Failure::invalid(format!(
            "`{what}.size` is {size}: set it to sizeof({what})"
        )));
    }
    // SAFETY: all-zero bytes are a valid value of `R` (integers and raw pointers).
    let mut raw: R = unsafe { std::mem::zeroed() };
    let n = size.min(size_of::<R>());
    // SAFETY: `n` bytes are readable at `ptr` (at most `size`) and fit in
    // `raw` (at most its size); the two do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(ptr, (&mut raw as *mut R).cast::<u8>(), n) };
    Ok(raw)
}

/// The export options of `opts` (NULL: the defaults).
///
/// # Safety
///
/// `opts` is NULL or points to a `hal_export_options` of at least its
/// `size` bytes whose `pids` points to `n_pids` ids.
pub(crate) unsafe fn export_options(
    opts: *const hal_export_options,
) -> Result<ExportOptions, Failure> {
    if opts.is_null() {
        return Ok(ExportOptions::default());
    }
    // SAFETY: per this function's contract; `RawExport` has the layout of
    // `hal_export_options` with the `bool` read as a byte.
    let raw: RawExport = unsafe { read_sized(opts.cast(), "hal_export_options") }?;
    let importers = match raw.importers_kind {
        HAL_IMPORTERS_DEFAULT => Importers::BackendDefault,
        HAL_IMPORTERS_ANYONE => Importers::Anyone,
        HAL_IMPORTERS_SAME_USER => Importers::SameUser,
        HAL_IMPORTERS_PIDS => {
            if raw.n_pids > 0 && raw.pids.is_null() {
                return Err(Failure::null("hal_export_options.pids"));
            }
            pids_importers("`n_pids`", raw.n_pids, || {
                if raw.n_pids == 0 {
                    Vec::new()
                } else {
                    // SAFETY: not NULL, and `n_pids` ids long per the contract.
                    unsafe { std::slice::from_raw_parts(raw.pids, raw.n_pids) }.to_vec()
                }
            })?
        }
        other => {
            return Err(Failure::invalid(format!(
                "`importers_kind` is {other}: use HAL_IMPORTERS_DEFAULT, HAL_IMPORTERS_ANYONE, \
                 HAL_IMPORTERS_PIDS or HAL_IMPORTERS_SAME_USER"
            )))
        }
    };
    Ok(ExportOptions {
        importers,
        read_only: raw.read_only != 0,
        ..Default::default()
    })
}

/// Whether the import options `opts` (NULL: the defaults) ask for read-only.
///
/// # Safety
///
/// `opts` is NULL or points to a `hal_import_options` of at least its
/// `size` bytes.
pub(crate) unsafe fn import_read_only(opts: *const hal_import_options) -> Result<bool, Failure> {
    if opts.is_null() {
        return Ok(false);
    }
    // SAFETY: per this function's contract; `RawImport` has the layout of
    // `hal_import_options` with the `bool` read as a byte.
    let raw: RawImport = unsafe { read_sized(opts.cast(), "hal_import_options") }?;
    Ok(raw.read_only != 0)
}

// The private mirrors read exactly the public structures.
const _: () = {
    assert!(size_of::<RawExport>() == size_of::<hal_export_options>());
    assert!(offset_of!(RawExport, pids) == offset_of!(hal_export_options, pids));
    assert!(offset_of!(RawExport, n_pids) == offset_of!(hal_export_options, n_pids));
    assert!(offset_of!(RawExport, read_only) == offset_of!(hal_export_options, read_only));
    assert!(size_of::<RawImport>() == size_of::<hal_import_options>());
    assert!(offset_of!(RawImport, read_only) == offset_of!(hal_import_options, read_only));
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shorter_structure_reads_as_zero_past_its_size() {
        let pid = 42u32;
        let full = hal_export_options {
            size: size_of::<hal_export_options>() as u32,
            importers_kind: HAL_IMPORTERS_PIDS,
            pids: &pid,
            n_pids: 1,
            read_only: true,
        };
        // SAFETY: a complete structure.
        let opts = unsafe { export_options(&full) }.unwrap();
        assert_eq!(opts.importers, Importers::Pids(vec![42]));
        assert!(opts.read_only);
        let short = hal_export_options {
            size: offset_of!(hal_export_options, read_only) as u32,
            ..full
        };
        // SAFETY: a complete structure, read less far.
        let opts = unsafe { export_options(&short) }.unwrap();
        assert!(!opts.read_only);
        let unsized_ = hal_export_options { size: 0, ..full };
        // SAFETY: as above.
        let err = unsafe { export_options(&unsized_) }.unwrap_err();
        assert!(err.message.contains("sizeof(hal_export_options)"));
        let bad = hal_export_options {
            importers_kind: 9,
            ..full
        };
        // SAFETY: as above.
        assert!(unsafe { export_options(&bad) }.is_err());
    }
}
