//! Handle texts in: decoded, and checked to be of the kind the call imports.

use hal_facade::dlpack::TENSOR_TEXT_PREFIX;
use hal_facade::{Handle, HandleKind};

use crate::status::{hal_status, Failure};

/// The handle of `text`, refused unless it is a `kind` handle.
pub(crate) fn decode(text: &str, kind: HandleKind) -> Result<Handle, Failure> {
    if text.trim_start().starts_with(TENSOR_TEXT_PREFIX) {
        return Err(Failure::new(
            hal_status::HAL_ERR_INVALID_HANDLE,
            "invalid handle: this is a tensor handle: import it with hal_import_tensor",
        ));
    }
    let handle = Handle::from_text(text)?;
    handle.expect(kind, handle.backend)?;
    Ok(handle)
}
