//! The names of out-of-tree backends in this process: which registry name
//! each external id (`0x8000..=0xFFFF`, [`BackendId::External`](super::BackendId::External)) was
//! claimed under, so that messages say `template` rather than
//! `external-8a11`.
//!
//! The table is filled when a backend is registered at run time (the `hal`
//! facade's `hal::registry::register` calls
//! [`claim_external_name`](super::claim_external_name)); a
//! process that never registers one prints external ids as
//! `external-XXXX`. One id has one name and one name one id for the life of
//! the process: a second claim of either with the other different is
//! refused with [`Error::AlreadyExists`].
//!
//! [`claim_external_name`](super::claim_external_name) has an example.

use std::collections::BTreeMap;
use std::sync::RwLock;

use crate::error::{Error, Result};

/// The first id left to out-of-tree backends.
pub const EXTERNAL_IDS_START: u16 = 0x8000;

/// The longest registry name of an out-of-tree backend.
pub const EXTERNAL_NAME_MAX: usize = 32;

/// Claimed ids and their names.
static NAMES: RwLock<BTreeMap<u16, String>> = RwLock::new(BTreeMap::new());

/// The name external id `id` was claimed under in this process, if any.
pub fn external_name(id: u16) -> Option<String> {
    let names = NAMES.read().unwrap_or_else(|p| p.into_inner());
    names.get(&id).cloned()
}

/// The external id claimed under `name` in this process, if any.
pub fn external_id(name: &str) -> Option<u16> {
    let names = NAMES.read().unwrap_or_else(|p| p.into_inner());
    names.iter().find(|(_, n)| *n == name).map(|(id, _)| *id)
}

/// Check that `name` may name an out-of-tree backend: 1 to
/// [`EXTERNAL_NAME_MAX`] characters of `a-z`, `0-9` and `-`, starting with a
/// letter, not of the form `external-XXXX` (how an unnamed external id
/// prints). [`claim_external_name`](super::claim_external_name) also
/// refuses the in-tree backends' names.
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
    Ok(())
}

/// Enter `name` for external id `id` in the table (the checks of
/// [`claim_external_name`](super::claim_external_name) but the in-tree
/// names).
pub(crate) fn claim(id: u16, name: &str) -> Result<()> {
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_names_the_id_and_collisions_are_refused() {
        claim(0xfe10, "unit-a").unwrap();
        claim(0xfe10, "unit-a").unwrap();
        assert_eq!(external_name(0xfe10).as_deref(), Some("unit-a"));
        assert_eq!(external_id("unit-a"), Some(0xfe10));
        let e = claim(0xfe10, "unit-b").unwrap_err();
        assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
        assert!(e.to_string().contains("unit-a"), "{e}");
        let e = claim(0xfe11, "unit-a").unwrap_err();
        assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
        assert_eq!(external_name(0xfe11), None);
    }

    #[test]
    fn bad_ids_and_names_are_refused() {
        let e = claim(0x0100, "unit-low").unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        for bad in ["", "Upper", "9lives", "with space", "external-8a11"] {
            let e = claim(0xfe20, bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{bad}: {e}");
        }
        let long = "a".repeat(EXTERNAL_NAME_MAX + 1);
        assert!(claim(0xfe20, &long).is_err());
        assert_eq!(external_name(0xfe20), None);
    }
}
