//! The backend's own resource behind a trait object: what every method of
//! the mirror does first with a resource it is given.

use std::any::Any;

use crate::error::{Error, Result};
use crate::types::DeviceInfo;

/// The backend's own resource behind `any`, or
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a resource
/// of another backend.
pub(crate) fn own<'a, T: 'static>(
    any: &'a dyn Any,
    info: &DeviceInfo,
    what: &str,
) -> Result<&'a T> {
    any.downcast_ref::<T>().ok_or_else(|| {
        Error::invalid(format!(
            "the {what} was not made by backend `{}`: pass a resource only to a device of \
             the backend that created it (device {} here)",
            info.backend, info.ordinal
        ))
    })
}
