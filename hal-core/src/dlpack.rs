//! Host-visible memory as a DLPack 1.x tensor.
//!
//! [`DlpackTensor::new`] (or its shorthand [`to_dlpack`]) describes any
//! [`Memory`] whose [`Memory::host_ptr`] is `Some` as a
//! [`DLManagedTensorVersioned`], the exchange structure of DLPack 1.x, that
//! array libraries (NumPy, PyTorch, JAX, CuPy, ...) import without a copy.
//! The tensor owns an [`Arc`] of the memory object: the mapping stays alive
//! until the consumer calls the tensor's deleter, even when every other
//! reference to the memory is gone.
//!
//! # Device types
//!
//! [`dl_device`] chooses the DLPack device from the backend and the
//! memory's [`Location`]:
//!
//! | backend | location | device type | device id |
//! | --- | --- | --- | --- |
//! | cpu-shm | any | `kDLCPU` (1) | 0 |
//! | cuda, cuda-uvm | `Device(n)` | `kDLCUDA` (2) | n |
//! | cuda, cuda-uvm | `Host` (pinned) | `kDLCUDAHost` (3) | 0 |
//! | cuda, cuda-uvm | `Managed` | `kDLCUDAManaged` (13) | 0 |
//! | ascend | `Device(n)` | `kDLExtDev` (12) | n |
//! | ascend | `Host` | `kDLCPU` (1) | 0 |
//! | mock-cuda, mock-ascend | any | `kDLCPU` (1) | 0 |
//! | external | `Host` | `kDLCPU` (1) | 0 |
//!
//! DLPack never added a type for shared CPU memory: shared host memory is
//! `kDLCPU`, with its lifetime tied to the mapping by the deleter.
//!
//! **Ascend.** The DLPack 1.0 and 1.1 headers have no Ascend device type.
//! PyTorch exchanges tensors of out-of-tree devices (its `PrivateUse1` path,
//! which `torch_npu` uses for NPUs) as `kDLExtDev`, so Ascend device memory
//! is `kDLExtDev` with the device ordinal as id. Upstream DLPack later
//! assigned `kDLAscend` (21, [`DLDeviceType::ASCEND`]); a consumer built
//! against a header that has it can be given it with
//! [`TensorSpec::with_device`]. Ascend host memory is plain host memory
//! (`kDLCPU`); Ascend has no managed memory.
//!
//! **The simulator.** Memory of the mock backends lives in host memfds
//! whatever its simulated location, so it is `kDLCPU`: a consumer told
//! `kDLCUDA` would hand the pointer to a GPU kernel.
//!
//! Other combinations (managed memory of a non-CUDA backend, device memory
//! of an external backend) are refused unless [`TensorSpec::with_device`]
//! names the device.
//!
//! The data pointer is [`Memory::host_ptr`] for `kDLCPU` and `kDLCUDAHost`,
//! and [`Memory::addr`] (the device's address of the memory) for the device
//! types. A tensor with no elements has a null data pointer, as the DLPack
//! header asks.
//!
//! # Why the ABI structures are defined here
//!
//! The `dlpark` crate (0.10) has the versioned structures, but it needs
//! Rust 1.88 while this workspace supports 1.85, and it brings its own error
//! framework (`snafu`) and `bitflags` into the contract crate. The ABI is
//! five small `#[repr(C)]` structures, defined here after the DLPack 1.x
//! header (`dlpack.h`) with tests of their size and field offsets.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//! use hal_core::dlpack::{to_dlpack, DLDataType};
//! use hal_core::BackendId;
//!
//! # fn demo<M: hal_core::Memory + 'static>(mem: Arc<M>) -> hal_core::Result<()> {
//! let tensor = to_dlpack(mem, BackendId::CpuShm, DLDataType::F32, &[256, 256])?;
//! assert_eq!(tensor.shape(), &[256, 256]);
//! // Hand the pointer to a consumer, which calls its deleter when done.
//! let raw = tensor.into_raw();
//! # let _ = raw;
//! # Ok(())
//! # }
//! ```

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::device::Memory;
use crate::error::{Error, Result};
use crate::types::{BackendId, Location};

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

/// The DLPack device of memory of `backend` at `location`, per the table in
/// the [module documentation](self).
pub fn dl_device(backend: BackendId, location: Location) -> Result<DLDevice> {
    let ordinal = |n: u32| {
        i32::try_from(n)
            .map_err(|_| Error::invalid(format!("device ordinal {n} does not fit DLPack's int32")))
    };
    let device = match (backend, location) {
        (BackendId::CpuShm | BackendId::MockCuda | BackendId::MockAscend, _) => DLDevice::CPU,
        (BackendId::Cuda | BackendId::CudaUvm, Location::Device(n)) => DLDevice {
            device_type: DLDeviceType::CUDA,
            device_id: ordinal(n)?,
        },
        (BackendId::Cuda | BackendId::CudaUvm, Location::Host) => DLDevice {
            device_type: DLDeviceType::CUDA_HOST,
            device_id: 0,
        },
        (BackendId::Cuda | BackendId::CudaUvm, Location::Managed) => DLDevice {
            device_type: DLDeviceType::CUDA_MANAGED,
            device_id: 0,
        },
        (BackendId::Ascend, Location::Device(n)) => DLDevice {
            device_type: DLDeviceType::EXT_DEV,
            device_id: ordinal(n)?,
        },
        (_, Location::Host) => DLDevice::CPU,
        (other, location) => {
            return Err(Error::unsupported(
                other.name(),
                "DLPack export",
                format!(
                    "no DLPack device type is defined for {location:?} memory of this backend; \
                     name one with TensorSpec::with_device"
                ),
            ))
        }
    };
    Ok(device)
}

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
    /// The DLPack device, instead of the one [`dl_device`] chooses.
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
    fn layout(&self, len: u64) -> Result<(Vec<i64>, u64)> {
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

/// What the deleter frees: the structure lent out, the arrays it points
/// to, and the memory object it keeps alive. `managed` comes first so that
/// a pointer to the holder is a pointer to it.
#[repr(C)]
struct Holder<K> {
    managed: DLManagedTensorVersioned,
    shape: Vec<i64>,
    strides: Vec<i64>,
    keep: K,
}

/// The deleter of tensors made here: frees the holder, which drops the
/// memory object's `Arc`.
///
/// # Safety
///
/// `managed` is null or a pointer produced by [`DlpackTensor::new`] with
/// the same `K`, whose deleter has not run yet.
unsafe extern "C" fn delete_holder<K>(managed: *mut DLManagedTensorVersioned) {
    if managed.is_null() {
        return;
    }
    // SAFETY: per this function's contract `managed` is live and its
    // `manager_ctx` is the `Box<Holder<K>>` made by `DlpackTensor::new`,
    // released here exactly once.
    let holder = unsafe { Box::from_raw((*managed).manager_ctx.cast::<Holder<K>>()) };
    drop(holder);
}

/// An owned DLPack tensor over a memory object.
///
/// Dropping it calls the deleter; [`DlpackTensor::into_raw`] hands the
/// pointer (and the duty to call the deleter once) to a consumer.
#[derive(Debug)]
pub struct DlpackTensor {
    ptr: NonNull<DLManagedTensorVersioned>,
}

// SAFETY: the tensor exclusively owns its structure; what the deleter drops
// is an `Arc` of a `Memory`, which is `Send + Sync`, and the data pointer is
// only described, never dereferenced, by this type.
unsafe impl Send for DlpackTensor {}
// SAFETY: `&DlpackTensor` only reads the structure.
unsafe impl Sync for DlpackTensor {}

impl DlpackTensor {
    /// Describe `mem` as a tensor of `spec` on behalf of `backend` (which
    /// chooses the device type, see [`dl_device`]).
    ///
    /// Refused when the memory is not host-visible
    /// ([`Error::Unsupported`]) and when the layout does not fit its length
    /// ([`Error::InvalidArgument`]).
    pub fn new<M>(mem: Arc<M>, backend: BackendId, spec: &TensorSpec) -> Result<DlpackTensor>
    where
        M: Memory + ?Sized + 'static,
    {
        let Some(host) = mem.host_ptr() else {
            return Err(Error::unsupported(
                backend.name(),
                "DLPack export",
                format!(
                    "the {:?} memory is not host-visible; copy it into host memory first",
                    mem.location()
                ),
            ));
        };
        let (strides, elements) = spec.layout(mem.len())?;
        let device = match spec.device {
            Some(d) => d,
            None => dl_device(backend, mem.location())?,
        };
        let data: *mut c_void = if elements == 0 {
            std::ptr::null_mut()
        } else if matches!(
            device.device_type,
            DLDeviceType::CPU | DLDeviceType::CUDA_HOST
        ) {
            host.cast()
        } else {
            mem.addr() as usize as *mut c_void
        };
        let mut flags = 0;
        if spec.read_only || mem.is_read_only() {
            flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
        }
        let ndim = spec.shape.len();
        let holder = Box::into_raw(Box::new(Holder {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion {
                    major: DLPACK_MAJOR_VERSION,
                    minor: DLPACK_MINOR_VERSION,
                },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_holder::<Arc<M>>),
                flags,
                dl_tensor: DLTensor {
                    data,
                    device,
                    ndim: ndim as i32, // checked by `layout`
                    dtype: spec.dtype,
                    shape: std::ptr::null_mut(),
                    strides: std::ptr::null_mut(),
                    byte_offset: spec.byte_offset,
                },
            },
            shape: spec.shape.clone(),
            strides,
            keep: mem,
        }));
        // SAFETY: `holder` comes from `Box::into_raw` just above, so it is
        // valid and nothing else points to it yet. The pointers stored here
        // are derived from it and stay valid until the deleter frees it: the
        // holder never moves and its vectors are never touched again.
        let managed = unsafe {
            (*holder).managed.manager_ctx = holder.cast();
            if ndim > 0 {
                (*holder).managed.dl_tensor.shape = (*holder).shape.as_mut_ptr();
                (*holder).managed.dl_tensor.strides = (*holder).strides.as_mut_ptr();
            }
            std::ptr::addr_of_mut!((*holder).managed)
        };
        let ptr = NonNull::new(managed).ok_or_else(|| Error::invalid("null tensor"))?;
        Ok(DlpackTensor { ptr })
    }

    /// The managed structure.
    pub fn as_managed(&self) -> &DLManagedTensorVersioned {
        // SAFETY: `ptr` is live until the deleter runs, which happens only
        // in `drop` or after `into_raw` consumed `self`.
        unsafe { self.ptr.as_ref() }
    }

    /// The tensor.
    pub fn tensor(&self) -> &DLTensor {
        &self.as_managed().dl_tensor
    }

    /// The extents.
    pub fn shape(&self) -> &[i64] {
        let t = self.tensor();
        raw_slice(t.shape, t.ndim)
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[i64] {
        let t = self.tensor();
        raw_slice(t.strides, t.ndim)
    }

    /// True when the consumer must not write.
    pub fn is_read_only(&self) -> bool {
        self.as_managed().flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0
    }

    /// The pointer, still owned by `self`.
    pub fn as_ptr(&self) -> *const DLManagedTensorVersioned {
        self.ptr.as_ptr()
    }

    /// Give the tensor up to a consumer (a `PyCapsule` named
    /// `dltensor_versioned`, a C library, ...), which must call its deleter
    /// exactly once. Until then the memory object stays alive.
    pub fn into_raw(self) -> *mut DLManagedTensorVersioned {
        let ptr = self.ptr.as_ptr();
        std::mem::forget(self);
        ptr
    }

    /// Take back ownership of a tensor, for example one a consumer refused
    /// before taking it; dropping the result calls its deleter.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a live `DLManagedTensorVersioned` whose deleter
    /// has not been called, whose shape and strides arrays hold `ndim`
    /// elements, and that nothing else will delete.
    pub unsafe fn from_raw(ptr: NonNull<DLManagedTensorVersioned>) -> DlpackTensor {
        DlpackTensor { ptr }
    }
}

impl Drop for DlpackTensor {
    fn drop(&mut self) {
        let managed = self.ptr.as_ptr();
        if let Some(deleter) = self.as_managed().deleter {
            // SAFETY: `self` owns the tensor and its deleter has not run:
            // this is the one call.
            unsafe { deleter(managed) };
        }
    }
}

/// A slice of `ndim` elements at `ptr`, empty for a null pointer.
fn raw_slice<'a>(ptr: *const i64, ndim: i32) -> &'a [i64] {
    match usize::try_from(ndim) {
        Ok(n) if n > 0 && !ptr.is_null() => {
            // SAFETY: the shape and strides arrays of a `DlpackTensor` hold
            // `ndim` elements and live as long as the tensor (a contract of
            // `new` and of `from_raw`); callers tie `'a` to the tensor.
            unsafe { std::slice::from_raw_parts(ptr, n) }
        }
        _ => &[],
    }
}

/// Shorthand for [`DlpackTensor::new`] with a compact row-major tensor at
/// the start of the memory.
pub fn to_dlpack<M>(
    mem: Arc<M>,
    backend: BackendId,
    dtype: DLDataType,
    shape: &[i64],
) -> Result<DlpackTensor>
where
    M: Memory + ?Sized + 'static,
{
    DlpackTensor::new(mem, backend, &TensorSpec::new(dtype, shape))
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};
    use std::os::fd::AsFd;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::os::{memfd, Prot, SharedMap};

    /// Host memory in a shared mapping that counts its drops.
    struct ShmMemory {
        map: SharedMap,
        drops: Arc<AtomicUsize>,
        read_only: bool,
    }

    impl ShmMemory {
        fn new(len: u64, read_only: bool) -> (Arc<ShmMemory>, Arc<AtomicUsize>) {
            let name = format!("hal-dlpack-test-{}", std::process::id());
            let fd = memfd(&name, len, None).expect("memfd");
            let map = SharedMap::map(fd.as_fd(), len, 0, Prot::ReadWrite, None).expect("map");
            let drops = Arc::new(AtomicUsize::new(0));
            let mem = ShmMemory {
                map,
                drops: drops.clone(),
                read_only,
            };
            (Arc::new(mem), drops)
        }
    }

    impl Drop for ShmMemory {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Memory for ShmMemory {
        fn addr(&self) -> u64 {
            self.map.as_ptr() as u64
        }
        fn len(&self) -> u64 {
            self.map.len() as u64
        }
        fn location(&self) -> Location {
            Location::Host
        }
        fn host_ptr(&self) -> Option<*mut u8> {
            Some(self.map.as_ptr())
        }
        fn is_read_only(&self) -> bool {
            self.read_only
        }
        fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
            self.map.read(offset, dst)
        }
        fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
            self.map.write(offset, src)
        }
    }

    /// Device memory with no host address.
    struct DeviceOnly;

    impl Memory for DeviceOnly {
        fn addr(&self) -> u64 {
            0x7000_0000
        }
        fn len(&self) -> u64 {
            4096
        }
        fn location(&self) -> Location {
            Location::Device(0)
        }
        fn host_ptr(&self) -> Option<*mut u8> {
            None
        }
        fn read(&self, _: u64, _: &mut [u8]) -> Result<()> {
            Err(Error::unsupported("test", "read", "device only"))
        }
        fn write(&self, _: u64, _: &[u8]) -> Result<()> {
            Err(Error::unsupported("test", "write", "device only"))
        }
    }

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

    #[test]
    fn tensor_over_shared_memory_keeps_it_alive_until_the_deleter() {
        let (mem, drops) = ShmMemory::new(4096, false);
        let values: Vec<u8> = (0..32u32).flat_map(|v| (v as f32).to_ne_bytes()).collect();
        mem.write(0, &values).unwrap();
        let base = mem.map.as_ptr();

        let tensor = to_dlpack(mem, BackendId::CpuShm, DLDataType::F32, &[4, 8]).unwrap();
        // The tensor's Arc is the only one left.
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        let raw = tensor.into_raw();

        // SAFETY: `raw` is live until its deleter is called below.
        let managed = unsafe { &*raw };
        assert_eq!(managed.version, DLPackVersion { major: 1, minor: 0 });
        assert_eq!(managed.flags, 0);
        assert!(!managed.manager_ctx.is_null());
        let t = &managed.dl_tensor;
        assert_eq!(t.data, base.cast());
        assert_eq!(t.device, DLDevice::CPU);
        assert_eq!(t.ndim, 2);
        assert_eq!(t.dtype, DLDataType::F32);
        assert_eq!(t.byte_offset, 0);
        // SAFETY: shape and strides hold `ndim` elements while the tensor lives.
        let (shape, strides) = unsafe {
            (
                std::slice::from_raw_parts(t.shape, 2),
                std::slice::from_raw_parts(t.strides, 2),
            )
        };
        assert_eq!(shape, &[4, 8]);
        assert_eq!(strides, &[8, 1]);
        // The mapping is still there: read element [3][7] through the tensor.
        // SAFETY: the tensor covers 32 f32 at `data`, kept mapped by the holder.
        let last = unsafe { t.data.cast::<f32>().add(3 * 8 + 7).read() };
        assert_eq!(last, 31.0);

        let deleter = managed.deleter.expect("deleter");
        // SAFETY: the one call of the deleter of a tensor made here.
        unsafe { deleter(raw) };
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn dropping_the_owner_calls_the_deleter_once() {
        let (mem, drops) = ShmMemory::new(8192, false);
        let weak = Arc::downgrade(&mem);
        let tensor = to_dlpack(mem.clone(), BackendId::CpuShm, DLDataType::U8, &[8192]).unwrap();
        drop(mem);
        assert!(weak.upgrade().is_some());
        assert_eq!(tensor.shape(), &[8192]);
        assert_eq!(tensor.strides(), &[1]);
        drop(tensor);
        assert!(weak.upgrade().is_none());
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn dyn_memory_and_from_raw() {
        let (mem, drops) = ShmMemory::new(4096, false);
        let mem: Arc<dyn Memory> = mem;
        let raw = to_dlpack(mem, BackendId::CpuShm, DLDataType::I64, &[2, 2])
            .unwrap()
            .into_raw();
        // SAFETY: `raw` came from `into_raw` and nothing else deletes it.
        let back = unsafe { DlpackTensor::from_raw(NonNull::new(raw).unwrap()) };
        assert_eq!(back.shape(), &[2, 2]);
        drop(back);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn read_only_memory_gives_a_read_only_tensor() {
        let (mem, _drops) = ShmMemory::new(4096, true);
        let t = to_dlpack(mem, BackendId::CpuShm, DLDataType::U8, &[16]).unwrap();
        assert!(t.is_read_only());
        assert_eq!(t.as_managed().flags, DLPACK_FLAG_BITMASK_READ_ONLY);

        let (mem, _drops) = ShmMemory::new(4096, false);
        let spec = TensorSpec::new(DLDataType::U8, &[16]).read_only();
        let t = DlpackTensor::new(mem, BackendId::CpuShm, &spec).unwrap();
        assert!(t.is_read_only());
    }

    #[test]
    fn strides_offset_and_device_override() {
        let (mem, _drops) = ShmMemory::new(4096, false);
        let base = mem.map.as_ptr();
        // A 4x4 f32 view with a row pitch of 16 elements, 128 bytes in.
        let spec = TensorSpec::new(DLDataType::F32, &[4, 4])
            .with_strides(&[16, 1])
            .with_byte_offset(128)
            .with_device(DLDevice {
                device_type: DLDeviceType::CUDA_HOST,
                device_id: 0,
            });
        let t = DlpackTensor::new(mem, BackendId::CpuShm, &spec).unwrap();
        assert_eq!(t.strides(), &[16, 1]);
        assert_eq!(t.tensor().byte_offset, 128);
        assert_eq!(t.tensor().data, base.cast());
        assert_eq!(t.tensor().device.device_type, DLDeviceType::CUDA_HOST);
    }

    #[test]
    fn empty_and_scalar_tensors() {
        let (mem, _drops) = ShmMemory::new(4096, false);
        let t = to_dlpack(mem.clone(), BackendId::CpuShm, DLDataType::F32, &[0, 5]).unwrap();
        assert!(t.tensor().data.is_null());
        assert_eq!(t.strides(), &[5, 1]);
        let t = to_dlpack(mem, BackendId::CpuShm, DLDataType::F64, &[]).unwrap();
        assert_eq!(t.tensor().ndim, 0);
        assert!(t.tensor().shape.is_null());
        assert!(!t.tensor().data.is_null());
    }

    #[test]
    fn refusals() {
        let err =
            to_dlpack(Arc::new(DeviceOnly), BackendId::Cuda, DLDataType::F32, &[4]).unwrap_err();
        assert!(err.is_unsupported(), "{err}");

        let (mem, drops) = ShmMemory::new(4096, false);
        let too_big = |spec: TensorSpec| {
            let err = DlpackTensor::new(mem.clone(), BackendId::CpuShm, &spec).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        };
        too_big(TensorSpec::new(DLDataType::F32, &[1025]));
        too_big(TensorSpec::new(DLDataType::F32, &[1024]).with_byte_offset(1));
        too_big(TensorSpec::new(DLDataType::U8, &[2, 2048]).with_strides(&[2049, 1]));
        too_big(TensorSpec::new(DLDataType::U8, &[-1]));
        too_big(TensorSpec::new(DLDataType::U8, &[4]).with_strides(&[1, 1]));
        too_big(TensorSpec::new(DLDataType::U8, &[4]).with_strides(&[-1]));
        too_big(TensorSpec::new(DLDataType::U8, &[i64::MAX, i64::MAX]));
        too_big(TensorSpec::new(DLDataType::U8, &[0]).with_byte_offset(4097));
        too_big(TensorSpec::new(DLDataType::new(2, 0, 1), &[1]));
        // Exactly full is fine.
        DlpackTensor::new(
            mem.clone(),
            BackendId::CpuShm,
            &TensorSpec::new(DLDataType::F32, &[1023]).with_byte_offset(4),
        )
        .unwrap();
        drop(mem);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn device_types_per_backend_and_location() {
        let dev = |t: DLDeviceType, id| DLDevice {
            device_type: t,
            device_id: id,
        };
        let cases = [
            (BackendId::CpuShm, Location::Host, dev(DLDeviceType::CPU, 0)),
            (
                BackendId::Cuda,
                Location::Device(3),
                dev(DLDeviceType::CUDA, 3),
            ),
            (
                BackendId::Cuda,
                Location::Host,
                dev(DLDeviceType::CUDA_HOST, 0),
            ),
            (
                BackendId::Cuda,
                Location::Managed,
                dev(DLDeviceType::CUDA_MANAGED, 0),
            ),
            (
                BackendId::CudaUvm,
                Location::Managed,
                dev(DLDeviceType::CUDA_MANAGED, 0),
            ),
            (
                BackendId::Ascend,
                Location::Device(1),
                dev(DLDeviceType::EXT_DEV, 1),
            ),
            (BackendId::Ascend, Location::Host, dev(DLDeviceType::CPU, 0)),
            (
                BackendId::MockCuda,
                Location::Device(2),
                dev(DLDeviceType::CPU, 0),
            ),
            (
                BackendId::MockAscend,
                Location::Managed,
                dev(DLDeviceType::CPU, 0),
            ),
            (
                BackendId::External(0x8001),
                Location::Host,
                dev(DLDeviceType::CPU, 0),
            ),
        ];
        for (backend, location, want) in cases {
            assert_eq!(
                dl_device(backend, location).unwrap(),
                want,
                "{backend} {location:?}"
            );
        }
        assert!(dl_device(BackendId::Ascend, Location::Managed)
            .unwrap_err()
            .is_unsupported());
        assert!(dl_device(BackendId::External(0x8001), Location::Device(0))
            .unwrap_err()
            .is_unsupported());
        assert!(dl_device(BackendId::Cuda, Location::Device(u32::MAX)).is_err());
    }
}
