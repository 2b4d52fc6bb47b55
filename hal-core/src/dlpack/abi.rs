//! The DLPack 1.x ABI: the `#[repr(C)]` structures of `dlpack.h` and their
//! constants, with tests of their size and field offsets.

use std::ffi::c_void;

/// The DLPack major version these structures follow.
pub const DLPACK_MAJOR_VERSION: u32 = 1;
/// The DLPack minor version tensors made here report: they use nothing
/// newer than 1.0 (the consumer may know a newer minor version).
pub const DLPACK_MINOR_VERSION: u32 = 0;
/// Flag: the consumer must not write to the tensor.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;
/// Flag: the tensor is a copy made by the producer (never set here: the
/// tensors made here share the memory).
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;

/// `DLPackVersion`: the ABI version of a [`DLManagedTensorVersioned`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLPackVersion {
    /// Major version: a change means a different layout.
    pub major: u32,
    /// Minor version: a change means new enumeration values.
    pub minor: u32,
}

/// `DLDeviceType`: a C enum, an `int32_t` on every platform this crate
/// supports. A newtype rather than a Rust enum, so that any value a foreign
/// producer writes is representable.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDeviceType(pub i32);

impl DLDeviceType {
    /// `kDLCPU`: host memory.
    pub const CPU: DLDeviceType = DLDeviceType(1);
    /// `kDLCUDA`: CUDA device memory.
    pub const CUDA: DLDeviceType = DLDeviceType(2);
    /// `kDLCUDAHost`: pinned host memory of CUDA (`cuMemHostAlloc`).
    pub const CUDA_HOST: DLDeviceType = DLDeviceType(3);
    /// `kDLExtDev`: an extension device (used for Ascend NPUs, see the module
    /// documentation).
    pub const EXT_DEV: DLDeviceType = DLDeviceType(12);
    /// `kDLCUDAManaged`: CUDA managed memory.
    pub const CUDA_MANAGED: DLDeviceType = DLDeviceType(13);
    /// `kDLAscend`: Huawei Ascend NPU memory, assigned by DLPack after 1.1;
    /// not chosen by default (see the module documentation).
    pub const ASCEND: DLDeviceType = DLDeviceType(21);
}

/// `DLDevice`: where a tensor's memory is.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDevice {
    /// The device type.
    pub device_type: DLDeviceType,
    /// The device index; 0 for host, pinned and managed memory.
    pub device_id: i32,
}

impl DLDevice {
    /// Host memory.
    pub const CPU: DLDevice = DLDevice {
        device_type: DLDeviceType::CPU,
        device_id: 0,
    };
}

/// `DLDataType`: the element type of a tensor.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DLDataType {
    /// Type code (`kDLInt` 0, `kDLUInt` 1, `kDLFloat` 2, `kDLBfloat` 4,
    /// `kDLComplex` 5, `kDLBool` 6, ...).
    pub code: u8,
    /// Bits per lane.
    pub bits: u8,
    /// Lanes (1 for scalars).
    pub lanes: u16,
}

impl DLDataType {
    /// `int8`.
    pub const I8: DLDataType = DLDataType::new(0, 8, 1);
    /// `int16`.
    pub const I16: DLDataType = DLDataType::new(0, 16, 1);
    /// `int32`.
    pub const I32: DLDataType = DLDataType::new(0, 32, 1);
    /// `int64`.
    pub const I64: DLDataType = DLDataType::new(0, 64, 1);
    /// `uint8`.
    pub const U8: DLDataType = DLDataType::new(1, 8, 1);
    /// `uint16`.
    pub const U16: DLDataType = DLDataType::new(1, 16, 1);
    /// `uint32`.
    pub const U32: DLDataType = DLDataType::new(1, 32, 1);
    /// `uint64`.
    pub const U64: DLDataType = DLDataType::new(1, 64, 1);
    /// `float16`.
    pub const F16: DLDataType = DLDataType::new(2, 16, 1);
    /// `float32`.
    pub const F32: DLDataType = DLDataType::new(2, 32, 1);
    /// `float64`.
    pub const F64: DLDataType = DLDataType::new(2, 64, 1);
    /// `bfloat16`.
    pub const BF16: DLDataType = DLDataType::new(4, 16, 1);
    /// `complex64` (two `float32`).
    pub const C64: DLDataType = DLDataType::new(5, 64, 1);
    /// `bool`, one byte each.
    pub const BOOL: DLDataType = DLDataType::new(6, 8, 1);

    /// A data type from its code, bits and lanes.
    pub const fn new(code: u8, bits: u8, lanes: u16) -> Self {
        DLDataType { code, bits, lanes }
    }

    /// Bytes one element takes, as the DLPack header computes it
    /// (`(bits * lanes + 7) / 8`).
    pub const fn element_size(self) -> u64 {
        (self.bits as u64 * self.lanes as u64).div_ceil(8)
    }
}

/// `DLTensor`: a tensor that does not manage its memory.
#[repr(C)]
#[derive(Debug)]
pub struct DLTensor {
    /// The data pointer (a host pointer for host types, a device pointer
    /// otherwise); null for a tensor with no elements.
    pub data: *mut c_void,
    /// Where the memory is.
    pub device: DLDevice,
    /// Number of dimensions.
    pub ndim: i32,
    /// Element type.
    pub dtype: DLDataType,
    /// `ndim` extents.
    pub shape: *mut i64,
    /// `ndim` strides, in elements.
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// `DLManagedTensorVersioned`: a tensor lent to a consumer, which calls
/// `deleter` exactly once when it no longer needs the tensor.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// ABI version.
    pub version: DLPackVersion,
    /// The producer's context.
    pub manager_ctx: *mut c_void,
    /// Releases the tensor and this structure; may be null.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// `DLPACK_FLAG_BITMASK_*` bits.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    #[test]
    fn abi_layout_matches_the_header() {
        assert_eq!(size_of::<DLPackVersion>(), 8);
        assert_eq!(size_of::<DLDeviceType>(), 4);
        assert_eq!(size_of::<DLDevice>(), 8);
        assert_eq!(size_of::<DLDataType>(), 4);
        assert_eq!(offset_of!(DLDataType, bits), 1);
        assert_eq!(offset_of!(DLDataType, lanes), 2);
        assert_eq!(offset_of!(DLTensor, data), 0);
        assert_eq!(offset_of!(DLTensor, device), 8);
        assert_eq!(offset_of!(DLTensor, ndim), 16);
        assert_eq!(offset_of!(DLTensor, dtype), 20);
        assert_eq!(offset_of!(DLTensor, shape), 24);
        assert_eq!(offset_of!(DLTensor, strides), 32);
        assert_eq!(offset_of!(DLTensor, byte_offset), 40);
        assert_eq!(size_of::<DLTensor>(), 48);
        assert_eq!(offset_of!(DLManagedTensorVersioned, version), 0);
        assert_eq!(offset_of!(DLManagedTensorVersioned, manager_ctx), 8);
        assert_eq!(offset_of!(DLManagedTensorVersioned, deleter), 16);
        assert_eq!(offset_of!(DLManagedTensorVersioned, flags), 24);
        assert_eq!(offset_of!(DLManagedTensorVersioned, dl_tensor), 32);
        assert_eq!(size_of::<DLManagedTensorVersioned>(), 80);
    }
}
