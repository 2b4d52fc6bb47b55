//! Finding and loading `libcuda.so.1` at run time: the library is never
//! linked, so a program built with the `cuda` backend starts on machines
//! without a driver and says why the backend is unavailable. The search
//! itself is [`hal_core::kit::os::library`]'s; its names and places are here,
//! and the load is `sys.rs`'s.

use std::path::PathBuf;

use hal_core::kit::os::library::RuntimeLibrary;
pub(crate) use hal_core::kit::os::library::{Loaded, NotLoaded};

/// The variable that names the library to load instead of searching.
pub const LIBRARY_VAR: &str = "HAL_CUDA_LIBRARY";

/// The driver library's name, as the dynamic loader resolves it.
pub const LIBRARY_NAME: &str = "libcuda.so.1";

/// The driver library, its override variable and what to do without it.
pub(crate) static LIBRARY: RuntimeLibrary = RuntimeLibrary {
    what: "the CUDA driver library",
    file: LIBRARY_NAME,
    var: LIBRARY_VAR,
    remedy: "install the NVIDIA driver",
    // Every CUDA driver has cuInit, and no other library does.
    signature: hal_core::kit::vendor::cuda::entry::INIT,
    kind: "a CUDA driver",
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
            library: &LIBRARY,
            named: hal_core::kit::os::library::Named::Search,
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

    /// Why the backend on the library at `path` is unavailable, as its
    /// availability and as the error of `open(0)` say it.
    fn unavailable(path: &std::path::Path) -> (String, String) {
        hal_mock::bad_library::unavailable(crate::CudaBackend::with_library(path))
    }

    #[test]
    fn a_library_that_does_not_load_says_why_in_the_loaders_words() {
        // The program named the library: installing is no remedy.
        hal_mock::bad_library::check_refusals(unavailable, "install the NVIDIA driver");
    }

    #[test]
    fn a_library_without_cuinit_is_not_a_cuda_driver() {
        // libc loads, and has no cuInit.
        let (reason, error) = unavailable(std::path::Path::new("libc.so.6"));
        for text in [&reason, &error] {
            assert!(
                text.contains("libc.so.6: it has no cuInit, so it is not a CUDA driver"),
                "{text}"
            );
            assert!(!text.contains("older"), "{text}");
        }
    }
}
