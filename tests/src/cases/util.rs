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
