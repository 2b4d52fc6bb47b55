//! Finding and loading `libcuda.so.1` at run time: the library is never
//! linked, so a program built with the `cuda` backend starts on machines
//! without a driver and says why the backend is unavailable.

use std::path::PathBuf;

use libloading::Library;

/// The variable that names the library to load instead of searching.
pub const LIBRARY_VAR: &str = "HAL_CUDA_LIBRARY";

/// The driver library's name, as the dynamic loader resolves it.
pub const LIBRARY_NAME: &str = "libcuda.so.1";

/// Where drivers install the library when the loader's path misses it.
const KNOWN_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/cuda/compat",
    "/usr/lib/wsl/lib",
];

/// A loaded driver library and where it came from.
pub(crate) struct Loaded {
    pub(crate) library: Library,
    pub(crate) path: PathBuf,
}

/// Why no library was loaded: every place tried, with the loader's answer.
#[derive(Debug, Clone)]
pub(crate) struct NotLoaded {
    pub(crate) tried: Vec<(PathBuf, String)>,
}

impl NotLoaded {
    /// The paths tried, for [`hal_core::Availability::Unavailable`].
    pub(crate) fn searched(&self) -> Vec<PathBuf> {
        self.tried.iter().map(|(p, _)| p.clone()).collect()
    }

    /// One line per place tried.
    pub(crate) fn reason(&self) -> String {
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
        format!(
            "the CUDA driver library could not be loaded (install the NVIDIA driver, or set \
             {LIBRARY_VAR} to the path of libcuda.so.1); tried {}",
            tried.join("; ")
        )
    }
}

/// The candidates in search order: the override alone when it is set;
/// otherwise the loader's own search by name, then the known directories.
pub(crate) fn candidates(override_path: Option<PathBuf>) -> Vec<PathBuf> {
    if let Some(p) = override_path {
        return vec![p];
    }
    std::iter::once(PathBuf::from(LIBRARY_NAME))
        .chain(
            KNOWN_DIRS
                .iter()
                .map(|d| PathBuf::from(d).join(LIBRARY_NAME)),
        )
        .collect()
}

/// The library [`LIBRARY_VAR`] names, if it is set and not empty.
pub(crate) fn from_env() -> Option<PathBuf> {
    std::env::var_os(LIBRARY_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Load `over` if given, else the first candidate of the search that loads.
pub(crate) fn load(over: Option<PathBuf>) -> Result<Loaded, NotLoaded> {
    let mut tried = Vec::new();
    for path in candidates(over) {
        // SAFETY: loading runs the library's initialisers. The candidates
        // are the NVIDIA driver library (by its name, its install
        // directories, or the path the user named in HAL_CUDA_LIBRARY),
        // whose initialisers have no preconditions on this process.
        match unsafe { Library::new(&path) } {
            Ok(library) => return Ok(Loaded { library, path }),
            Err(e) => tried.push((path, e.to_string())),
        }
    }
    Err(NotLoaded { tried })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_override_is_the_only_candidate() {
        let over = PathBuf::from("/opt/x/libcuda.so.1");
        assert_eq!(candidates(Some(over.clone())), vec![over]);
        let search = candidates(None);
        assert_eq!(
            search[0],
            PathBuf::from(LIBRARY_NAME),
            "the loader's path first"
        );
        assert!(search.len() > 2);
        assert!(search[1..].iter().all(|p| p.ends_with(LIBRARY_NAME)));
    }

    #[test]
    fn the_reason_names_every_place_tried() {
        let n = NotLoaded {
            tried: vec![
                (PathBuf::from("/a/libcuda.so.1"), "no such file".into()),
                (PathBuf::from("/b/libcuda.so.1"), "wrong ELF class".into()),
            ],
        };
        let r = n.reason();
        assert!(r.contains("/a/libcuda.so.1: no such file"), "{r}");
        assert!(r.contains("/b/libcuda.so.1: wrong ELF class"), "{r}");
        assert!(r.contains(LIBRARY_VAR), "{r}");
        assert_eq!(n.searched().len(), 2);
    }
}
