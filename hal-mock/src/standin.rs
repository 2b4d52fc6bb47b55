//! What the stand-in vendor libraries (`hal-mock-libcuda`,
//! `hal-mock-libascendcl`) share outside their entry points: finding the
//! built library for a test executable, checking that it is linked never
//! to be unloaded, and writing through the output pointers of their C
//! entry points.

use std::path::{Path, PathBuf};

/// The built library `file` (what cargo names the package `package`'s
/// shared library) for a test executable of this workspace: beside it in
/// `target/<profile>/deps/` (where every build of the package writes it),
/// else in `target/<profile>/` (written by `cargo build` of the package,
/// possibly older). A test that loads it depends on the package, so that
/// cargo builds it first.
///
/// # Panics
///
/// When neither exists, with the places looked at: a test helper, never
/// called by a library's entry points.
pub fn built_library(file: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("the deps folder");
    let candidates = [
        deps.join(file),
        deps.parent().map(|p| p.join(file)).unwrap_or_default(),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("none of {candidates:?}: cargo builds it with the {package} package")
        })
        .clone()
}

/// True when the stand-in library at `path` is linked never to be
/// unloaded (`-z nodelete`, what each stand-in's `build.rs` asks for); an
/// error saying why when the file cannot be read as a shared library.
pub fn is_nodelete(path: &Path) -> Result<bool, String> {
    hal_core::kit::os::elf::is_nodelete(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Write `value` through the output pointer `out`; `null()` (the vendor's
/// refusal) when it is null.
///
/// # Safety
///
/// `out` is null or valid for one write of a `T`.
pub unsafe fn put<T, E>(out: *mut T, value: T, null: impl FnOnce() -> E) -> Result<(), E> {
    if out.is_null() {
        return Err(null());
    }
    // SAFETY: not null, and valid for one write of a `T` (this fn's contract).
    unsafe { out.write(value) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_output_pointer_is_refused_and_a_valid_one_written() {
        // SAFETY: null is allowed by the contract.
        let r = unsafe { put(std::ptr::null_mut::<u32>(), 7, || "refused") };
        assert_eq!(r, Err("refused"));
        let mut v = 0u32;
        // SAFETY: `v` is valid for one write of a u32.
        let r = unsafe { put(&mut v, 7, || "refused") };
        assert_eq!((r, v), (Ok(()), 7));
    }

    #[test]
    #[should_panic(expected = "cargo builds it with the no-such-package package")]
    fn a_missing_library_names_its_package() {
        built_library("libhal_mock_no_such_library.so", "no-such-package");
    }
}
