//! Notifies: a word of a shared page (a sealed memfd, `hal_core::kit::export::syncpage`)
//! that the host signals with an atomic store and waits on with a futex;
//! exported by descriptor through the broker, so another process maps the
//! same page.
//!
//! In stream order, a notify is recorded with `cuStreamWriteValue32` and
//! waited on with `cuStreamWaitValue32` (equal to 1, then a write of 0 to
//! consume the signal) on the page registered with the device
//! (`cuMemHostRegister`, once per page and process, on first stream use);
//! `device.rs` queues them, and makes the stream hold the notify until it
//! ran them.
//! A GPU cannot make the futex call that wakes a sleeping host waiter, so
//! host waits on a notify sleep at most [`HOST_POLL`] at a time: a signal
//! written by a stream is seen within that bound. Measured on an H200 with
//! plain driver calls driven from Python, outside this repository (the
//! vendor notes, `shared/vendor/cuda.md`, "Measured on an H200"): a CPU in
//! one process rang a GPU stream in another and got its answer in 3.6 µs
//! (the stream side polls memory, not the host's futex).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hal_core::kit::export::syncpage::{PageKind, SyncPage};
use hal_core::kit::export::{new_handle, HandleSpec};
use hal_core::kit::RegisteredHost;
use hal_core::wait::blocking_future;
use hal_core::{
    BackendId, DeviceInfo, Error, ExportOptions, Exported, HandleKind, Importers, Location, Memory,
    Notify, NotifyFlags, Result, SharedHandle, WaitFuture, WaitOptions,
};

use crate::context::Primary;
use crate::ffi::CUdeviceptr;
use crate::memory::{host, registration};

/// `CU_STREAM_WAIT_VALUE_EQ`.
pub(crate) const WAIT_VALUE_EQ: u32 = 1;

/// The page of a CUDA notify.
const PAGE: PageKind = PageKind {
    magic: u32::from_le_bytes(*b"HCNT"),
    kind: 1,
};
/// The signal word.
const SIGNAL: usize = 0;

/// The longest a host waiter sleeps before it looks at the word again.
pub const HOST_POLL: Duration = Duration::from_micros(500);

/// A notify: a wake-up signal shared across processes. Any side may signal
/// and wait; a wait consumes the signal, and signals given while nobody
/// waits collapse into one.
#[derive(Debug, Clone)]
#[must_use = "the notify is destroyed when this value drops"]
pub struct CudaNotify {
    inner: Arc<Inner>,
    flags: NotifyFlags,
}

#[derive(Debug)]
struct Inner {
    /// The page registered with the device, made on first stream use;
    /// it keeps the page mapped until it is unregistered, on a teardown
    /// worker (`registration::register_kept`).
    registered: OnceLock<RegisteredHost>,
    page: Arc<SyncPage>,
}

impl CudaNotify {
    fn wrap(page: SyncPage, flags: NotifyFlags) -> CudaNotify {
        CudaNotify {
            inner: Arc::new(Inner {
                registered: OnceLock::new(),
                page: Arc::new(page.with_max_sleep(HOST_POLL)),
            }),
            flags,
        }
    }

    pub(crate) fn create(flags: NotifyFlags) -> Result<CudaNotify> {
        Ok(CudaNotify::wrap(
            SyncPage::create("hal-cuda-notify", PAGE)?,
            flags,
        ))
    }

    pub(crate) fn import(mut shared: SharedHandle) -> Result<CudaNotify> {
        shared.handle.expect(HandleKind::Notify, BackendId::Cuda)?;
        Ok(CudaNotify::wrap(
            SyncPage::import(&mut shared, PAGE, "a CUDA notify", false)?,
            NotifyFlags::default(),
        ))
    }

    /// The device address of the signal word, registering the page with
    /// the device the first time.
    /// The page stays registered (and mapped) as long as this notify
    /// lives, and is never unmapped before its registration ended.
    pub(crate) fn device_word(&self, primary: &Arc<Primary>) -> Result<CUdeviceptr> {
        let reg = match self.inner.registered.get() {
            Some(r) => r,
            None => {
                // The registration holds a share of the page until it ended.
                let (range, page) = host::page_range(&self.inner.page)?;
                let made = registration::register_kept(primary, range, page)?;
                // A concurrent first use may have won; its registration is
                // kept and this one dropped (unregistered).
                let _ = self.inner.registered.set(made);
                self.inner
                    .registered
                    .get()
                    .ok_or_else(|| Error::invalid("notify registration vanished"))?
            }
        };
        Ok(reg.addr() + SyncPage::word_offset(SIGNAL))
    }

    pub(crate) fn export(&self, info: &DeviceInfo, opts: &ExportOptions) -> Result<Exported> {
        if opts.read_only || opts.range.is_some() {
            return Err(Error::invalid(
                "read_only and range apply to memory exports, not to a notify",
            ));
        }
        opts.importers.refuse_same_user("cuda", "a CUDA IPC handle is opened by whoever holds its bytes: no broker checks the importer's user")?;
        if let Importers::Pids(_) = opts.importers {
            return Err(Error::unsupported(
                "cuda",
                "export to a pid allow-list",
                "CUDA keeps no pid allow-list; export with Importers::Anyone or BackendDefault \
                 and control who receives the handle",
            ));
        }
        let spec = HandleSpec {
            kind: HandleKind::Notify,
            backend: BackendId::Cuda,
            device: info.ordinal,
            device_uuid: info.uuid,
            location: Location::Host,
            default_allow_list: false,
        };
        Exported::new(new_handle(&spec, opts)?, vec![self.inner.page.dup_fd()?])
    }
}

impl Notify for CudaNotify {
    fn signal(&self) -> Result<()> {
        self.flags.refuse_host("signal")?;
        self.inner.page.signal(SIGNAL)
    }

    fn wait(&self, opts: WaitOptions) -> Result<()> {
        self.flags.refuse_host("wait")?;
        self.inner
            .page
            .wait_signal(SIGNAL, "the notify to be signalled", opts, || Ok(()))
    }

    fn wait_async(&self, opts: WaitOptions) -> WaitFuture<'_> {
        let me = self.clone();
        blocking_future(move || me.wait(opts))
    }
}
