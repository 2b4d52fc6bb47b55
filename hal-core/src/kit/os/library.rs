//! Loading a vendor's runtime library at run time: the library is never
//! linked, so a program built with a vendor backend starts on machines
//! without that vendor's software and says why the backend is unavailable.
//!
//! The search is the same for every vendor: the path a program names, or
//! else the one an override variable names, alone when set; otherwise the
//! dynamic loader's own search by file name, then the vendor's install
//! directories. Each vendor's names, variable, directories and the entry
//! point that tells its library from any other are its rules and stay in
//! its crate, in one [`RuntimeLibrary`].
//!
//! A library that loads is kept for the life of the process, as nobody
//! unloads a vendor runtime: it starts threads of its own, which would
//! crash when its code is unmapped under them. A candidate that fails says
//! why in the dynamic loader's own words (no such file, invalid ELF header,
//! wrong ELF class, a missing symbol version); a file cut short is refused
//! before the loader maps it (it would die of `SIGBUS` inside `dlopen`);
//! a library without the vendor's entry point is "not a CUDA driver".
//!
//! ```
//! use std::path::PathBuf;
//! use hal_core::kit::os::library::{Named, RuntimeLibrary};
//!
//! static LIBRARY: RuntimeLibrary = RuntimeLibrary {
//!     what: "the example runtime library",
//!     file: "libexample.so.1",
//!     var: "EXAMPLE_LIBRARY",
//!     remedy: "install the example runtime",
//!     signature: "exampleInit",
//!     kind: "an example runtime",
//! };
//! let search = LIBRARY.candidates(None, [PathBuf::from("/opt/example/lib")]);
//! assert_eq!(
//!     search,
//!     vec![
//!         PathBuf::from("libexample.so.1"),
//!         PathBuf::from("/opt/example/lib/libexample.so.1"),
//!     ]
//! );
//! // SAFETY: neither candidate exists, so no library's initialisers run.
//! let failed = unsafe { LIBRARY.load(Named::Search, search) }.unwrap_err();
//! assert!(failed.reason().contains("libexample.so.1: cannot open shared object file"));
//! ```

use std::error::Error as _;
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};

use libloading::Library;

use super::elf;

/// One vendor's runtime library: what it is called, the variable that names
/// another one, what a user does when it is missing, and how to tell it
/// from any other library.
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
    /// An entry point every version of the library has (`cuInit`): a
    /// library without it is some other library, not this vendor's.
    pub signature: &'static str,
    /// What a library with [`RuntimeLibrary::signature`] is, for "it is not
    /// …" ("a CUDA driver").
    pub kind: &'static str,
}

/// Who named the library that is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// Nobody: the candidates are the search's.
    Search,
    /// The override variable ([`RuntimeLibrary::var`]).
    Variable,
    /// The program, by path (a backend built on a given library).
    Program,
}

/// A loaded library and where it came from. The library stays loaded for
/// the life of the process, even after this value is dropped.
#[derive(Debug)]
pub struct Loaded {
    /// Never closed: dropping it would `dlclose` the library, and the last
    /// close unmaps code that the vendor's own threads may still run.
    library: ManuallyDrop<Library>,
    /// The candidate it was loaded from.
    pub path: PathBuf,
    /// Who named it.
    pub named: Named,
}

impl Loaded {
    /// The entry point `name`, copied out of the library; `None` when the
    /// library has no such symbol.
    ///
    /// # Safety
    ///
    /// `F` must be the C signature of the symbol `name`. (The library is
    /// never unloaded, so the copy stays valid.)
    pub unsafe fn symbol<F: Copy>(&self, name: &str) -> Option<F> {
        // SAFETY: `F` is the symbol's signature (the caller's promise) and
        // the library is never unloaded (`library` is never dropped).
        unsafe { self.library.get::<F>(name).ok().map(|s| *s) }
    }
}

/// Why no library was loaded: every place tried, with the reason each one
/// failed (the dynamic loader's own words, or this module's checks).
#[derive(Debug, Clone)]
pub struct NotLoaded {
    /// The library that was searched for.
    pub library: &'static RuntimeLibrary,
    /// Who named the candidates.
    pub named: Named,
    /// Each candidate tried, in order, with why it failed.
    pub tried: Vec<(PathBuf, String)>,
}

impl NotLoaded {
    /// The paths tried, for [`crate::Availability::Unavailable`].
    pub fn searched(&self) -> Vec<PathBuf> {
        self.tried.iter().map(|(p, _)| p.clone()).collect()
    }

    /// One line naming every place tried, why each failed, and what to do.
    /// Places that failed for the same reason are named together.
    pub fn reason(&self) -> String {
        // (why, the places that failed so), in the order first seen.
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for (p, e) in &self.tried {
            // The loader's message usually starts with the path already.
            let shown = p.display().to_string();
            let why = e
                .strip_prefix(&shown)
                .and_then(|rest| rest.strip_prefix(": "))
                .unwrap_or(e);
            match groups.iter_mut().find(|(w, _)| w == why) {
                Some((_, places)) => places.push(shown),
                None => groups.push((why.to_string(), vec![shown])),
            }
        }
        let tried = groups
            .iter()
            .map(|(why, places)| format!("{}: {why}", places.join(", ")))
            .collect::<Vec<_>>()
            .join("; ");
        let RuntimeLibrary {
            what,
            file,
            var,
            remedy,
            ..
        } = *self.library;
        match self.named {
            Named::Search => format!(
                "{what} could not be loaded ({remedy}, or set {var} to the path of {file}); \
                 tried {tried}"
            ),
            Named::Variable => format!(
                "{what} that {var} names could not be loaded: {tried} (set {var} to the path \
                 of {file}, or unset it to search the usual places)"
            ),
            Named::Program => format!(
                "{what} that this program names could not be loaded: {tried} (the program \
                 must name the path of {file})"
            ),
        }
    }
}

impl RuntimeLibrary {
    /// The library [`RuntimeLibrary::var`] names, if it is set and not empty.
    pub fn from_env(&self) -> Option<PathBuf> {
        std::env::var_os(self.var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    /// The library to load and who named it: `program`'s when given, else
    /// the one [`RuntimeLibrary::var`] names, else none (search).
    pub fn named(&self, program: Option<PathBuf>) -> (Option<PathBuf>, Named) {
        match (program, self.from_env()) {
            (Some(p), _) => (Some(p), Named::Program),
            (None, Some(p)) => (Some(p), Named::Variable),
            (None, None) => (None, Named::Search),
        }
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

    /// Load the first of `candidates` (named by `named`) that loads and
    /// has [`RuntimeLibrary::signature`]; it stays loaded for the life of
    /// the process. A library without the signature is unloaded again.
    ///
    /// # Safety
    ///
    /// Loading runs a library's initialisers: every candidate must be this
    /// vendor's library (or one the user named in [`RuntimeLibrary::var`]),
    /// whose initialisers have no preconditions on this process.
    pub unsafe fn load(
        &'static self,
        named: Named,
        candidates: Vec<PathBuf>,
    ) -> Result<Loaded, NotLoaded> {
        let mut tried = Vec::new();
        for path in candidates {
            // SAFETY: the candidates are this vendor's library, whose
            // initialisers have no preconditions (the caller's promise).
            match unsafe { self.open(&path) } {
                Ok(library) => {
                    return Ok(Loaded {
                        library: ManuallyDrop::new(library),
                        path,
                        named,
                    })
                }
                Err(reason) => tried.push((path, reason)),
            }
        }
        Err(NotLoaded {
            library: self,
            named,
            tried,
        })
    }

    /// The library at `path` when it loads and has the signature; else why
    /// not, in one line that names `path`.
    ///
    /// # Safety
    ///
    /// As [`RuntimeLibrary::load`]'s.
    unsafe fn open(&self, path: &Path) -> Result<Library, String> {
        // A bare file name is the loader's to search; a path is checked
        // first, since the loader maps a file cut short and the process
        // dies of SIGBUS.
        if path.parent().is_some_and(|p| !p.as_os_str().is_empty()) {
            if let Ok(Some(missing)) = elf::missing_bytes(path) {
                return Err(format!(
                    "{}: the file is cut short ({missing} bytes missing from what its \
                     headers describe: a partial copy?), not loaded",
                    path.display()
                ));
            }
        }
        // SAFETY: the caller's promise (this function's contract).
        let library = unsafe { Library::new(path) }.map_err(|e| loader_reason(&e))?;
        // SAFETY: only the symbol's presence is asked; the pointer-sized
        // value is never used.
        if unsafe { library.get::<*mut c_void>(self.signature.as_bytes()) }.is_err() {
            // Dropped, so unloaded: it is not the library asked for.
            return Err(format!(
                "{}: it has no {}, so it is not {}",
                path.display(),
                self.signature,
                self.kind
            ));
        }
        Ok(library)
    }
}

/// The dynamic loader's own message (`dlerror`), which `libloading` keeps
/// as the error's source behind "dlopen failed".
fn loader_reason(e: &libloading::Error) -> String {
    let mut reason = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        reason = s.to_string();
        source = s.source();
    }
    reason
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;

    use super::*;

    static LIB: RuntimeLibrary = RuntimeLibrary {
        what: "the test library",
        file: "libhal-core-test-absent.so.1",
        var: "HAL_CORE_TEST_LIBRARY_NEVER_SET",
        remedy: "install nothing",
        signature: "halCoreTestInit",
        kind: "a test library",
    };

    /// Whether the library `soname` is loaded in this process now.
    fn is_loaded(soname: &str) -> bool {
        let name = CString::new(soname).unwrap();
        // SAFETY: RTLD_NOLOAD loads nothing (no initialiser runs); it only
        // returns a handle, counted, when the library is already loaded.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return false;
        }
        // SAFETY: `handle` is the counted handle just returned.
        unsafe { libc::dlclose(handle) };
        true
    }

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
        let program = PathBuf::from("/p/lib.so");
        assert_eq!(
            LIB.named(Some(program.clone())),
            (Some(program), Named::Program)
        );
        assert_eq!(LIB.named(None), (None, Named::Search));
    }

    #[test]
    fn the_reason_names_every_place_tried_and_the_remedy() {
        let n = NotLoaded {
            library: &LIB,
            named: Named::Search,
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

        let same = NotLoaded {
            library: &LIB,
            named: Named::Search,
            tried: ["/a/lib.so", "/b/lib.so", "/c/lib.so"]
                .iter()
                .map(|p| {
                    let why = if *p == "/b/lib.so" {
                        "wrong ELF class"
                    } else {
                        "no such file"
                    };
                    (PathBuf::from(p), format!("{p}: {why}"))
                })
                .collect(),
        };
        assert!(
            same.reason()
                .ends_with("tried /a/lib.so, /c/lib.so: no such file; /b/lib.so: wrong ELF class"),
            "places that failed alike are named together: {}",
            same.reason()
        );
    }

    #[test]
    fn a_named_library_that_fails_names_who_named_it_not_the_install_remedy() {
        let tried = vec![(
            PathBuf::from("/etc/passwd"),
            "/etc/passwd: invalid ELF header".into(),
        )];
        let by_var = NotLoaded {
            library: &LIB,
            named: Named::Variable,
            tried: tried.clone(),
        };
        assert_eq!(
            by_var.reason(),
            "the test library that HAL_CORE_TEST_LIBRARY_NEVER_SET names could not be loaded: \
             /etc/passwd: invalid ELF header (set HAL_CORE_TEST_LIBRARY_NEVER_SET to the path \
             of libhal-core-test-absent.so.1, or unset it to search the usual places)"
        );
        let by_program = NotLoaded {
            library: &LIB,
            named: Named::Program,
            tried,
        };
        let r = by_program.reason();
        assert!(r.contains("that this program names"), "{r}");
        assert!(!r.contains("install nothing"), "{r}");
    }

    #[test]
    fn a_missing_library_is_not_loaded_with_every_path_tried() {
        let dir = tempfile::tempdir().unwrap();
        let search = LIB.candidates(None, [dir.path().to_path_buf()]);
        // SAFETY: neither candidate exists, so no initialiser runs.
        let err = unsafe { LIB.load(Named::Search, search.clone()) }.unwrap_err();
        assert_eq!(err.searched(), search);
        assert_eq!(err.library, &LIB);
        // The loader's own words, not libloading's "dlopen failed".
        assert!(
            err.tried
                .iter()
                .all(|(_, e)| e.contains("cannot open shared object file")),
            "{:?}",
            err.tried
        );
    }

    #[test]
    fn a_library_without_the_signature_is_not_the_vendors_and_is_unloaded() {
        // glibc's libutil (an empty stub since glibc 2.34): loaded by no
        // other test, and without the signature.
        let soname = "libutil.so.1";
        assert!(!is_loaded(soname), "{soname} is loaded before the test");
        // SAFETY: libutil's initialisers have no preconditions.
        let err = unsafe { LIB.load(Named::Variable, vec![PathBuf::from(soname)]) }.unwrap_err();
        assert_eq!(
            err.tried,
            vec![(
                PathBuf::from(soname),
                "libutil.so.1: it has no halCoreTestInit, so it is not a test library".into()
            )]
        );
        assert!(
            !is_loaded(soname),
            "a library that is not the vendor's is unloaded"
        );
    }

    #[test]
    fn a_loaded_library_stays_loaded_after_its_value_is_dropped() {
        // glibc's libanl: loaded by no other test; its lookup finds
        // getaddrinfo_a (in libanl, or in libc, which it depends on).
        let soname = "libanl.so.1";
        assert!(!is_loaded(soname), "{soname} is loaded before the test");
        static ANL: RuntimeLibrary = RuntimeLibrary {
            signature: "getaddrinfo_a",
            ..LIB
        };
        // SAFETY: libanl's initialisers have no preconditions.
        let loaded = unsafe { ANL.load(Named::Program, vec![PathBuf::from(soname)]) }.unwrap();
        assert_eq!(
            (loaded.path.as_path(), loaded.named),
            (Path::new(soname), Named::Program)
        );
        drop(loaded);
        assert!(
            is_loaded(soname),
            "dropping a loaded runtime must never unload it"
        );
    }

    #[test]
    fn an_unset_variable_names_no_library() {
        assert_eq!(LIB.from_env(), None);
    }
}
