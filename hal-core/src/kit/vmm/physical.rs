//! The vendor-neutral half of a VMM physical allocation
//! ([`PhysicalRecord`]): what is known of it, an import's own lease, and
//! the [`Physical`] answers read from it ([`PhysicalByRecord`]). The leases
//! of its importers are the backend's to keep beside it
//! ([`lease::LazyLeases`](crate::lease::LazyLeases)).

use crate::kit::export::KeepAlive;
use crate::vmm::{Physical, PhysicalLocation, ShareableHandle};

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
    /// True for an import of another process's allocation.
    imported: bool,
    /// An import's lease from the exporter's broker, held as long as the
    /// imported allocation (dropped after the backend's `Drop` freed it).
    _lease: Option<KeepAlive>,
}

impl PhysicalRecord {
    /// An allocation this process made.
    pub fn made(size: u64, location: PhysicalLocation, made_for: ShareableHandle) -> Self {
        PhysicalRecord {
            size,
            location,
            made_for,
            imported: false,
            _lease: None,
        }
    }

    /// An allocation imported through a POSIX descriptor, holding the
    /// exporter's `lease` (an [`exchange::Lease`](crate::exchange::Lease), if it
    /// counts importers).
    pub fn imported(
        size: u64,
        location: PhysicalLocation,
        lease: Option<impl Send + Sync + 'static>,
    ) -> Self {
        PhysicalRecord {
            size,
            location,
            made_for: ShareableHandle::PosixFd,
            imported: true,
            _lease: lease.map(KeepAlive::new),
        }
    }

    /// True for an import of another process's allocation.
    pub fn is_import(&self) -> bool {
        self.imported
    }
}

impl std::fmt::Debug for PhysicalRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhysicalRecord")
            .field("size", &self.size)
            .field("location", &self.location)
            .field("made_for", &self.made_for)
            .field("imported", &self.imported)
            .finish()
    }
}

/// A backend's physical allocation answered from its [`PhysicalRecord`]:
/// implementing this one method implements [`Physical`] (size, location and
/// handle type read from the record).
///
/// ```
/// use hal_core::kit::vmm::physical::{PhysicalByRecord, PhysicalRecord};
/// use hal_core::{Physical, PhysicalLocation, ShareableHandle};
///
/// #[derive(Debug)]
/// struct VendorPhysical {
///     record: PhysicalRecord,
/// }
///
/// impl PhysicalByRecord for VendorPhysical {
///     fn record(&self) -> &PhysicalRecord {
///         &self.record
///     }
/// }
///
/// let p = VendorPhysical {
///     record: PhysicalRecord::made(2 << 20, PhysicalLocation::Device(0), ShareableHandle::PosixFd),
/// };
/// assert_eq!(p.size(), 2 << 20);
/// ```
pub trait PhysicalByRecord: Send + Sync {
    /// What is known of the allocation.
    fn record(&self) -> &PhysicalRecord;
}

impl<T: PhysicalByRecord> Physical for T {
    fn size(&self) -> u64 {
        self.record().size
    }

    fn location(&self) -> PhysicalLocation {
        self.record().location
    }

    fn handle_type(&self) -> ShareableHandle {
        self.record().made_for
    }
}
