//! Placeholder: the wire codec is being written.
use super::Handle;
use crate::error::HandleError;

/// Most pids in an allow-list.
pub const MAX_PIDS: usize = 64;
/// Most bytes of vendor payload.
pub const MAX_PAYLOAD: usize = 256;

impl Handle {
    /// Binary form.
    pub fn to_bytes(&self) -> Vec<u8> {
        Vec::new()
    }
    /// Decode the binary form.
    pub fn from_bytes(_b: &[u8]) -> Result<Handle, HandleError> {
        Err(HandleError::BadMagic)
    }
    /// Text form.
    pub fn to_text(&self) -> String {
        String::new()
    }
    /// Decode the text form.
    pub fn from_text(_s: &str) -> Result<Handle, HandleError> {
        Err(HandleError::BadMagic)
    }
}
