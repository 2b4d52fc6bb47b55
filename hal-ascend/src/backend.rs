//! [`AscendBackend`]: the runtime, loaded and initialised on first use, and
//! its devices.

use std::path::PathBuf;
use std::sync::Arc;

use hal_core::dlpack::DLDeviceType;
use hal_core::kit::vendor::acl;
use hal_core::{
    Availability, Backend, BackendId, Capabilities, DeviceInfo, DlpackTypes, Error, Result,
};

use crate::context::Ctx;
use crate::device::AscendDevice;
use hal_core::kit::vendor::runtime::{Failure, Lazy};

use crate::ffi::result::{self, is_code};
use crate::ffi::sys::Runtime;
use crate::identity;
use crate::needs;
use crate::peer;
use crate::soc;

/// The Ascend backend: `libascendcl.so` loaded at run time (never linked;
/// [`LIBRARY_VAR`](crate::LIBRARY_VAR) names another library).
///
/// ```
/// use hal_core::Backend;
///
/// let ascend = hal_ascend::AscendBackend::new();
/// // On a machine without CANN this says why, naming the paths searched;
/// // it never panics.
/// println!("{:?}", ascend.availability());
/// ```
#[derive(Default)]
pub struct AscendBackend {
    /// The runtime, from the library named by the program, else the one
    /// `HAL_ASCEND_LIBRARY` names, else the search's.
    runtime: Lazy<Runtime>,
}

impl std::fmt::Debug for AscendBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AscendBackend").finish_non_exhaustive()
    }
}

impl AscendBackend {
    /// The backend; nothing is loaded until it is used. The library is the
    /// one `HAL_ASCEND_LIBRARY` names, or the first found by the search.
    pub fn new() -> AscendBackend {
        AscendBackend::default()
    }

    /// The backend on the runtime library at `path` (a stand-in, a CANN
    /// outside the search path), whatever `HAL_ASCEND_LIBRARY` says.
    pub fn with_library(path: impl Into<PathBuf>) -> AscendBackend {
        let runtime = Lazy::new(Some(path.into()));
        AscendBackend { runtime }
    }

    /// The loaded, initialised runtime.
    fn runtime(&self) -> Result<Arc<Runtime>> {
        let initialised = "the Ascend backend (its runtime was initialised)";
        self.runtime.usable(load_and_init, "ascend", initialised)
    }
}

/// Load the library and initialise the runtime once. A runtime a framework
/// initialised first answers `ACL_ERROR_REPEAT_INITIALIZE`, which is
/// success here; the runtime is never finalised (`aclFinalize` is not even
/// resolved), since a framework may share it.
fn load_and_init(library: Option<PathBuf>) -> std::result::Result<Arc<Runtime>, Failure> {
    let rt = Arc::new(Runtime::load(library).map_err(Failure::NotLoaded)?);
    let init = || -> Result<()> {
        match result::init(&rt) {
            Err(e) if is_code(&e, acl::REPEAT_INITIALIZE) => Ok(()),
            r => r,
        }
    };
    init().map_err(|e| Failure::Init {
        path: rt.path().clone(),
        reason: e.to_string(),
    })?;
    Ok(rt)
}

/// What device `ordinal` is and can do.
pub(crate) fn device_info(rt: &Arc<Runtime>, ordinal: u32) -> Result<DeviceInfo> {
    let count = result::device::count(rt)?;
    if ordinal >= count {
        return Err(Error::invalid(format!(
            "Ascend device {ordinal} does not exist: the runtime sees {count} device(s)"
        )));
    }
    let ctx = Ctx {
        rt: Arc::clone(rt),
        ordinal,
    };
    ctx.call(|| {
        let name = identity::soc_name(rt);
        let uuid = identity::uuid(rt, ordinal)?;
        let total = identity::total_memory(rt)?;
        let mut capabilities = Capabilities::NONE;
        if rt.offers(&needs::IPC_MEMORY) {
            // Memory keys with allow-lists of bare tgids, on by default;
            // importers counted by leases.
            capabilities = capabilities
                | Capabilities::IPC_MEMORY
                | Capabilities::LEASES
                | Capabilities::PID_ALLOW_LIST
                | Capabilities::PID_ALLOW_LIST_DEFAULT_ON;
            // Imports onto another device where the runtime says this
            // device reaches another's memory.
            if rt.offers(&needs::PEER) && peer::claimed(rt, ordinal, count)? {
                capabilities = capabilities | Capabilities::PEER_ACCESS;
            }
        }
        if rt.offers(&needs::IPC_EVENT) && soc::has_ipc_events(rt, &name) {
            // No IPC_EVENT_QUERY: an IPC event cannot be queried or timed.
            capabilities = capabilities | Capabilities::IPC_EVENT | Capabilities::LEASES;
        }
        let mut granularity = 2 << 20;
        if rt.offers(&needs::VMM) {
            // Physical memory shared by the 64-bit handle, its allow-list of
            // bare tgids on by default, importers counted by leases.
            granularity = crate::vmm::device_granularity(rt, ordinal)?;
            capabilities = capabilities
                | Capabilities::VMM
                | Capabilities::GROWABLE
                | Capabilities::LEASES
                | Capabilities::PID_ALLOW_LIST
                | Capabilities::PID_ALLOW_LIST_DEFAULT_ON;
        }
        if rt.offers(&needs::IPC_NOTIFY) {
            capabilities = capabilities
                | Capabilities::IPC_NOTIFY
                | Capabilities::CREATOR_ONLY_NOTIFY_WAIT
                | Capabilities::STREAM_ORDERED_NOTIFY;
        }
        Ok(DeviceInfo {
            backend: BackendId::Ascend,
            ordinal,
            uuid,
            name,
            total_memory: total,
            page_sizes: crate::pages::SIZES.to_vec(),
            granularity_min: granularity,
            granularity_recommended: granularity,
            capabilities,
            dlpack: DLPACK,
        })
    })
}

/// The DLPack device types of Ascend memory. The DLPack 1.0 and 1.1 headers
/// have no Ascend type; PyTorch exchanges tensors of out-of-tree devices
/// (`torch_npu`'s `PrivateUse1`) as `kDLExtDev`, so device memory is
/// `kDLExtDev` (a consumer that knows `kDLAscend`, 21, is given it with
/// `TensorSpec::with_device`). Host memory is `kDLCPU`; Ascend has no
/// managed memory.
pub const DLPACK: DlpackTypes = DlpackTypes {
    device: Some(DLDeviceType::EXT_DEV.0),
    host: DLDeviceType::CPU.0,
    managed: None,
};

impl Backend for AscendBackend {
    type Device = AscendDevice;

    /// Available once the runtime loads, initialises and sees a device.
    fn availability(&self) -> Availability {
        self.runtime.availability(
            load_and_init,
            result::device::count,
            "the runtime sees no Ascend device",
        )
    }

    fn id(&self) -> BackendId {
        BackendId::Ascend
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        let rt = self.runtime()?;
        (0..result::device::count(&rt)?)
            .map(|i| device_info(&rt, i))
            .collect()
    }

    fn open(&self, ordinal: u32) -> Result<AscendDevice> {
        let rt = self.runtime()?;
        let info = device_info(&rt, ordinal)?;
        Ok(AscendDevice::new(Arc::new(Ctx { rt, ordinal }), info))
    }
}
