//! The vendor-neutral half of a VMM physical allocation: the leases of its
//! importers, made at its first export, and the
//! [`Physical`](crate::Physical) answers of what is known of it
//! ([`physical_by_inner!`](crate::physical_by_inner)).

use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};
use crate::lease::{LeaseTable, DEFAULT_SLOTS};

/// The importers' leases of an allocation kept in `cell`, made on first
/// use (its first export); a concurrent first export may win, and its
/// table is the one kept.
pub fn leases(cell: &OnceLock<Arc<LeaseTable>>) -> Result<Arc<LeaseTable>> {
    if let Some(l) = cell.get() {
        return Ok(Arc::clone(l));
    }
    let _ = cell.set(LeaseTable::new(DEFAULT_SLOTS)?);
    cell.get()
        .map(Arc::clone)
        .ok_or_else(|| Error::invalid("lease table vanished"))
}

/// `impl Physical for $physical` and its `importers()`, from the fields of
/// its `inner`: `size: u64`, `location: PhysicalLocation`, `made_for:
/// ShareableHandle` (the handle type it was made for) and `leases:
/// OnceLock<Arc<LeaseTable>>` (its importers', made at its first export).
#[macro_export]
macro_rules! physical_by_inner {
    ($physical:ty) => {
        impl $physical {
            /// How many importers hold this allocation now (0 before its
            /// first export). Importers whose process died are not counted.
            pub fn importers(&self) -> usize {
                self.inner.leases.get().map_or(0, |l| l.count())
            }
        }

        impl $crate::Physical for $physical {
            fn size(&self) -> u64 {
                self.inner.size
            }

            fn location(&self) -> $crate::PhysicalLocation {
                self.inner.location
            }

            fn handle_type(&self) -> $crate::ShareableHandle {
                self.inner.made_for
            }
        }
    };
}
