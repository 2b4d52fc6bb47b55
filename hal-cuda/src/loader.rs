//! Finding and loading `libcuda.so.1` at run time: the library is never
//! linked, so a program built with the `cuda` backend starts on machines
//! without a driver and says why the backend is unavailable. The search
//! itself is [`hal_core::os::library`]'s; its names and places are here.

use std::path::PathBuf;

use hal_core::os::library::RuntimeLibrary;
pub(crate) use hal_core::os::library::{Loaded, NotLoaded};

/// The variable that names the library to load instead of searching.
pub const LIBRARY_VAR: &str = "HAL_CUDA_LIBRARY";

/// The driver library's name, as the dynamic loader resolves it.
pub const LIBRARY_NAME: &str = "libcuda.so.1";

/// The driver library, its override variable and what to do without it.
const LIBRARY: RuntimeLibrary = RuntimeLibrary {
    what: "the CUDA driver library",
    file: LIBRARY_NAME,
    var: LIBRARY_VAR,
    remedy: "install the NVIDIA driver",
};

/// Where drivers install the library when the loader's path misses it.
const KNOWN_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/cuda/compat",
    "/usr/lib/wsl/lib",
];

/// The candidates in search order: the override alone when it is set;
/// otherwise the loader's own search by name, then the known directories.
pub(crate) fn candidates(override_path: Option<PathBuf>) -> Vec<PathBuf> {
    LIBRARY.candidates(override_path, KNOWN_DIRS.iter().map(PathBuf::from))
}

/// The library [`LIBRARY_VAR`] names, if it is set and not empty.
pub(crate) fn from_env() -> Option<PathBuf> {
    LIBRARY.from_env()
}

/// Load `over` if given, else the first candidate of the search that loads.
pub(crate) fn load(over: Option<PathBuf>) -> Result<Loaded, NotLoaded> {
    // SAFETY: loading runs the library's initialisers. The candidates are
    // the NVIDIA driver library (by its name, its install directories, or
    // the path the user named in HAL_CUDA_LIBRARY), whose initialisers have
    // no preconditions on this process.
    unsafe { LIBRARY.load(candidates(over)) }
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
            library: LIBRARY,
            tried: vec![
                (PathBuf::from("/a/libcuda.so.1"), "no such file".into()),
                (PathBuf::from("/b/libcuda.so.1"), "wrong ELF class".into()),
            ],
        };
        let r = n.reason();
        assert!(r.contains("/a/libcuda.so.1: no such file"), "{r}");
        assert!(r.contains("/b/libcuda.so.1: wrong ELF class"), "{r}");
        assert!(r.starts_with("the CUDA driver library could not be loaded (install the NVIDIA driver, or set HAL_CUDA_LIBRARY to the path of libcuda.so.1)"), "{r}");
        assert_eq!(n.searched().len(), 2);
    }
}
