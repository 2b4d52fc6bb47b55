//! The layout of a tensor over a memory object, and its checks.

use crate::error::{Error, Result};

use super::abi::{DLDataType, DLDevice};

/// The layout of a tensor over a memory object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Element type.
    pub dtype: DLDataType,
    /// Extents; none may be negative.
    pub shape: Vec<i64>,
    /// Strides in elements (none negative); `None` means compact row-major.
    pub strides: Option<Vec<i64>>,
    /// Bytes from the start of the memory to the first element.
    pub byte_offset: u64,
    /// The DLPack device, instead of the one [`dl_device`](super::dl_device) chooses.
    pub device: Option<DLDevice>,
    /// Mark the tensor read-only even when the memory is writable
    /// (read-only memory always gives a read-only tensor).
    pub read_only: bool,
}

impl TensorSpec {
    /// A compact row-major tensor of `shape` at the start of the memory.
    pub fn new(dtype: DLDataType, shape: &[i64]) -> Self {
        TensorSpec {
            dtype,
            shape: shape.to_vec(),
            strides: None,
            byte_offset: 0,
            device: None,
            read_only: false,
        }
    }

    /// With explicit strides (in elements).
    pub fn with_strides(mut self, strides: &[i64]) -> Self {
        self.strides = Some(strides.to_vec());
        self
    }

    /// Starting `byte_offset` bytes into the memory.
    pub fn with_byte_offset(mut self, byte_offset: u64) -> Self {
        self.byte_offset = byte_offset;
        self
    }

    /// With this DLPack device instead of the default.
    pub fn with_device(mut self, device: DLDevice) -> Self {
        self.device = Some(device);
        self
    }

    /// Read-only.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Compute the strides and check the layout fits `len` bytes; returns
    /// `(strides, elements)`.
    pub(super) fn layout(&self, len: u64) -> Result<(Vec<i64>, u64)> {
        let ndim = self.shape.len();
        i32::try_from(ndim)
            .map_err(|_| Error::invalid(format!("{ndim} dimensions do not fit DLPack's int32")))?;
        if self.dtype.bits == 0 || self.dtype.lanes == 0 {
            return Err(Error::invalid(format!(
                "data type {:?} has no bits or no lanes",
                self.dtype
            )));
        }
        if let Some(bad) = self.shape.iter().find(|&&d| d < 0) {
            return Err(Error::invalid(format!(
                "negative extent {bad} in shape {:?}",
                self.shape
            )));
        }
        let overflow = || Error::invalid(format!("shape {:?} overflows 64 bits", self.shape));
        let strides = match &self.strides {
            Some(s) => {
                if s.len() != ndim {
                    return Err(Error::invalid(format!(
                        "{} strides for {ndim} dimensions",
                        s.len()
                    )));
                }
                if let Some(bad) = s.iter().find(|&&x| x < 0) {
                    return Err(Error::invalid(format!(
                        "negative stride {bad} is not supported (export the base of the view)"
                    )));
                }
                s.clone()
            }
            None => {
                let mut strides = vec![0i64; ndim];
                let mut step: i64 = 1;
                for (stride, &extent) in strides.iter_mut().zip(&self.shape).rev() {
                    *stride = step;
                    step = step.checked_mul(extent.max(1)).ok_or_else(overflow)?;
                }
                strides
            }
        };
        let mut elements: u64 = 1;
        let mut last: u64 = 0; // index, in elements, of the farthest element
        for (&extent, &stride) in self.shape.iter().zip(&strides) {
            let (extent, stride) = (extent.unsigned_abs(), stride.unsigned_abs());
            elements = elements.checked_mul(extent).ok_or_else(overflow)?;
            if extent > 0 {
                last = (extent - 1)
                    .checked_mul(stride)
                    .and_then(|x| x.checked_add(last))
                    .ok_or_else(overflow)?;
            }
        }
        let needed = if elements == 0 {
            Some(self.byte_offset)
        } else {
            last.checked_add(1)
                .and_then(|n| n.checked_mul(self.dtype.element_size()))
                .and_then(|n| n.checked_add(self.byte_offset))
        };
        match needed {
            Some(needed) if needed <= len => Ok((strides, elements)),
            _ => Err(Error::invalid(format!(
                "a tensor of shape {:?}, strides {strides:?}, {}-byte elements at byte offset {} \
                 needs more than the memory's {len} bytes",
                self.shape,
                self.dtype.element_size(),
                self.byte_offset
            ))),
        }
    }
}
