//! Finding `libucp.so.0` at run time: UCX is never linked, so a program
//! built with hal-ucx starts on machines without UCX and says why remote
//! sharing is unavailable. The search itself is
//! [`hal_core::kit::os::library`]'s; the names and places are here.

use std::path::PathBuf;

use hal_core::kit::os::library::{Named, RuntimeLibrary};

/// The variable that names the library to load instead of searching.
pub const LIBRARY_VAR: &str = "HAL_UCX_LIBRARY";

/// The library's name, as the dynamic loader resolves it.
pub const LIBRARY_NAME: &str = "libucp.so.0";

/// UCP's library, its override variable and what to do without it.
pub(crate) static LIBRARY: RuntimeLibrary = RuntimeLibrary {
    what: "UCX's UCP library",
    file: LIBRARY_NAME,
    var: LIBRARY_VAR,
    remedy: "install UCX (Debian and Ubuntu: apt-get install libucx0; with CUDA: pip install \
             libucx-cu13 and set HAL_UCX_LIBRARY to the wheel's libucx/lib/libucp.so.0)",
    // Every UCP since 1.0 has it (`ucp_init` is an inline that calls it),
    // and no other library does.
    signature: "ucp_init_version",
    kind: "a UCX UCP library",
};

/// Install prefixes whose `lib` holds UCX when it is not where the dynamic
/// loader looks: the variable UCX's own build scripts and modules set,
/// then the usual places of a build from source.
const HOME_VAR: &str = "UCX_HOME";
const KNOWN_DIRS: &[&str] = &["/opt/ucx/lib", "/usr/local/ucx/lib"];

/// The candidates in search order: the override alone when it is set;
/// otherwise the loader's own search by name, `$UCX_HOME/lib`, then the
/// usual install folders.
pub(crate) fn candidates(
    override_path: Option<PathBuf>,
    env: impl Fn(&str) -> Option<String>,
) -> Vec<PathBuf> {
    let home = env(HOME_VAR)
        .filter(|v| !v.is_empty())
        .map(|h| PathBuf::from(h).join("lib"));
    let dirs = home.into_iter().chain(KNOWN_DIRS.iter().map(PathBuf::from));
    LIBRARY.candidates(override_path, dirs)
}

/// Who names the library, and the candidates in order: the one
/// `program` names, else the one [`LIBRARY_VAR`] names, else the search.
pub(crate) fn search(program: Option<PathBuf>) -> (Named, Vec<PathBuf>) {
    let (over, named) = LIBRARY.named(program);
    (named, candidates(over, |v| std::env::var(v).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_override_is_the_only_candidate() {
        let c = candidates(Some(PathBuf::from("/x/libucp.so.0")), |_| {
            Some("/home".into())
        });
        assert_eq!(c, vec![PathBuf::from("/x/libucp.so.0")]);
    }

    #[test]
    fn the_search_is_the_loader_then_ucx_home_then_the_usual_folders() {
        let c = candidates(None, |v| (v == "UCX_HOME").then(|| "/u".to_string()));
        assert_eq!(
            c,
            vec![
                PathBuf::from("libucp.so.0"),
                PathBuf::from("/u/lib/libucp.so.0"),
                PathBuf::from("/opt/ucx/lib/libucp.so.0"),
                PathBuf::from("/usr/local/ucx/lib/libucp.so.0"),
            ]
        );
        let without = candidates(None, |_| Some(String::new()));
        assert_eq!(without.len(), 3);
    }
}
