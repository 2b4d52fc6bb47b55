//! A vendor runtime as a backend sees it: loaded and initialised once, or
//! the reason it cannot be used, told the same way by every backend as an
//! [`Availability`] and as an [`Error::Unavailable`].
//!
//! ```
//! use std::path::PathBuf;
//! use hal_core::kit::vendor::runtime::{self, Failure};
//! use hal_core::Availability;
//!
//! let path = PathBuf::from("/opt/example/libexample.so.1");
//! assert_eq!(
//!     runtime::availability(&path, Ok(0), "the runtime sees no device"),
//!     Availability::Unavailable {
//!         reason: "/opt/example/libexample.so.1: the runtime sees no device".into(),
//!         searched: vec![path.clone()],
//!     }
//! );
//! let failed = Failure::Init { path, reason: "init failed".into() };
//! assert!(!failed.availability().is_available());
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};
use crate::kit::os::library::NotLoaded;
use crate::kit::vendor::library::VendorLibrary;
use crate::types::Availability;

/// Why a vendor runtime cannot be used.
#[derive(Debug, Clone)]
pub enum Failure {
    /// No candidate library loaded.
    NotLoaded(NotLoaded),
    /// Loaded, but its initialisation (or a first query) failed.
    Init {
        /// The library that was loaded.
        path: PathBuf,
        /// What failed, as the vendor's error said it.
        reason: String,
    },
}

impl Failure {
    /// The failure as [`Availability::Unavailable`].
    pub fn availability(&self) -> Availability {
        let (reason, searched) = self.parts();
        Availability::Unavailable { reason, searched }
    }

    /// The failure as [`Error::Unavailable`] of `backend` (`cuda`, `ascend`).
    pub fn error(&self, backend: &str) -> Error {
        let (reason, searched) = self.parts();
        Error::Unavailable {
            backend: backend.into(),
            reason,
            searched,
        }
    }

    fn parts(&self) -> (String, Vec<PathBuf>) {
        match self {
            Failure::NotLoaded(n) => (n.reason(), n.searched()),
            Failure::Init { path, reason } => {
                (format!("{}: {reason}", path.display()), vec![path.clone()])
            }
        }
    }
}

/// A vendor runtime loaded and initialised on first use (by the load
/// function a backend gives), from the library the program named or, with
/// none named, the one the backend finds; the outcome is kept, a failure
/// as much as a success.
pub struct Lazy<R> {
    /// The library named by the program; `None`: the backend's own search.
    library: Option<PathBuf>,
    loaded: OnceLock<std::result::Result<Arc<R>, Failure>>,
}

impl<R> Default for Lazy<R> {
    fn default() -> Self {
        Lazy::new(None)
    }
}

impl<R> std::fmt::Debug for Lazy<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lazy")
            .field("library", &self.library)
            .finish_non_exhaustive()
    }
}

impl<R> Lazy<R> {
    /// Nothing loaded yet; `library` is what the program named.
    pub fn new(library: Option<PathBuf>) -> Self {
        Lazy {
            library,
            loaded: OnceLock::new(),
        }
    }

    /// The runtime, or why it cannot be used: `load` is called with the
    /// named library the first time, and its outcome kept.
    pub fn get(
        &self,
        load: impl FnOnce(Option<PathBuf>) -> std::result::Result<Arc<R>, Failure>,
    ) -> &std::result::Result<Arc<R>, Failure> {
        self.loaded.get_or_init(|| load(self.library.clone()))
    }
}

impl<R, T> Lazy<R>
where
    R: std::ops::Deref<Target = VendorLibrary<T>>,
{
    /// The runtime for a call of `backend` (`cuda`, `ascend`): refused as
    /// [`Error::Unavailable`] where it failed, and in a child forked from
    /// the process that initialised it, whose refusal names `initialised`
    /// ("the CUDA backend (its driver was initialised)").
    pub fn usable(
        &self,
        load: impl FnOnce(Option<PathBuf>) -> std::result::Result<Arc<R>, Failure>,
        backend: &str,
        initialised: &str,
    ) -> Result<Arc<R>> {
        match self.get(load) {
            Ok(r) => {
                r.origin.check(initialised)?;
                Ok(Arc::clone(r))
            }
            Err(f) => Err(f.error(backend)),
        }
    }

    /// The runtime's [`Availability`]: why it failed, else [`availability`]
    /// from the device count `count` gives, saying `none` without a device.
    pub fn availability(
        &self,
        load: impl FnOnce(Option<PathBuf>) -> std::result::Result<Arc<R>, Failure>,
        count: impl FnOnce(&R) -> Result<u32>,
        none: &str,
    ) -> Availability {
        match self.get(load) {
            Ok(r) => availability(r.path(), count(r), none),
            Err(f) => f.availability(),
        }
    }
}

/// A loaded runtime's availability from its device count: available with
/// one device or more; otherwise unavailable, saying `none` when it sees no
/// device, or why the count failed, and naming the library at `path`.
pub fn availability(path: &Path, count: Result<u32>, none: &str) -> Availability {
    let reason = match count {
        Ok(0) => format!("{}: {none}", path.display()),
        Ok(_) => return Availability::Available,
        Err(e) => e.to_string(),
    };
    Availability::Unavailable {
        reason,
        searched: vec![path.to_path_buf()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kit::os::library::RuntimeLibrary;

    #[test]
    fn a_counted_runtime_is_available_only_with_a_device() {
        let path = Path::new("/x/lib.so");
        assert_eq!(availability(path, Ok(2), "none"), Availability::Available);
        assert_eq!(
            availability(path, Ok(0), "no device"),
            Availability::Unavailable {
                reason: "/x/lib.so: no device".into(),
                searched: vec![path.to_path_buf()],
            }
        );
        let err = || Error::unsupported("x", "count", "too old");
        assert_eq!(
            availability(path, Err(err()), "no device"),
            Availability::Unavailable {
                reason: err().to_string(),
                searched: vec![path.to_path_buf()],
            }
        );
    }

    #[test]
    fn a_failure_reads_the_same_as_availability_and_as_error() {
        let not_loaded = Failure::NotLoaded(NotLoaded {
            library: &RuntimeLibrary {
                what: "the test library",
                file: "libt.so",
                var: "T_LIBRARY",
                remedy: "install it",
                signature: "tInit",
                kind: "a test runtime",
            },
            named: crate::kit::os::library::Named::Search,
            tried: vec![(PathBuf::from("/a/libt.so"), "no such file".into())],
        });
        let init = Failure::Init {
            path: PathBuf::from("/b/libt.so"),
            reason: "init answered 7".into(),
        };
        for (f, reason, searched) in [
            (
                &not_loaded,
                "the test library could not be loaded (install it, or set T_LIBRARY to the \
                 path of libt.so); tried /a/libt.so: no such file",
                "/a/libt.so",
            ),
            (&init, "/b/libt.so: init answered 7", "/b/libt.so"),
        ] {
            let searched = vec![PathBuf::from(searched)];
            assert_eq!(
                f.availability(),
                Availability::Unavailable {
                    reason: reason.into(),
                    searched: searched.clone(),
                }
            );
            match f.error("test") {
                Error::Unavailable {
                    backend,
                    reason: r,
                    searched: s,
                } => {
                    assert_eq!(backend, "test");
                    assert_eq!(r, reason);
                    assert_eq!(s, searched);
                }
                other => panic!("not Unavailable: {other:?}"),
            }
        }
    }
}
