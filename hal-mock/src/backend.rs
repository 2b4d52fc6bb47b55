//! The backend: a simulated vendor runtime and the devices it opens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hal_core::{Availability, Backend, BackendId, DeviceInfo, Error, Result};

use crate::device::MockDevice;
use crate::fault::Faults;
use crate::profile::Profile;
use crate::state::{BackendShared, DevRef, DeviceState};

/// A simulated vendor runtime: a set of devices following a [`Profile`].
///
/// Each instance is one simulated driver in this process (clones share it):
/// its devices share memory accounting, peer-access state, the import cache
/// and the [`Faults`], all by this process's ordinals, as a real runtime
/// keeps them under `CUDA_VISIBLE_DEVICES`. Build the same profile in
/// another process, with any visible-device list
/// ([`Profile::with_visible_devices`]), to import what this one exports:
/// handles find their device by UUID.
///
/// ```
/// use hal_core::{Backend, BackendId};
/// use hal_mock::{MockBackend, Profile};
///
/// let cuda = MockBackend::cuda(); // the default CUDA-like profile
/// assert_eq!(cuda.id(), BackendId::MockCuda);
/// assert_eq!(cuda.devices()?.len(), 4);
/// let ascend = MockBackend::new(Profile::ascend().with_devices(3));
/// assert_eq!(ascend.devices()?.len(), 3);
/// # Ok::<(), hal_core::Error>(())
/// ```
///
/// # How it is built
///
/// - **Memory** lives in sealed memfds mapped into the process, so handles
///   exported by one process are imported by another real process, which maps
///   the same pages. Nothing is created in `/dev/shm`. Device memory is not
///   host-visible: [`Memory::host_ptr`](hal_core::Memory::host_ptr) is `None`,
///   and bytes move with `Memory::read` / `Memory::write` (a simulated
///   `cuMemcpyDtoH` / `aclrtMemcpy`) or the stream copies
///   [`MockDevice::write_async`](crate::MockDevice::write_async) and
///   [`MockDevice::copy_async`](crate::MockDevice::copy_async). A device
///   address ([`Memory::addr`](hal_core::Memory::addr)) is the address of the
///   simulator's private mapping of the memory: unique and stable, like a
///   unified virtual address, but not to be dereferenced.
/// - **Streams** are ordered queues, each run by a worker thread: a stream
///   waiting on an event or a notify runs no later work until the wait is
///   satisfied, and `synchronize` waits for the queue to drain.
/// - **Events and notifies** keep their state in futex words in a shared
///   memfd, so records, signals and waits work across processes; host waits
///   take timeouts, and `wait_async` runs on a waiter thread
///   ([`hal_core::wait::blocking_future`]).
/// - **Leases**: each exported allocation keeps a
///   [`LeaseTable`](hal_core::lease::LeaseTable) in the exporter; the
///   exporter's broker registers a lease for each importing process, which
///   holds it until it closes (or dies).
/// - **Descriptors** travel through the exporter's broker
///   ([`hal_core::Exported`]), which enforces pid allow-lists across
///   processes; descriptors that arrive attached are checked against the
///   handle's allow-list by the import itself. Allow-lists govern the
///   processes other than the exporter's: the exporting process imports its
///   own exports from the handle text (its broker serves it) and with the
///   descriptors attached ([`Exported::share`](hal_core::Exported::share))
///   alike.
#[derive(Clone)]
pub struct MockBackend {
    shared: Arc<BackendShared>,
}

impl std::fmt::Debug for MockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockBackend")
            .field("profile", &self.shared.profile.name)
            .field("devices", &self.shared.devices.len())
            .field("visible_devices", &self.shared.profile.visible_devices)
            .finish()
    }
}

impl MockBackend {
    /// A backend simulating `profile`: for a profile of your own (another
    /// device count, memory size, visible-device list, older library). The
    /// default profiles are [`MockBackend::cuda`] and [`MockBackend::ascend`].
    /// A profile that fails [`Profile::validate`] gives a backend that is
    /// unavailable and says why.
    pub fn new(profile: Profile) -> MockBackend {
        let invalid = profile.validate().err().map(|e| e.to_string());
        let count = if invalid.is_some() {
            0
        } else {
            profile.visible_device_count()
        };
        // Ordinals are this process's; each device's UUID and name are its
        // physical device's.
        let devices = (0..count)
            .filter_map(|ordinal| profile.device_info(ordinal))
            .map(DeviceState::new)
            .collect();
        static INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        MockBackend {
            shared: Arc::new(BackendShared {
                instance: INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                profile,
                invalid,
                faults: Faults::default(),
                devices,
                import_cache: Mutex::new(HashMap::new()),
                own_buffers: Mutex::new(HashMap::new()),
                host_registered: hal_core::kit::os::HostRegistry::new(),
            }),
        }
    }

    /// The CUDA-like backend with its default profile ([`Profile::cuda`]).
    pub fn cuda() -> MockBackend {
        MockBackend::new(Profile::cuda())
    }

    /// The Ascend-like backend with its default profile ([`Profile::ascend`]).
    pub fn ascend() -> MockBackend {
        MockBackend::new(Profile::ascend())
    }

    /// The profile simulated.
    pub fn profile(&self) -> &Profile {
        &self.shared.profile
    }

    /// The fault injection of this backend instance (shared by every device
    /// opened from it, untouched by other instances).
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    fn check_valid(&self) -> Result<()> {
        match &self.shared.invalid {
            None => Ok(()),
            Some(reason) => Err(Error::Unavailable {
                backend: self.shared.profile.backend(),
                reason: format!("invalid profile `{}`: {reason}", self.shared.profile.name),
                searched: Vec::new(),
            }),
        }
    }
}

impl Backend for MockBackend {
    type Device = MockDevice;

    fn id(&self) -> BackendId {
        self.shared.profile.backend()
    }

    fn availability(&self) -> Availability {
        match &self.shared.invalid {
            None => Availability::Available,
            Some(reason) => Availability::Unavailable {
                reason: format!("invalid profile `{}`: {reason}", self.shared.profile.name),
                searched: Vec::new(),
            },
        }
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        self.check_valid()?;
        self.shared.faults.forked(self.shared.profile.vendor)?;
        Ok(self.shared.devices.iter().map(|d| d.info.clone()).collect())
    }

    fn open(&self, ordinal: u32) -> Result<MockDevice> {
        self.check_valid()?;
        let vendor = self.shared.profile.vendor;
        if ordinal as usize >= self.shared.devices.len() {
            return Err(vendor.invalid_device().error(
                vendor.backend(),
                format!(
                    "device {ordinal} does not exist: {}",
                    self.shared.device_count()
                ),
            ));
        }
        self.shared.faults.alive(vendor, ordinal)?;
        Ok(MockDevice::new(DevRef {
            shared: Arc::clone(&self.shared),
            ordinal,
        }))
    }
}
