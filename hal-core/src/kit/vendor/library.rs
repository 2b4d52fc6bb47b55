//! A vendor library loaded at run time, as a driver backend holds it: the
//! library, the backend's table of its entry points (each resolved on
//! first use), and the process that loaded it, which a forked child is
//! not.
//!
//! The table and the accessors that fill it are the backend's: they carry
//! the vendor's C signatures. What is vendor-neutral is here: where the
//! library came from, and the refusal of an entry point it lacks.

use std::path::PathBuf;

use crate::error::Error;
use crate::kit::os::library::Loaded;
use crate::kit::os::Origin;

/// A loaded vendor library with the backend's entry-point table `T`.
#[derive(Debug)]
pub struct VendorLibrary<T> {
    /// The library.
    pub loaded: Loaded,
    /// The backend's entry points, resolved on first use.
    pub table: T,
    /// The process that loaded and initialised the library: a child forked
    /// from it cannot use the vendor's contexts, and is refused before any
    /// call.
    pub origin: Origin,
}

impl<T: Default> VendorLibrary<T> {
    /// `loaded` with an empty table, loaded by this process.
    pub fn new(loaded: Loaded) -> Self {
        VendorLibrary {
            loaded,
            table: T::default(),
            origin: Origin::here(),
        }
    }
}

impl<T> VendorLibrary<T> {
    /// Where the library was loaded from.
    pub fn path(&self) -> &PathBuf {
        &self.loaded.path
    }

    /// The [`Error::Unsupported`] of a call of `symbol`, which the library
    /// lacks, for `backend`; `older` says what the library is older than
    /// and what to do ("the driver is older than this call needs (update
    /// the driver)").
    pub fn missing(&self, backend: &str, symbol: &str, older: &str) -> Error {
        let path = self.loaded.path.display();
        let detail = format!("{path} has no entry point {symbol}; {older}");
        Error::unsupported(backend, symbol, detail)
    }
}
