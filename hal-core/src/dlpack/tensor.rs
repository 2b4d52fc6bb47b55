//! The tensor lent to a consumer: [`DlpackTensor`], the holder its deleter
//! frees, and the deleter.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::device::Memory;
use crate::error::{Error, Result};
use crate::types::DeviceInfo;

use super::abi::{
    DLDataType, DLDeviceType, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
};
use super::device::dl_device;
use super::spec::TensorSpec;

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
#[must_use = "the deleter runs when this value drops, unless `into_raw` handed the tensor to a consumer"]
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
    /// Describe `mem`, memory of the device `info`, as a tensor of `spec`
    /// (the device's declared DLPack types choose the device type, see
    /// [`dl_device`]).
    ///
    /// Device memory is described too: its data pointer is the device's
    /// address ([`Memory::addr`]) and its device type the backend's (a
    /// framework hands it to its own kernels). Refused when a host device
    /// type (`kDLCPU`, `kDLCUDAHost`) would describe memory that is not
    /// host-visible ([`Error::Unsupported`]), and when the layout does not
    /// fit its length ([`Error::InvalidArgument`]).
    pub fn new<M>(mem: Arc<M>, info: &DeviceInfo, spec: &TensorSpec) -> Result<DlpackTensor>
    where
        M: Memory + ?Sized + 'static,
    {
        let (strides, elements) = spec.layout(mem.len())?;
        let device = match spec.device {
            Some(d) => d,
            None => dl_device(info, mem.location())?,
        };
        let host_type = matches!(
            device.device_type,
            DLDeviceType::CPU | DLDeviceType::CUDA_HOST
        );
        let data: *mut c_void = match (host_type, mem.host_ptr()) {
            (true, None) => {
                return Err(Error::unsupported(
                    info.backend,
                    "DLPack export",
                    format!(
                        "the {:?} memory is not host-visible, so a host device type cannot \
                         describe it; export it with its device's type, or copy it into host \
                         memory first",
                        mem.location()
                    ),
                ))
            }
            _ if elements == 0 => std::ptr::null_mut(),
            (true, Some(host)) => host.cast(),
            (false, _) => mem.addr() as usize as *mut c_void,
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
    info: &DeviceInfo,
    dtype: DLDataType,
    shape: &[i64],
) -> Result<DlpackTensor>
where
    M: Memory + ?Sized + 'static,
{
    DlpackTensor::new(mem, info, &TensorSpec::new(dtype, shape))
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::dlpack::DLDevice;
    use crate::kit::os::{memfd, Prot, SharedMap};
    use crate::types::{BackendId, DlpackTypes, Location};

    fn info(backend: BackendId, dlpack: DlpackTypes) -> DeviceInfo {
        DeviceInfo::for_tests(backend, dlpack)
    }

    fn host() -> DeviceInfo {
        info(BackendId::CpuShm, DlpackTypes::HOST)
    }

    fn cuda() -> DeviceInfo {
        info(
            BackendId::Cuda,
            DlpackTypes {
                device: Some(DLDeviceType::CUDA.0),
                host: DLDeviceType::CUDA_HOST.0,
                managed: Some(DLDeviceType::CUDA_MANAGED.0),
            },
        )
    }

    fn simulated() -> DeviceInfo {
        info(
            BackendId::MockCuda,
            DlpackTypes {
                device: Some(DLDeviceType::EXT_DEV.0),
                host: DLDeviceType::CPU.0,
                managed: Some(DLDeviceType::CPU.0),
            },
        )
    }

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
            Err(Error::unsupported(
                crate::BackendId::External(0x8000),
                "read",
                "device only",
            ))
        }
        fn write(&self, _: u64, _: &[u8]) -> Result<()> {
            Err(Error::unsupported(
                crate::BackendId::External(0x8000),
                "write",
                "device only",
            ))
        }
    }

    #[test]
    fn tensor_over_shared_memory_keeps_it_alive_until_the_deleter() {
        let (mem, drops) = ShmMemory::new(4096, false);
        let values: Vec<u8> = (0..32u32).flat_map(|v| (v as f32).to_ne_bytes()).collect();
        mem.write(0, &values).unwrap();
        let base = mem.map.as_ptr();

        let tensor = to_dlpack(mem, &host(), DLDataType::F32, &[4, 8]).unwrap();
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
        let tensor = to_dlpack(mem.clone(), &host(), DLDataType::U8, &[8192]).unwrap();
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
        let raw = to_dlpack(mem, &host(), DLDataType::I64, &[2, 2])
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
        let t = to_dlpack(mem, &host(), DLDataType::U8, &[16]).unwrap();
        assert!(t.is_read_only());
        assert_eq!(t.as_managed().flags, DLPACK_FLAG_BITMASK_READ_ONLY);

        let (mem, _drops) = ShmMemory::new(4096, false);
        let spec = TensorSpec::new(DLDataType::U8, &[16]).read_only();
        let t = DlpackTensor::new(mem, &host(), &spec).unwrap();
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
        let t = DlpackTensor::new(mem, &host(), &spec).unwrap();
        assert_eq!(t.strides(), &[16, 1]);
        assert_eq!(t.tensor().byte_offset, 128);
        assert_eq!(t.tensor().data, base.cast());
        assert_eq!(t.tensor().device.device_type, DLDeviceType::CUDA_HOST);
    }

    #[test]
    fn empty_and_scalar_tensors() {
        let (mem, _drops) = ShmMemory::new(4096, false);
        let t = to_dlpack(mem.clone(), &host(), DLDataType::F32, &[0, 5]).unwrap();
        assert!(t.tensor().data.is_null());
        assert_eq!(t.strides(), &[5, 1]);
        let t = to_dlpack(mem, &host(), DLDataType::F64, &[]).unwrap();
        assert_eq!(t.tensor().ndim, 0);
        assert!(t.tensor().shape.is_null());
        assert!(!t.tensor().data.is_null());
    }

    #[test]
    fn device_memory_is_described_by_its_device_address() {
        let t = to_dlpack(Arc::new(DeviceOnly), &cuda(), DLDataType::F32, &[4]).unwrap();
        assert_eq!(t.tensor().data as usize, 0x7000_0000);
        assert_eq!(t.tensor().device.device_type, DLDeviceType::CUDA);
        assert_eq!(t.tensor().device.device_id, 0);
        let sim = to_dlpack(Arc::new(DeviceOnly), &simulated(), DLDataType::U8, &[8]).unwrap();
        assert_eq!(sim.tensor().device.device_type, DLDeviceType::EXT_DEV);
        assert_eq!(sim.tensor().data as usize, 0x7000_0000);
    }

    #[test]
    fn refusals() {
        // Device memory described as host memory.
        let err = DlpackTensor::new(
            Arc::new(DeviceOnly),
            &cuda(),
            &TensorSpec::new(DLDataType::F32, &[4]).with_device(DLDevice::CPU),
        )
        .unwrap_err();
        assert!(err.is_unsupported(), "{err}");

        let (mem, drops) = ShmMemory::new(4096, false);
        let too_big = |spec: TensorSpec| {
            let err = DlpackTensor::new(mem.clone(), &host(), &spec).unwrap_err();
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
        // Exactly full is fine (the tensor is dropped at once).
        let _ = DlpackTensor::new(
            mem.clone(),
            &host(),
            &TensorSpec::new(DLDataType::F32, &[1023]).with_byte_offset(4),
        )
        .unwrap();
        drop(mem);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }
}
