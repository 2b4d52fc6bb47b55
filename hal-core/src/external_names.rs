//! Names of out-of-tree backends, for messages.
//!
//! An out-of-tree backend is known by its numeric id alone
//! ([`BackendId::External`]): the wire carries nothing else. A backend
//! that gives its id a name ([`BackendId::name_external`]) is called by
//! that name wherever a [`BackendId`] is written out (errors, listings);
//! an id nobody named is written as `external-XXXX`.
//!
//! ```
//! use hal_core::BackendId;
//!
//! let id = BackendId::External(0x8e01);
//! BackendId::name_external(0x8e01, "example-npu").unwrap();
//! assert_eq!(id.to_string(), "example-npu");
//! // Naming it again the same way is fine; another name is refused.
//! BackendId::name_external(0x8e01, "example-npu").unwrap();
//! assert!(BackendId::name_external(0x8e01, "other").is_err());
//! assert_eq!(BackendId::External(0x8e02).to_string(), "external-8e02");
//! ```

use crate::error::{Error, Result};
use crate::naming::{check_external_name, claim_external_name, EXTERNAL_IDS_START};
use crate::types::external::NAMES;
use crate::types::BackendId;

impl BackendId {
    /// Give the out-of-tree backend `id` ([`BackendId::External`]) the name
    /// messages call it by, once per process (an out-of-tree backend does
    /// it when it is constructed): [`claim_external_name`] for the ids left
    /// to vendors (`0x8000..=0xFFFF`). An id below them that no backend of
    /// this project has and no handle can carry (hal-ucx names its errors'
    /// source so) is named with the same checks of the name. Naming an id
    /// again with the same name is `Ok`; another name for a named id is
    /// [`Error::AlreadyExists`], and an id of a backend of this project is
    /// [`Error::InvalidArgument`]: it is named already.
    pub fn name_external(id: u16, name: &'static str) -> Result<()> {
        if id >= EXTERNAL_IDS_START {
            return claim_external_name(id, name);
        }
        if let Some(own) = BackendId::from_wire(id) {
            return Err(Error::invalid(format!(
                "backend id {id:#06x} is {own}'s, which is named already; an out-of-tree backend \
                 takes an id of its own"
            )));
        }
        check_external_name(name)?;
        let mut names = NAMES.write().unwrap_or_else(|p| p.into_inner());
        match names.get(&id) {
            Some(named) if named == name => Ok(()),
            Some(named) => Err(Error::AlreadyExists {
                what: format!("a name for backend id {id:#06x}: it is called `{named}`"),
            }),
            None => {
                names.insert(id, name.to_string());
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_external_id_is_written_by_its_name() {
        let id = BackendId::External(0x8f10);
        assert_eq!(id.to_string(), "external-8f10");
        BackendId::name_external(0x8f10, "test-npu").unwrap();
        assert_eq!(id.to_string(), "test-npu");
        assert_eq!(id.name(), "test-npu");
        let again = BackendId::name_external(0x8f10, "other-npu").unwrap_err();
        assert_eq!(again.kind_name(), "already-exists", "{again}");
        assert_eq!(id.to_string(), "test-npu");
    }

    #[test]
    fn in_tree_ids_and_names_are_not_given() {
        let e = BackendId::name_external(0x0002, "my-cuda").unwrap_err();
        assert_eq!(e.kind_name(), "invalid-argument", "{e}");
        let e = BackendId::name_external(0x8f11, "cuda").unwrap_err();
        assert_eq!(e.kind_name(), "already-exists", "{e}");
        assert_eq!(BackendId::External(0x8f11).to_string(), "external-8f11");
    }
}
