//! The vendor-neutral half of a VMM physical allocation
//! ([`PhysicalRecord`]): what is known of it, the leases of its importers,
//! made at its first export, an import's own lease, and the
//! [`Physical`](crate::Physical) answers read from it
//! ([`physical_by_inner!`](crate::physical_by_inner)).

use std::sync::Arc;

use crate::error::Result;
use crate::exchange::Lease;
use crate::lease::{LazyLeases, LeaseTable};
use crate::{PhysicalLocation, ShareableHandle};

/// What is known of a physical allocation whatever its vendor, and who
/// holds it. A backend's allocation shares one inner value with every
/// mapping of it; that value keeps this record as its field `record`.
pub struct PhysicalRecord {
    /// Its size in bytes.
    pub size: u64,
    /// Where its memory is.
    pub location: PhysicalLocation,
    /// The handle type it was made for (an import: the one it came
    /// through).
    pub made_for: ShareableHandle,
    /// Its importers' leases, made at its first export.
    leases: LazyLeases,
    /// True for an import of another process's allocation.
    imported: bool,
    /// An import's lease from the exporter's broker, held as long as the
    /// imported allocation (dropped after the backend's `Drop` freed it).
    _lease: Option<Lease>,
}

impl PhysicalRecord {
    /// An allocation this process made.
    pub fn made(size: u64, location: PhysicalLocation, made_for: ShareableHandle) -> Self {
        PhysicalRecord {
            size,
            location,
            made_for,
            leases: LazyLeases::default(),
            imported: false,
            _lease: None,
        }
    }

    /// An allocation imported through a POSIX descriptor, holding the
    /// exporter's `lease` (if it counts importers).
    pub fn imported(size: u64, location: PhysicalLocation, lease: Option<Lease>) -> Self {
        PhysicalRecord {
            size,
            location,
            made_for: ShareableHandle::PosixFd,
            leases: LazyLeases::default(),
            imported: true,
            _lease: lease,
        }
    }

    /// True for an import of another process's allocation.
    pub fn is_import(&self) -> bool {
        self.imported
    }

    /// Its importers' leases, made at the first call (its first export).
    pub fn leases(&self) -> Result<Arc<LeaseTable>> {
        self.leases.table()
    }

    /// How many importers hold it now (0 before its first export).
    /// Importers whose process died are not counted.
    pub fn importers(&self) -> usize {
        self.leases.count()
    }
}

impl std::fmt::Debug for PhysicalRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhysicalRecord")
            .field("size", &self.size)
            .field("location", &self.location)
            .field("made_for", &self.made_for)
            .field("imported", &self.imported)
            .field("importers", &self.importers())
            .finish()
    }
}

/// A backend's physical allocation type, `$physical`, a shared `$inner`
/// that keeps a [`PhysicalRecord`] as `record`, with `impl Physical` and
/// `importers()` read from that record:
///
/// ```ignore
/// hal_core::physical_by_inner! {
///     /// A VMM physical allocation of this backend.
///     pub struct VendorPhysical(PhysInner);
/// }
/// ```
#[macro_export]
macro_rules! physical_by_inner {
    ($(#[$meta:meta])* $vis:vis struct $physical:ident($inner:ty);) => {
        $(#[$meta])*
        #[derive(Debug)]
        #[must_use = "the physical memory is released when this value drops"]
        $vis struct $physical {
            pub(crate) inner: ::std::sync::Arc<$inner>,
        }

        impl $physical {
            /// How many importers hold this allocation now (0 before its
            /// first export). Importers whose process died are not counted.
            pub fn importers(&self) -> usize {
                self.inner.record.importers()
            }
        }

        impl $crate::Physical for $physical {
            fn size(&self) -> u64 {
                self.inner.record.size
            }

            fn location(&self) -> $crate::PhysicalLocation {
                self.inner.record.location
            }

            fn handle_type(&self) -> $crate::ShareableHandle {
                self.inner.record.made_for
            }
        }
    };
}
