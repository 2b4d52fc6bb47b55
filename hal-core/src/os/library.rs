//! Loading a vendor's runtime library at run time: the library is never
//! linked, so a program built with a vendor backend starts on machines
//! without that vendor's software and says why the backend is unavailable.
//!
//! The search is the same for every vendor: the path an override variable
//! names, alone when it is set; otherwise the dynamic loader's own search by
//! file name, then the vendor's install directories. Each vendor's names,
//! variable and directories are its rules and stay in its crate, in one
//! [`RuntimeLibrary`].
//!
//! ```
//! use std::path::PathBuf;
//! use hal_core::os::library::RuntimeLibrary;
//!
//! const LIBRARY: RuntimeLibrary = RuntimeLibrary {
//!     what: "the example runtime library",
//!     file: "libexample.so.1",
//!     var: "EXAMPLE_LIBRARY",
//!     remedy: "install the example runtime",
//! };
//! let search = LIBRARY.candidates(None, [PathBuf::from("/opt/example/lib")]);
//! assert_eq!(
//!     search,
//!     vec![
//!         PathBuf::from("libexample.so.1"),
//!         PathBuf::from("/opt/example/lib/libexample.so.1"),
//!     ]
//! );
//! ```

use std::path::PathBuf;

use libloading::Library;

/// One vendor's runtime library: what it is called, the variable that names
/// another one, and what a user does when it is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeLibrary {
    /// What the library is, for messages ("the CUDA driver library").
    pub what: &'static str,
    /// The file name, as the dynamic loader resolves it (`libcuda.so.1`).
    pub file: &'static str,
    /// The variable that names the library to load instead of searching.
    pub var: &'static str,
    /// What to do when it is not found ("install the NVIDIA driver").
    pub remedy: &'static str,
}

/// A loaded library and where it came from.
#[derive(Debug)]
pub struct Loaded {
    /// The library, loaded for as long as this value lives.
    pub library: Library,
    /// The candidate it was loaded from.
    pub path: PathBuf,
}

impl Loaded {
    /// The entry point `name`, copied out of the library; `None` when the
    /// library has no such symbol.
    ///
    /// # Safety
    ///
    /// `F` must be the C signature of the symbol `name`, and the copy must
    /// be used only while this library stays loaded (while `self` lives).
    pub unsafe fn symbol<F: Copy>(&self, name: &str) -> Option<F> {
        // SAFETY: `F` is the symbol's signature and the copy does not
        // outlive the library (the caller's promises).
        unsafe { self.library.get::<F>(name).ok().map(|s| *s) }
    }
}

/// Why no library was loaded: every place tried, with the loader's answer.
#[derive(Debug, Clone)]
pub struct NotLoaded {
    /// The library that was searched for.
    pub library: RuntimeLibrary,
    /// Each candidate tried, in order, with the loader's message.
    pub tried: Vec<(PathBuf, String)>,
}

impl NotLoaded {
    /// The paths tried, for [`crate::Availability::Unavailable`].
    pub fn searched(&self) -> Vec<PathBuf> {
        self.tried.iter().map(|(p, _)| p.clone()).collect()
    }

    /// One line naming every place tried and what to do.
    pub fn reason(&self) -> String {
        let tried: Vec<String> = self
            .tried
            .iter()
            .map(|(p, e)| {
                // The loader's message usually names the path already.
                let shown = p.display().to_string();
                if e.contains(&shown) {
                    e.clone()
                } else {
                    format!("{shown}: {e}")
                }
            })
            .collect();
        let RuntimeLibrary {
            what,
            file,
            var,
            remedy,
        } = self.library;
        format!(
            "{what} could not be loaded ({remedy}, or set {var} to the path of {file}); tried {}",
            tried.join("; ")
        )
    }
}

impl RuntimeLibrary {
    /// The library [`RuntimeLibrary::var`] names, if it is set and not empty.
    pub fn from_env(&self) -> Option<PathBuf> {
        std::env::var_os(self.var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    /// The candidates in search order: the override alone when it is set;
    /// otherwise the loader's own search by file name, then the file in each
    /// of `dirs`, in their order.
    pub fn candidates(
        &self,
        override_path: Option<PathBuf>,
        dirs: impl IntoIterator<Item = PathBuf>,
    ) -> Vec<PathBuf> {
        if let Some(p) = override_path {
            return vec![p];
        }
        std::iter::once(PathBuf::from(self.file))
            .chain(dirs.into_iter().map(|d| d.join(self.file)))
            .collect()
    }

    /// Load the first of `candidates` that loads.
    ///
    /// # Safety
    ///
    /// Loading runs a library's initialisers: every candidate must be this
    /// vendor's library (or one the user named in [`RuntimeLibrary::var`]),
    /// whose initialisers have no preconditions on this process.
    pub unsafe fn load(&self, candidates: Vec<PathBuf>) -> Result<Loaded, NotLoaded> {
        let mut tried = Vec::new();
        for path in candidates {
            // SAFETY: the candidates are this vendor's library, whose
            // initialisers have no preconditions (the caller's promise).
            match unsafe { Library::new(&path) } {
                Ok(library) => return Ok(Loaded { library, path }),
                Err(e) => tried.push((path, e.to_string())),
            }
        }
        Err(NotLoaded {
            library: *self,
            tried,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIB: RuntimeLibrary = RuntimeLibrary {
        what: "the test library",
        file: "libhal-core-test-absent.so.1",
        var: "HAL_CORE_TEST_LIBRARY_NEVER_SET",
        remedy: "install nothing",
    };

    #[test]
    fn the_override_is_the_only_candidate() {
        let over = PathBuf::from("/opt/x/lib.so");
        assert_eq!(
            LIB.candidates(Some(over.clone()), [PathBuf::from("/a")]),
            vec![over]
        );
        assert_eq!(
            LIB.candidates(None, [PathBuf::from("/a"), PathBuf::from("/b")]),
            vec![
                PathBuf::from(LIB.file),
                PathBuf::from("/a").join(LIB.file),
                PathBuf::from("/b").join(LIB.file),
            ],
            "the loader's own search first, then the directories in order"
        );
    }

    #[test]
    fn the_reason_names_every_place_tried_and_the_remedy() {
        let n = NotLoaded {
            library: LIB,
            tried: vec![
                (PathBuf::from("/a/lib.so"), "no such file".into()),
                (
                    PathBuf::from("/b/lib.so"),
                    "/b/lib.so: wrong ELF class".into(),
                ),
            ],
        };
        assert_eq!(
            n.reason(),
            "the test library could not be loaded (install nothing, or set \
             HAL_CORE_TEST_LIBRARY_NEVER_SET to the path of libhal-core-test-absent.so.1); \
             tried /a/lib.so: no such file; /b/lib.so: wrong ELF class"
        );
        assert_eq!(
            n.searched(),
            vec![PathBuf::from("/a/lib.so"), PathBuf::from("/b/lib.so")]
        );
    }

    #[test]
    fn a_missing_library_is_not_loaded_with_every_path_tried() {
        let dir = tempfile::tempdir().unwrap();
        let search = LIB.candidates(None, [dir.path().to_path_buf()]);
        // SAFETY: neither candidate exists, so no initialiser runs.
        let err = unsafe { LIB.load(search.clone()) }.unwrap_err();
        assert_eq!(err.searched(), search);
        assert_eq!(err.library, LIB);
    }

    #[test]
    fn an_unset_variable_names_no_library() {
        assert_eq!(LIB.from_env(), None);
    }
}
