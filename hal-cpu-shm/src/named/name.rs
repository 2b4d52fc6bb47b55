//! Region names: the rules a name follows, its stable integer id, and the
//! paths and errors that name a region's objects in [`SHM_DIR`].

use hal_core::{Error, Result};
use nix::errno::Errno;

use crate::info::fnv1a;

/// The longest name, in bytes.
pub const MAX_NAME_LEN: usize = 200;
/// Where the system keeps POSIX shared memory objects.
pub const SHM_DIR: &str = "/dev/shm";
/// The prefix of metadata objects: `/dev/shm/.hal-meta.NAME`.
pub const META_PREFIX: &str = ".hal-meta.";

/// Check a region name (see the [module documentation](super#names)).
pub fn validate_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::invalid(format!("region name {name:?} {why}")));
    if name.is_empty() {
        return bad("is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad(&format!("is longer than {MAX_NAME_LEN} bytes"));
    }
    if name.contains('/') {
        return bad("contains '/' (give the name without the leading slash)");
    }
    if name.contains("..") {
        return bad("contains \"..\"");
    }
    if name.starts_with('.') {
        return bad("starts with '.' (such names are kept for the library's metadata)");
    }
    if let Some(c) = name.chars().find(|c| !(' '..='~').contains(c)) {
        return bad(&format!(
            "contains {c:?}: names are printable ASCII (no NUL or control characters)"
        ));
    }
    Ok(())
}

/// The stable integer id of a region name: FNV-1a (64-bit) of its bytes.
///
/// ```
/// assert_eq!(hal_cpu_shm::named::region_id("a"), 0xaf63dc4c8601ec8c);
/// ```
pub fn region_id(name: &str) -> u64 {
    fnv1a(0xcbf2_9ce4_8422_2325, name.as_bytes())
}

pub(super) fn shm_path(name: &str) -> String {
    format!("/{name}")
}

pub(super) fn meta_path(name: &str) -> String {
    format!("{SHM_DIR}/{META_PREFIX}{name}")
}

pub(super) fn what(name: &str) -> String {
    format!("shared memory region {name:?} ({SHM_DIR}/{name})")
}

pub(super) fn shm_error(e: Errno, name: &str, action: &str) -> Error {
    match e {
        Errno::ENOENT => Error::NotFound { what: what(name) },
        Errno::EEXIST => Error::AlreadyExists { what: what(name) },
        Errno::EACCES | Errno::EPERM => Error::PermissionDenied {
            pid: None,
            reason: format!("{action} {} refused by the system ({e})", what(name)),
        },
        // shm_open does not follow links (O_NOFOLLOW): a link planted at the
        // name is refused like a link planted at a handle file's path.
        Errno::ELOOP => Error::PermissionDenied {
            pid: None,
            reason: format!(
                "{} is a symbolic link; regions are never opened through links (remove it)",
                what(name)
            ),
        },
        e => Error::errno(format!("{action} {}", what(name)), e),
    }
}

pub(super) fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_rules() {
        for ok in [
            "a",
            "psm_0123abcd",
            "with space",
            "x~y",
            &"n".repeat(MAX_NAME_LEN),
        ] {
            validate_name(ok).unwrap();
        }
        for bad in ["", ".", "..", "a..b", "a/b", ".x", "a\0", "a\n", "\u{e9}"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert!(validate_name(&"n".repeat(MAX_NAME_LEN + 1)).is_err());
    }
}
