//! Capabilities that need entry points of a vendor library. A library older
//! than one of them cannot offer the capability, and an operation refused
//! for it should say so: which entry point is missing and where the library
//! was loaded from, so that whoever reads the error knows to update the
//! driver or runtime rather than to look for a bug.
//!
//! A backend declares its groups of entry points, each with the
//! capabilities that cannot be offered without every one of them; the
//! backend decides what to claim, these groups only explain a refusal.
//! Where the library has every entry point and the device itself says no
//! (a device attribute), the refusal names the attribute instead
//! ([`Why::DeviceSays`]).
//!
//! ```
//! use std::path::Path;
//! use hal_core::kit::vendor::needs::{self, EntryGroup, Why};
//! use hal_core::Capabilities;
//!
//! const GROUPS: &[EntryGroup] = &[EntryGroup {
//!     needed_by: Capabilities::VMM,
//!     entries: &["exMemCreate", "exMemMap"],
//! }];
//! let present = |symbol: &str| symbol != "exMemMap";
//! let lacking = needs::first_lacking(GROUPS, Capabilities::VMM, present);
//! assert_eq!(lacking, Some("exMemMap"));
//! let library = Path::new("/opt/example/libexample.so.1");
//! let e = needs::capability_absent(
//!     "example",
//!     "allocate_physical",
//!     Capabilities::VMM,
//!     lacking.map(|symbol| Why::Lacks { library, symbol }),
//! );
//! assert!(e.is_unsupported());
//! assert!(e.to_string().contains("Capabilities::VMM is absent"));
//! assert!(e.to_string().contains("/opt/example/libexample.so.1 has no entry point exMemMap"));
//! ```

use std::path::Path;

use crate::error::{Error, Result};
use crate::types::Capabilities;

/// Entry points of a vendor library that some capabilities need, all of
/// them.
#[derive(Debug, Clone, Copy)]
pub struct EntryGroup {
    /// The capabilities that cannot be offered unless every entry point of
    /// the group resolves (a capability that any of several groups grants
    /// is named by none of them).
    pub needed_by: Capabilities,
    /// The entry points, by the name the library exports.
    pub entries: &'static [&'static str],
}

impl EntryGroup {
    /// The first entry point of the group that `present` says the library
    /// lacks.
    pub fn first_missing(&self, present: impl Fn(&str) -> bool) -> Option<&'static str> {
        self.entries.iter().copied().find(|symbol| !present(symbol))
    }

    /// True when `present` says the library has every entry point of the
    /// group.
    pub fn offered(&self, present: impl Fn(&str) -> bool) -> bool {
        self.first_missing(present).is_none()
    }
}

/// The entry points of `groups` that `resolved`, a backend's table of the
/// names it resolves, lacks: a name misspelt in a group would otherwise
/// quietly take its capabilities away (the table never resolves it). For
/// a backend's tests; empty when every group is sound.
pub fn unresolved(groups: &[EntryGroup], resolved: &[&str]) -> Vec<&'static str> {
    groups
        .iter()
        .flat_map(|g| g.entries.iter().copied())
        .filter(|e| !resolved.contains(e))
        .collect()
}

/// The first entry point missing from the library (`present` answers for
/// each name) among the groups that `capability` needs, in the order of
/// `groups`; `None` when every one resolves, or when no group is needed by
/// `capability`.
pub fn first_lacking(
    groups: &[EntryGroup],
    capability: Capabilities,
    present: impl Fn(&str) -> bool,
) -> Option<&'static str> {
    groups
        .iter()
        .filter(|g| g.needed_by.contains(capability))
        .find_map(|g| g.first_missing(&present))
}

/// [`Why::Lacks`] of the first entry point that `capability` needs and the
/// library at `library` lacks ([`first_lacking`]), if any.
pub fn lacks<'a>(
    groups: &[EntryGroup],
    capability: Capabilities,
    library: &'a Path,
    present: impl Fn(&str) -> bool,
) -> Option<Why<'a>> {
    first_lacking(groups, capability, present).map(|symbol| Why::Lacks { library, symbol })
}

/// Why a device lacks a capability, when the backend can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why<'a> {
    /// The vendor library has no `symbol`: it is older than the capability
    /// needs.
    Lacks {
        /// Where the library was loaded from.
        library: &'a Path,
        /// The entry point it misses.
        symbol: &'a str,
    },
    /// The device answers `attribute` with `value`, which leaves the
    /// capability out: the library has what it needs, this device does
    /// not.
    DeviceSays {
        /// The attribute, by the vendor's name.
        attribute: &'a str,
        /// What the device answered.
        value: i64,
    },
}

/// The [`Error::Unsupported`] of `operation` on a device of `backend`
/// without `capability`; `why` says what leaves it out, when that is known.
pub fn capability_absent(
    backend: &str,
    operation: &str,
    capability: Capabilities,
    why: Option<Why<'_>>,
) -> Error {
    let name = capability.name().unwrap_or("(a set of flags)");
    let detail = match why {
        Some(Why::Lacks { library, symbol }) => format!(
            "this backend does not offer it (Capabilities::{name} is absent: {} has no entry \
             point {symbol}, so the library is older than this capability needs; update it)",
            library.display()
        ),
        Some(Why::DeviceSays { attribute, value }) => format!(
            "this backend does not offer it (Capabilities::{name} is absent: the device answers \
             {attribute} = {value}, so this device cannot do it; check the capabilities before \
             asking, or use a device that has it)"
        ),
        None => format!("this backend does not offer it (Capabilities::{name} is absent)"),
    };
    Error::unsupported(backend, operation, detail)
}

/// A device that offers some capabilities and explains one it lacks: the
/// one gate every operation that needs a capability goes through.
///
/// ```
/// use hal_core::kit::vendor::needs::{self, Offered};
/// use hal_core::{Capabilities, Error};
///
/// struct Device(Capabilities);
/// impl Offered for Device {
///     fn offered(&self) -> Capabilities {
///         self.0
///     }
///     fn refusal(&self, operation: &str, capability: Capabilities) -> Error {
///         needs::capability_absent("example", operation, capability, None)
///     }
/// }
/// let device = Device(Capabilities::VMM);
/// assert!(device.require(Capabilities::VMM, "reserve").is_ok());
/// let e = device.require(Capabilities::IPC_MEMORY, "export_memory").unwrap_err();
/// assert!(e.is_unsupported());
/// assert!(e.to_string().contains("Capabilities::IPC_MEMORY is absent"));
/// ```
pub trait Offered {
    /// The capabilities the device offers.
    fn offered(&self) -> Capabilities;

    /// The [`Error::Unsupported`] of `operation`, whose `capability` the
    /// device lacks: it says why where the backend can tell
    /// ([`capability_absent`]).
    fn refusal(&self, operation: &str, capability: Capabilities) -> Error;

    /// `Ok` when the device offers every flag of `capability`, else the
    /// [`refusal`](Self::refusal) of `operation`.
    fn require(&self, capability: Capabilities, operation: &str) -> Result<()> {
        if self.offered().contains(capability) {
            Ok(())
        } else {
            Err(self.refusal(operation, capability))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUPS: &[EntryGroup] = &[
        EntryGroup {
            needed_by: Capabilities::IPC_MEMORY.union(Capabilities::GROWABLE),
            entries: &["a1", "a2"],
        },
        EntryGroup {
            needed_by: Capabilities::VMM.union(Capabilities::GROWABLE),
            entries: &["b1", "b2"],
        },
    ];

    #[test]
    fn an_entry_point_outside_the_table_is_unresolved() {
        assert!(unresolved(GROUPS, &["a1", "a2", "b1", "b2", "c"]).is_empty());
        assert_eq!(unresolved(GROUPS, &["a2", "b1"]), vec!["a1", "b2"]);
        assert_eq!(unresolved(GROUPS, &[]), vec!["a1", "a2", "b1", "b2"]);
    }

    #[test]
    fn a_capability_lacks_the_first_missing_entry_of_the_groups_it_needs() {
        let missing = |gone: &'static [&'static str]| move |s: &str| !gone.contains(&s);
        assert_eq!(
            first_lacking(GROUPS, Capabilities::VMM, missing(&["b2"])),
            Some("b2")
        );
        assert_eq!(
            first_lacking(GROUPS, Capabilities::VMM, missing(&["a1"])),
            None
        );
        assert_eq!(
            first_lacking(GROUPS, Capabilities::GROWABLE, missing(&["b1", "a2"])),
            Some("a2")
        );
        assert_eq!(
            first_lacking(GROUPS, Capabilities::GROWABLE, missing(&["b1"])),
            Some("b1")
        );
        assert_eq!(
            first_lacking(GROUPS, Capabilities::LEASES, missing(&["a1", "b1"])),
            None
        );
        assert_eq!(first_lacking(GROUPS, Capabilities::VMM, |_| true), None);
    }

    #[test]
    fn the_refusal_names_the_capability_and_what_is_missing() {
        let e = capability_absent(
            "x",
            "op",
            Capabilities::IPC_EVENT,
            Some(Why::Lacks {
                library: Path::new("/lib/libx.so"),
                symbol: "xIpcOpen",
            }),
        );
        let Error::Unsupported {
            backend,
            operation,
            detail,
        } = &e
        else {
            panic!("{e:?}")
        };
        assert_eq!((backend.as_str(), operation.as_str()), ("x", "op"));
        assert!(
            detail.contains("Capabilities::IPC_EVENT is absent"),
            "{detail}"
        );
        assert!(
            detail.contains("/lib/libx.so has no entry point xIpcOpen"),
            "{detail}"
        );
        let plain = capability_absent("x", "op", Capabilities::LEASES, None).to_string();
        assert!(plain.contains("Capabilities::LEASES is absent)"), "{plain}");
        assert!(!plain.contains("entry point"), "{plain}");
        let set = Capabilities::VMM | Capabilities::LEASES;
        let many = capability_absent("x", "op", set, None).to_string();
        assert!(many.contains("(a set of flags)"), "{many}");
        let said = Why::DeviceSays {
            attribute: "X_ATTRIBUTE_VMM",
            value: 0,
        };
        let device = capability_absent("x", "op", Capabilities::VMM, Some(said)).to_string();
        assert!(
            device.contains("Capabilities::VMM is absent: the device answers X_ATTRIBUTE_VMM = 0"),
            "{device}"
        );
        assert!(!device.contains("entry point"), "{device}");
    }
}
