//! The names of out-of-tree backends: which registry name each external id
//! (`0x8000..=0xFFFF`, [`BackendId::External`]) is claimed under in this
//! process, so that messages say `template` rather than `external-8000`
//! ([`external_name`], which [`BackendId`]'s name and `Display` use).
//!
//! The `hal` facade's `hal::registry::register` claims a backend's pair
//! when it registers it; a backend crate may claim its own when it is
//! constructed. One id has one name and one name one id for the life of the
//! process; a process that claims none prints external ids as
//! `external-XXXX`.
//!
//! ```
//! use hal_core::naming::claim_external_name;
//! use hal_core::types::external_name;
//! use hal_core::BackendId;
//!
//! claim_external_name(0xfe01, "doc-example")?;
//! assert_eq!(external_name(0xfe01).as_deref(), Some("doc-example"));
//! assert_eq!(BackendId::External(0xfe01).to_string(), "doc-example");
//! assert_eq!(BackendId::External(0xfe02).to_string(), "external-fe02");
//! assert!(claim_external_name(0xfe03, "cpu-shm").is_err());
//! # Ok::<(), hal_core::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::types::external::NAMES;
use crate::types::{external_name, BackendId};

/// The first id left to out-of-tree backends.
pub const EXTERNAL_IDS_START: u16 = 0x8000;

/// The longest registry name of an out-of-tree backend.
pub const EXTERNAL_NAME_MAX: usize = 32;

/// The in-tree backends, whose names no external backend may take.
const IN_TREE: [BackendId; 6] = [
    BackendId::CpuShm,
    BackendId::Cuda,
    BackendId::CudaUvm,
    BackendId::Ascend,
    BackendId::MockCuda,
    BackendId::MockAscend,
];

/// The external id claimed under `name` in this process, if any.
pub fn external_id(name: &str) -> Option<u16> {
    let names = NAMES.read().unwrap_or_else(|p| p.into_inner());
    names.iter().find(|(_, n)| *n == name).map(|(id, _)| *id)
}

/// Check that `name` may name an out-of-tree backend: 1 to
/// [`EXTERNAL_NAME_MAX`] characters of `a-z`, `0-9` and `-`, starting with a
/// letter ([`Error::InvalidArgument`] otherwise), not of the form
/// `external-XXXX` (how an unnamed external id prints), and no in-tree
/// backend's name ([`Error::AlreadyExists`]).
pub fn check_external_name(name: &str) -> Result<()> {
    let well_formed = !name.is_empty()
        && name.len() <= EXTERNAL_NAME_MAX
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !well_formed {
        return Err(Error::invalid(format!(
            "backend name `{name}`: a backend's name is 1 to {EXTERNAL_NAME_MAX} characters of \
             a-z, 0-9 and `-`, starting with a letter"
        )));
    }
    if name.starts_with("external-") {
        return Err(Error::invalid(format!(
            "backend name `{name}`: names `external-XXXX` are how unnamed external ids print; \
             choose the backend's own name"
        )));
    }
    if let Some(own) = IN_TREE.iter().find(|b| b.name() == name) {
        return Err(Error::AlreadyExists {
            what: format!(
                "backend name `{name}`: the in-tree backend {:#06x} has it; choose another name",
                own.to_wire()
            ),
        });
    }
    Ok(())
}

/// Claim external id `id` for the backend called `name`, for the life of
/// this process; from then on `BackendId::External(id)` prints as `name`.
///
/// `id` must lie in `0x8000..=0xFFFF` ([`Error::InvalidArgument`] otherwise)
/// and `name` pass [`check_external_name`]. Claiming the same pair again is
/// no error; an id claimed under another name, or a name claimed with
/// another id, is refused with [`Error::AlreadyExists`] naming the holder.
pub fn claim_external_name(id: u16, name: &str) -> Result<()> {
    if id < EXTERNAL_IDS_START {
        return Err(Error::invalid(format!(
            "backend id {id:#06x} for `{name}`: ids below {EXTERNAL_IDS_START:#06x} are the \
             in-tree backends'; an out-of-tree backend takes one of 0x8000..=0xffff"
        )));
    }
    check_external_name(name)?;
    let mut names = NAMES.write().unwrap_or_else(|p| p.into_inner());
    if let Some(held) = names.get(&id) {
        if held == name {
            return Ok(());
        }
        return Err(Error::AlreadyExists {
            what: format!(
                "backend id {id:#06x}: backend `{held}` holds it in this process, so `{name}` \
                 cannot; give `{name}` another id of 0x8000..=0xffff"
            ),
        });
    }
    if let Some((other, _)) = names.iter().find(|(_, n)| *n == name) {
        return Err(Error::AlreadyExists {
            what: format!(
                "backend name `{name}`: it holds id {other:#06x} in this process, not \
                 {id:#06x}; one name has one id"
            ),
        });
    }
    names.insert(id, name.to_string());
    drop(names);
    debug_assert_eq!(external_name(id).as_deref(), Some(name));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_names_the_id_and_collisions_are_refused() {
        claim_external_name(0xfe10, "unit-a").unwrap();
        claim_external_name(0xfe10, "unit-a").unwrap();
        assert_eq!(external_name(0xfe10).as_deref(), Some("unit-a"));
        assert_eq!(external_id("unit-a"), Some(0xfe10));
        assert_eq!(BackendId::External(0xfe10).name(), "unit-a");
        let e = claim_external_name(0xfe10, "unit-b").unwrap_err();
        assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
        assert!(e.to_string().contains("unit-a"), "{e}");
        let e = claim_external_name(0xfe11, "unit-a").unwrap_err();
        assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
        assert_eq!(external_name(0xfe11), None);
    }

    #[test]
    fn bad_ids_and_names_are_refused() {
        let e = claim_external_name(0x0100, "unit-low").unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        for bad in ["", "Upper", "9lives", "with space", "external-8a11"] {
            let e = claim_external_name(0xfe20, bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{bad}: {e}");
        }
        let long = "a".repeat(EXTERNAL_NAME_MAX + 1);
        assert!(claim_external_name(0xfe20, &long).is_err());
        let e = claim_external_name(0xfe20, "cpu-shm").unwrap_err();
        assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
        assert_eq!(external_name(0xfe20), None);
        assert_eq!(BackendId::External(0xfe20).name(), "external-fe20");
    }
}
