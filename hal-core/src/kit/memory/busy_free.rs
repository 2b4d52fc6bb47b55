//! [`Allocation::free`](crate::Allocation::free) of memory that importers
//! may still hold: refused, the allocation given back alive, while any
//! does; freed (dropped) once none does.
//!
//! ```
//! use hal_core::kit::memory::busy_free;
//!
//! let refused = busy_free::unless_held(vec![0u8; 4], 2, |v| format!("{} bytes", v.len()));
//! let e = refused.unwrap_err();
//! assert_eq!(e.resource.len(), 4);
//! assert!(matches!(e.error, hal_core::Error::Busy { holders: 2, .. }));
//! assert!(busy_free::unless_held(vec![0u8; 4], 0, |_| String::new()).is_ok());
//! ```

use crate::device::FreeError;
use crate::error::Error;

/// Drop `resource` when `holders` is 0; otherwise give it back with
/// [`Error::Busy`] of `what` (what it is and how its importers let go of
/// it).
pub fn unless_held<T>(
    resource: T,
    holders: usize,
    what: impl FnOnce(&T) -> String,
) -> Result<(), FreeError<T>> {
    if holders > 0 {
        let what = what(&resource);
        return Err(FreeError {
            resource,
            error: Error::Busy { what, holders },
        });
    }
    drop(resource);
    Ok(())
}
