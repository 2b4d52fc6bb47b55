//! A bounds-checked reader over a handle's bytes.

use crate::error::HandleError;

/// A bounds-checked reader over the input: every read either returns the
/// bytes asked for or a [`HandleError::Truncated`] naming the field.
pub(crate) struct Cursor<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    /// A reader at the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub(crate) fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], HandleError> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        match rest.get(..n) {
            Some(bytes) => {
                self.pos += n;
                Ok(bytes)
            }
            None => Err(HandleError::Truncated {
                field,
                offset: self.pos,
                needed: n - rest.len(),
            }),
        }
    }

    pub(super) fn array<const N: usize>(
        &mut self,
        field: &'static str,
    ) -> Result<[u8; N], HandleError> {
        let offset = self.pos;
        let bytes = self.take(N, field)?;
        bytes.try_into().map_err(|_| HandleError::Truncated {
            field,
            offset,
            needed: N,
        })
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, HandleError> {
        self.array::<1>(field).map(|[b]| b)
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, HandleError> {
        self.array(field).map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, HandleError> {
        self.array(field).map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, HandleError> {
        self.array(field).map(u64::from_le_bytes)
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }
}
