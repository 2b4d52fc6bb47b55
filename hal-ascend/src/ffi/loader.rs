//! Finding `libascendcl.so` at run time: the library is never linked, so a
//! program built with the `ascend` backend starts on machines without CANN
//! and says why the backend is unavailable. The search itself is
//! [`hal_core::kit::os::library`]'s; its names and places are here, and
//! `sys.rs` loads what it finds.

use std::path::PathBuf;

pub(crate) use hal_core::kit::os::library::NotLoaded;
use hal_core::kit::os::library::{Named, RuntimeLibrary};

/// The variable that names the library to load instead of searching.
pub const LIBRARY_VAR: &str = "HAL_ASCEND_LIBRARY";

/// The runtime library's name, as the dynamic loader resolves it.
pub const LIBRARY_NAME: &str = "libascendcl.so";

/// The runtime library, its override variable and what to do without it.
pub(crate) static LIBRARY: RuntimeLibrary = RuntimeLibrary {
    what: "the Ascend runtime library",
    file: LIBRARY_NAME,
    var: LIBRARY_VAR,
    remedy: "install CANN and source its set_env.sh",
    // Every ACL runtime has aclInit, and no other library does.
    signature: hal_core::kit::vendor::acl::entry::INIT,
    kind: "an ACL runtime",
};

/// Install prefixes whose `lib64` holds the library, after the loader's
/// own search: the variables CANN's `set_env.sh` exports, then the
/// default install locations.
const HOME_VARS: &[&str] = &["ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"];
const KNOWN_DIRS: &[&str] = &[
    "/usr/local/Ascend/cann/lib64",
    "/usr/local/Ascend/ascend-toolkit/latest/lib64",
];

/// The candidates in search order: the override alone when it is set;
/// otherwise the loader's own search by name, `$ASCEND_HOME_PATH/lib64`,
/// `$ASCEND_TOOLKIT_HOME/lib64`, then the default install directories.
pub(crate) fn candidates(
    override_path: Option<PathBuf>,
    env: impl Fn(&str) -> Option<String>,
) -> Vec<PathBuf> {
    let homes = HOME_VARS
        .iter()
        .filter_map(|var| env(var).filter(|v| !v.is_empty()))
        .map(|home| PathBuf::from(home).join("lib64"));
    let dirs = homes.chain(KNOWN_DIRS.iter().map(PathBuf::from));
    LIBRARY.candidates(override_path, dirs)
}

/// Who names the library to load, and the candidates in order: the one
/// the program names (`program`), else the one [`LIBRARY_VAR`] names, else
/// the search.
pub(crate) fn search(program: Option<PathBuf>) -> (Named, Vec<PathBuf>) {
    let (over, named) = LIBRARY.named(program);
    (named, candidates(over, |v| std::env::var(v).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_order_is_the_one_users_expect() {
        let env = |v: &str| match v {
            "ASCEND_HOME_PATH" => Some("/opt/home".to_string()),
            "ASCEND_TOOLKIT_HOME" => Some("/opt/toolkit".to_string()),
            _ => None,
        };
        assert_eq!(
            candidates(None, env),
            vec![
                PathBuf::from("libascendcl.so"),
                PathBuf::from("/opt/home/lib64/libascendcl.so"),
                PathBuf::from("/opt/toolkit/lib64/libascendcl.so"),
                PathBuf::from("/usr/local/Ascend/cann/lib64/libascendcl.so"),
                PathBuf::from("/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so"),
            ]
        );
        assert_eq!(
            candidates(None, |_| None).len(),
            3,
            "unset variables are skipped"
        );
        let over = PathBuf::from("/x/libascendcl.so");
        assert_eq!(candidates(Some(over.clone()), env), vec![over]);
    }

    #[test]
    fn the_reason_names_every_place_tried() {
        let n = NotLoaded {
            library: &LIBRARY,
            named: hal_core::kit::os::library::Named::Search,
            tried: vec![
                (PathBuf::from("/a/libascendcl.so"), "no such file".into()),
                (PathBuf::from("/b/libascendcl.so"), "wrong ELF class".into()),
            ],
        };
        let r = n.reason();
        assert!(r.contains("/a/libascendcl.so: no such file"), "{r}");
        assert!(r.contains("/b/libascendcl.so: wrong ELF class"), "{r}");
        assert!(r.starts_with("the Ascend runtime library could not be loaded (install CANN and source its set_env.sh, or set HAL_ASCEND_LIBRARY to the path of libascendcl.so)"), "{r}");
        assert_eq!(n.searched().len(), 2);
    }

    /// Why the backend on the library at `path` is unavailable, as its
    /// availability and as the error of `open(0)` say it.
    fn unavailable(path: &std::path::Path) -> (String, String) {
        hal_mock::bad_library::unavailable(crate::AscendBackend::with_library(path))
    }

    #[test]
    fn a_library_that_does_not_load_says_why_in_the_loaders_words() {
        // The program named the library: installing is no remedy.
        hal_mock::bad_library::check_refusals(unavailable, "install CANN");
    }

    #[test]
    fn a_library_without_aclinit_is_not_an_acl_runtime() {
        // libc loads, and has no aclInit.
        let (reason, error) = unavailable(std::path::Path::new("libc.so.6"));
        for text in [&reason, &error] {
            assert!(
                text.contains("libc.so.6: it has no aclInit, so it is not an ACL runtime"),
                "{text}"
            );
            assert!(!text.contains("older"), "{text}");
        }
    }
}
