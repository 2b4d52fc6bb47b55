//! Small helpers the cases share.

/// The export's handle with duplicated descriptors, for an import here.
#[track_caller]
pub(crate) fn share(ex: &hal_core::Exported) -> hal_core::SharedHandle {
    crate::support::must(ex.share(), "Exported::share")
}

/// Decode a handle text, failing the case with the decoder's error.
#[track_caller]
pub(crate) fn decode(text: &str) -> hal_core::Handle {
    crate::support::must(
        hal_core::Handle::from_text(text).map_err(hal_core::Error::from),
        "decoding a handle text",
    )
}

/// The export's handle as another process receives it: decoded from its
/// text, with no descriptors (the import fetches them from the broker).
#[track_caller]
pub(crate) fn by_text(ex: &hal_core::Exported) -> hal_core::SharedHandle {
    hal_core::SharedHandle::from(decode(&ex.to_text()))
}

/// The device's minimum VMM granularity.
#[track_caller]
pub(crate) fn gran<D: hal_core::Vmm>(dev: &D) -> u64 {
    crate::support::must(
        dev.granularity(hal_core::Granularity::Minimum),
        "granularity(Minimum)",
    )
}

/// `len` bytes of a reservation at `offset`.
#[track_caller]
pub(crate) fn read_res(r: &impl hal_core::Reservation, offset: u64, len: u64) -> Vec<u8> {
    let mut v = vec![0u8; len as usize];
    crate::support::must(r.read(offset, &mut v), "reservation read");
    v
}
