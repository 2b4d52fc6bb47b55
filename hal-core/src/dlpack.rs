//! Placeholder: DLPack export is being written.
