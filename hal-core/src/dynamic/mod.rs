//! The object-safe mirror of the traits, for choosing a backend at run time.
//!
//! The traits of [`crate::device`] use associated types, so a program that
//! knows its backend at compile time pays no dynamic dispatch. A program that
//! picks a backend at run time (from a configuration file, a command-line
//! flag, or by probing the machine) speaks this module instead:
//!
//! - [`DynBackend`] and [`DynDevice`] have the same operations as
//!   [`Backend`](crate::Backend) and [`Device`](crate::Device), with every resource boxed as a trait object;
//! - blanket implementations make every `B: Backend` a [`DynBackend`] and
//!   every `D: Device` a [`DynDevice`], so a backend crate writes nothing for
//!   this layer;
//! - every boxed resource has `as_any()`, to get the backend's own type back
//!   with `Any::downcast_ref`.
//!
//! A resource passed to a device must come from that device's backend: one
//! from another backend is refused with [`Error::InvalidArgument`](crate::Error::InvalidArgument), never a
//! panic. Resources are told apart by their concrete type; backends whose
//! instances share resource types (the simulator's CUDA and Ascend profiles)
//! check the owner of a resource themselves.
//!
//! ```
//! use hal_core::dynamic::{DynBackend, DynDevice};
//! use hal_core::{AllocDesc, Capabilities, Result};
//!
//! /// Fill a buffer on whatever backend the caller chose.
//! fn fill(backend: &dyn DynBackend, byte: u8) -> Result<()> {
//!     let device = backend.open(0)?;
//!     let desc = if device.info().capabilities.contains(Capabilities::MEMORY_IS_HOST) {
//!         AllocDesc::host(4096)
//!     } else {
//!         AllocDesc::device(device.info().ordinal, 4096)
//!     };
//!     let buffer = device.allocate(&desc)?;
//!     buffer.write(0, &[byte; 4096])?;
//!     Ok(())
//! }
//! ```

#[allow(unsafe_code)]
mod adapter;
mod own;
#[allow(unsafe_code)]
mod traits;
mod vmm;

pub use traits::{
    DynAllocation, DynBackend, DynDevice, DynEvent, DynMapping, DynMemRef, DynNotify, DynStream,
};
pub use vmm::{DynPhysical, DynReservation, DynVmm};

#[cfg(test)]
mod tests {
    //! A tiny in-memory backend, instantiated twice (`Toy<1>`, `Toy<2>`) so
    //! that the two instances have distinct resource types.

    use super::*;
    use crate::backend::Backend;
    use crate::device::{
        Allocation, Device, Event, FreeError, Mapping, Memory, Notify, WaitFuture,
    };
    use crate::error::{Error, Result};
    use crate::handle::{Handle, SharedHandle};
    use crate::types::WaitOptions;
    use crate::types::{
        Access, AllocDesc, Availability, BackendId, Capabilities, DeviceInfo, EventFlags,
        ExportOptions, Granularity, ImportOptions, Location,
    };
    use crate::vmm::{AccessGrant, AccessTarget, PhysicalDesc};
    use crate::vmm::{Physical, Reservation, Vmm};
    use crate::wait;
    use crate::Exported;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    struct Toy<const N: u16>;
    struct ToyDevice<const N: u16> {
        info: DeviceInfo,
    }
    struct ToyMem<const N: u16> {
        bytes: Mutex<Vec<u8>>,
        importers: AtomicUsize,
        handle: Handle,
    }
    struct ToyStream<const N: u16>;
    struct ToyEvent<const N: u16>(AtomicBool);
    struct ToyNotify<const N: u16>(AtomicBool);
    struct ToyPhys<const N: u16>(u64);
    struct ToyRes<const N: u16>(u64);

    fn toy_handle(n: u16, kind: crate::HandleKind) -> Handle {
        Handle {
            kind,
            backend: BackendId::External(0x8000 + n),
            device: 0,
            device_uuid: [n as u8; 16],
            location: Location::Host,
            size: 0,
            offset: 0,
            address: 0,
            creator_pid: crate::kit::os::pid(),
            creator_start: 0,
            creator_pid_ns: crate::kit::os::pid_namespace(),
            object_id: [0; 16],
            flags: crate::HandleFlags::default(),
            pid_kind: crate::PidKind::Os,
            allowed_pids: Vec::new(),
            fds: crate::FdSource::None,
            payload: Vec::new(),
        }
    }

    fn unsupported(op: &str) -> Error {
        Error::unsupported(
            BackendId::External(0x8000),
            op,
            "the toy backend does not share anything",
        )
    }

    impl<const N: u16> Backend for Toy<N> {
        type Device = ToyDevice<N>;
        fn id(&self) -> BackendId {
            BackendId::External(0x8000 + N)
        }
        fn availability(&self) -> Availability {
            Availability::Available
        }
        fn devices(&self) -> Result<Vec<DeviceInfo>> {
            Ok(vec![ToyDevice::<N>::make_info()])
        }
        fn open(&self, ordinal: u32) -> Result<ToyDevice<N>> {
            if ordinal != 0 {
                return Err(Error::NotFound {
                    what: format!("toy device {ordinal}"),
                });
            }
            Ok(ToyDevice {
                info: ToyDevice::<N>::make_info(),
            })
        }
    }

    impl<const N: u16> ToyDevice<N> {
        fn make_info() -> DeviceInfo {
            DeviceInfo {
                backend: BackendId::External(0x8000 + N),
                ordinal: 0,
                uuid: [N as u8; 16],
                name: format!("toy {N}"),
                total_memory: 1 << 20,
                page_sizes: vec![4096],
                granularity_min: 4096,
                granularity_recommended: 4096,
                capabilities: Capabilities::MEMORY_IS_HOST | Capabilities::VMM,
                dlpack: crate::DlpackTypes::HOST,
            }
        }
    }

    impl<const N: u16> Memory for ToyMem<N> {
        fn addr(&self) -> u64 {
            0
        }
        fn len(&self) -> u64 {
            self.bytes.lock().map(|b| b.len() as u64).unwrap_or(0)
        }
        fn location(&self) -> Location {
            Location::Host
        }
        fn host_ptr(&self) -> Option<*mut u8> {
            None
        }
        fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
            let b = self.bytes.lock().map_err(|_| Error::invalid("poisoned"))?;
            crate::device::check_bounds(offset, dst.len() as u64, b.len() as u64)?;
            dst.copy_from_slice(&b[offset as usize..offset as usize + dst.len()]);
            Ok(())
        }
        fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
            let mut b = self.bytes.lock().map_err(|_| Error::invalid("poisoned"))?;
            crate::device::check_bounds(offset, src.len() as u64, b.len() as u64)?;
            b[offset as usize..offset as usize + src.len()].copy_from_slice(src);
            Ok(())
        }
    }

    impl<const N: u16> Allocation for ToyMem<N> {
        fn importers(&self) -> Result<usize> {
            Ok(self.importers.load(Ordering::SeqCst))
        }
        fn wait_unleased(&self, _timeout: Option<Duration>) -> Result<()> {
            Ok(())
        }
        fn free(self) -> std::result::Result<(), FreeError<Self>> {
            let holders = self.importers.load(Ordering::SeqCst);
            if holders > 0 {
                return Err(FreeError {
                    resource: self,
                    error: Error::Busy {
                        what: "toy allocation".into(),
                        holders,
                    },
                });
            }
            Ok(())
        }
    }

    impl<const N: u16> Mapping for ToyMem<N> {
        fn handle(&self) -> &Handle {
            &self.handle
        }
    }

    impl<const N: u16> Event for ToyEvent<N> {
        fn query(&self) -> Result<bool> {
            Ok(self.0.load(Ordering::SeqCst))
        }
        fn wait(&self, _opts: WaitOptions) -> Result<()> {
            Ok(())
        }
        fn wait_async(&self, _opts: WaitOptions) -> WaitFuture<'_> {
            wait::ready(Ok(()))
        }
    }

    impl<const N: u16> Notify for ToyNotify<N> {
        fn signal(&self) -> Result<()> {
            self.0.store(true, Ordering::SeqCst);
            Ok(())
        }
        fn wait(&self, _opts: WaitOptions) -> Result<()> {
            self.0.store(false, Ordering::SeqCst);
            Ok(())
        }
        fn wait_async(&self, _opts: WaitOptions) -> WaitFuture<'_> {
            wait::ready(Ok(()))
        }
    }

    impl<const N: u16> Physical for ToyPhys<N> {
        fn size(&self) -> u64 {
            self.0
        }
        fn location(&self) -> crate::PhysicalLocation {
            crate::PhysicalLocation::Device(0)
        }
        fn handle_type(&self) -> crate::ShareableHandle {
            crate::ShareableHandle::PosixFd
        }
    }

    impl<const N: u16> Reservation for ToyRes<N> {
        fn base(&self) -> u64 {
            0x1000_0000
        }
        fn len(&self) -> u64 {
            self.0
        }
        fn read(&self, _offset: u64, _dst: &mut [u8]) -> Result<()> {
            Err(unsupported("reservation read"))
        }
        fn write(&self, _offset: u64, _src: &[u8]) -> Result<()> {
            Err(unsupported("reservation write"))
        }
    }

    impl<const N: u16> Device for ToyDevice<N> {
        type Allocation = ToyMem<N>;
        type Mapping = ToyMem<N>;
        type Stream = ToyStream<N>;
        type Event = ToyEvent<N>;
        type Notify = ToyNotify<N>;
        type HostRegistration = ToyMem<N>;

        fn info(&self) -> &DeviceInfo {
            &self.info
        }
        unsafe fn register_host(&self, _p: *mut u8, _l: u64) -> Result<ToyMem<N>> {
            Err(unsupported("register_host"))
        }
        fn allocate(&self, desc: &AllocDesc) -> Result<ToyMem<N>> {
            Ok(ToyMem {
                bytes: Mutex::new(vec![0; desc.size as usize]),
                importers: AtomicUsize::new(0),
                handle: toy_handle(N, crate::HandleKind::Memory),
            })
        }
        fn export_memory(&self, _a: &ToyMem<N>, _o: &ExportOptions) -> Result<Exported> {
            Err(unsupported("export_memory"))
        }
        fn allow_importers(&self, _e: &mut Exported, _p: &[u32]) -> Result<()> {
            Err(unsupported("allow_importers"))
        }
        fn import_memory(&self, s: SharedHandle, _o: &ImportOptions) -> Result<ToyMem<N>> {
            Ok(ToyMem {
                bytes: Mutex::new(vec![0; s.handle.size as usize]),
                importers: AtomicUsize::new(0),
                handle: s.handle,
            })
        }
        fn create_stream(&self) -> Result<ToyStream<N>> {
            Ok(ToyStream)
        }
        fn synchronize(&self, _s: &ToyStream<N>, _t: Option<Duration>) -> Result<()> {
            Ok(())
        }
        fn copy_async(
            &self,
            _s: &ToyStream<N>,
            _d: crate::MemRef<'_, Self>,
            _do: u64,
            _src: crate::MemRef<'_, Self>,
            _so: u64,
            _l: u64,
        ) -> Result<()> {
            Err(Error::unsupported(
                BackendId::External(0x8000),
                "copy_async",
                "no streams",
            ))
        }
        fn write_async(
            &self,
            _s: &ToyStream<N>,
            _d: crate::MemRef<'_, Self>,
            _o: u64,
            _data: Vec<u8>,
        ) -> Result<()> {
            Err(Error::unsupported(
                BackendId::External(0x8000),
                "write_async",
                "no streams",
            ))
        }
        fn memset_async(
            &self,
            _s: &ToyStream<N>,
            _d: crate::MemRef<'_, Self>,
            _o: u64,
            _l: u64,
            _v: u8,
        ) -> Result<()> {
            Err(Error::unsupported(
                BackendId::External(0x8000),
                "memset_async",
                "no streams",
            ))
        }
        fn query_stream(&self, _s: &ToyStream<N>) -> Result<bool> {
            Ok(true)
        }
        fn synchronize_device(&self, _t: Option<Duration>) -> Result<()> {
            Ok(())
        }
        fn create_event(&self, _f: EventFlags) -> Result<ToyEvent<N>> {
            Ok(ToyEvent(AtomicBool::new(false)))
        }
        fn record_event(&self, _s: &ToyStream<N>, e: &ToyEvent<N>) -> Result<()> {
            e.0.store(true, Ordering::SeqCst);
            Ok(())
        }
        fn stream_wait_event(&self, _s: &ToyStream<N>, _e: &ToyEvent<N>) -> Result<()> {
            Ok(())
        }
        fn export_event(&self, _e: &ToyEvent<N>, _o: &ExportOptions) -> Result<Exported> {
            Err(unsupported("export_event"))
        }
        fn import_event(&self, _s: SharedHandle, _o: &ImportOptions) -> Result<ToyEvent<N>> {
            Err(unsupported("import_event"))
        }
        fn create_notify_with(&self, _f: crate::NotifyFlags) -> Result<ToyNotify<N>> {
            Ok(ToyNotify(AtomicBool::new(false)))
        }
        fn record_notify(&self, _s: &ToyStream<N>, n: &ToyNotify<N>) -> Result<()> {
            n.signal()
        }
        fn stream_wait_notify(
            &self,
            _s: &ToyStream<N>,
            n: &ToyNotify<N>,
            _t: Option<Duration>,
        ) -> Result<()> {
            Notify::wait(n, WaitOptions::default())
        }
        fn export_notify(&self, _n: &ToyNotify<N>, _o: &ExportOptions) -> Result<Exported> {
            Err(unsupported("export_notify"))
        }
        fn import_notify(&self, _s: SharedHandle, _o: &ImportOptions) -> Result<ToyNotify<N>> {
            Err(unsupported("import_notify"))
        }
    }

    impl<const N: u16> Vmm for ToyDevice<N> {
        type Physical = ToyPhys<N>;
        type Reservation = ToyRes<N>;

        fn granularity(&self, which: Granularity) -> Result<u64> {
            Ok(self.info.granularity(which))
        }
        fn allocate_physical_with(&self, desc: &PhysicalDesc) -> Result<ToyPhys<N>> {
            Ok(ToyPhys(desc.size))
        }
        fn reserve(&self, size: u64, _align: u64) -> Result<ToyRes<N>> {
            Ok(ToyRes(size))
        }
        fn map_range(
            &self,
            _r: &ToyRes<N>,
            _o: u64,
            _p: &ToyPhys<N>,
            _po: u64,
            _l: u64,
        ) -> Result<()> {
            Ok(())
        }
        fn unmap(&self, _r: &ToyRes<N>, _o: u64, _l: u64) -> Result<()> {
            Ok(())
        }
        fn set_access_for(
            &self,
            _r: &ToyRes<N>,
            _o: u64,
            _l: u64,
            _g: &[AccessGrant],
        ) -> Result<()> {
            Ok(())
        }
        fn access(&self, _r: &ToyRes<N>, _o: u64, _t: AccessTarget) -> Result<Access> {
            Ok(Access::ReadWrite)
        }
        fn export_physical(&self, _p: &ToyPhys<N>, _o: &ExportOptions) -> Result<Exported> {
            Err(unsupported("export_physical"))
        }
        fn import_physical(&self, _s: SharedHandle, _o: &ImportOptions) -> Result<ToyPhys<N>> {
            Err(unsupported("import_physical"))
        }
    }

    fn backends() -> Vec<Box<dyn DynBackend>> {
        vec![Box::new(Toy::<1>), Box::new(Toy::<2>)]
    }

    fn is_invalid(r: Result<impl Sized>) -> bool {
        matches!(r, Err(Error::InvalidArgument { .. }))
    }

    #[test]
    fn backends_are_chosen_at_run_time() {
        let names: Vec<String> = backends().iter().map(|b| b.name()).collect();
        assert_eq!(names, ["external-8001", "external-8002"]);
        for b in backends() {
            assert!(b.availability().is_available());
            assert_eq!(b.devices().unwrap().len(), 1);
            assert_eq!(b.open(0).unwrap().info().backend, b.id());
            assert!(matches!(b.open(7), Err(Error::NotFound { .. })));
        }
    }

    #[test]
    fn process_id_defaults_to_the_os_pid_through_the_box() {
        for b in backends() {
            let dev = b.open(0).unwrap();
            assert_eq!(dev.process_id().unwrap(), crate::kit::os::pid());
        }
        let dev = Backend::open(&Toy::<1>, 0).unwrap();
        assert_eq!(Device::process_id(&dev).unwrap(), std::process::id());
    }

    #[test]
    fn boxed_memory_reads_writes_and_downcasts() {
        let dev = DynBackend::open(&Toy::<1>, 0).unwrap();
        assert!(dev.capabilities().contains(Capabilities::VMM));
        let alloc = dev.allocate(&AllocDesc::host(64)).unwrap();
        alloc.write(8, b"hello").unwrap();
        let mut out = [0u8; 5];
        alloc.read(8, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        assert!(alloc.as_any().downcast_ref::<ToyMem<1>>().is_some());
        assert!(alloc.as_any().downcast_ref::<ToyMem<2>>().is_none());
        assert!(alloc.write(60, b"too long").is_err());

        fn generic_len(m: &impl Memory) -> u64 {
            m.len()
        }
        assert_eq!(generic_len(&alloc), 64);
        let mut handle = toy_handle(1, crate::HandleKind::Memory);
        handle.size = 32;
        let mapping = dev
            .import_memory(SharedHandle::from(handle), &ImportOptions::default())
            .unwrap();
        assert_eq!(generic_len(&mapping), 32);
        assert_eq!(mapping.handle().size, 32);
    }

    #[test]
    fn free_through_the_box_gives_the_allocation_back_when_busy() {
        let dev = Backend::open(&Toy::<1>, 0).unwrap();
        let dev: &dyn DynDevice = &dev;
        let alloc = dev.allocate(&AllocDesc::host(16)).unwrap();
        let toy = alloc.as_any().downcast_ref::<ToyMem<1>>().unwrap();
        toy.importers.store(2, Ordering::SeqCst);
        let back = match alloc.free() {
            Err(e) => {
                assert!(matches!(e.error, Error::Busy { holders: 2, .. }));
                e.resource
            }
            Ok(()) => panic!("a busy allocation was freed"),
        };
        assert_eq!(back.importers().unwrap(), 2);
        let toy = back.as_any().downcast_ref::<ToyMem<1>>().unwrap();
        toy.importers.store(0, Ordering::SeqCst);
        assert!(back.free().is_ok());
    }

    #[test]
    fn own_resources_pass_through_to_the_backend() {
        let dev: Box<dyn DynDevice> = DynBackend::open(&Toy::<1>, 0).unwrap();
        let stream = dev.create_stream().unwrap();
        let event = dev.create_event(EventFlags::default()).unwrap();
        let notify = dev.create_notify().unwrap();
        let alloc = dev.allocate(&AllocDesc::host(4096)).unwrap();
        let phys = dev.vmm().allocate_physical(4096).unwrap();
        let res = dev.vmm().reserve(8192, 0).unwrap();

        // A boxed stream passes as `&stream` or `&*stream`; other resources as `&*x`.
        dev.synchronize(&stream, None).unwrap();
        dev.synchronize(&*stream, None).unwrap();
        dev.record_event(&stream, &*event).unwrap();
        assert!(event.query().unwrap());
        dev.stream_wait_event(&stream, &*event).unwrap();
        dev.record_notify(&*stream, &*notify).unwrap();
        dev.stream_wait_notify(&*stream, &*notify, None).unwrap();
        dev.vmm().map(&*res, 0, &*phys).unwrap();
        dev.vmm().set_access(&*res, 0, 4096, Access::Read).unwrap();
        dev.vmm().unmap(&*res, 0, 4096).unwrap();
        assert_eq!(dev.vmm().granularity(Granularity::Minimum).unwrap(), 4096);
        assert_eq!(phys.size(), 4096);
        assert_eq!(res.len(), 8192);

        // The backend's own answer comes through (here: unsupported).
        let opts = ExportOptions::default();
        assert!(dev
            .export_memory(&*alloc, &opts)
            .unwrap_err()
            .is_unsupported());
        assert!(dev
            .export_event(&*event, &opts)
            .unwrap_err()
            .is_unsupported());
        assert!(dev
            .export_notify(&*notify, &opts)
            .unwrap_err()
            .is_unsupported());
        assert!(dev
            .vmm()
            .export_physical(&*phys, &opts)
            .unwrap_err()
            .is_unsupported());
        assert!(stream.as_any().downcast_ref::<ToyStream<1>>().is_some());
    }

    #[test]
    fn resources_of_another_backend_are_invalid_arguments() {
        let one: Box<dyn DynDevice> = DynBackend::open(&Toy::<1>, 0).unwrap();
        let two: Box<dyn DynDevice> = DynBackend::open(&Toy::<2>, 0).unwrap();
        let stream1 = one.create_stream().unwrap();
        let stream2 = two.create_stream().unwrap();
        let event2 = two.create_event(EventFlags::default()).unwrap();
        let notify2 = two.create_notify().unwrap();
        let alloc2 = two.allocate(&AllocDesc::host(4096)).unwrap();
        let phys1 = one.vmm().allocate_physical(4096).unwrap();
        let phys2 = two.vmm().allocate_physical(4096).unwrap();
        let res1 = one.vmm().reserve(8192, 0).unwrap();
        let res2 = two.vmm().reserve(8192, 0).unwrap();
        let event1 = one.create_event(EventFlags::default()).unwrap();
        let notify1 = one.create_notify().unwrap();
        let opts = ExportOptions::default();

        assert!(is_invalid(one.export_memory(&*alloc2, &opts)));
        assert!(is_invalid(one.synchronize(&*stream2, None)));
        assert!(is_invalid(one.record_event(&*stream2, &*event1)));
        assert!(is_invalid(one.record_event(&*stream1, &*event2)));
        assert!(is_invalid(one.stream_wait_event(&*stream2, &*event1)));
        assert!(is_invalid(one.stream_wait_event(&*stream1, &*event2)));
        assert!(is_invalid(one.export_event(&*event2, &opts)));
        assert!(is_invalid(one.record_notify(&*stream2, &*notify1)));
        assert!(is_invalid(one.record_notify(&*stream1, &*notify2)));
        assert!(is_invalid(
            one.stream_wait_notify(&*stream2, &*notify1, None)
        ));
        assert!(is_invalid(
            one.stream_wait_notify(&*stream1, &*notify2, None)
        ));
        assert!(is_invalid(one.export_notify(&*notify2, &opts)));
        assert!(is_invalid(one.vmm().map(&*res2, 0, &*phys1)));
        assert!(is_invalid(one.vmm().map(&*res1, 0, &*phys2)));
        assert!(is_invalid(one.vmm().unmap(&*res2, 0, 4096)));
        assert!(is_invalid(one.vmm().set_access(
            &*res2,
            0,
            4096,
            Access::ReadWrite
        )));
        assert!(is_invalid(one.vmm().export_physical(&*phys2, &opts)));

        let msg = one.synchronize(&*stream2, None).unwrap_err().to_string();
        assert!(
            msg.contains("stream") && msg.contains("external-8001"),
            "{msg}"
        );
    }
}
