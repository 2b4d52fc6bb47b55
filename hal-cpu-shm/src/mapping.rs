//! Memory imported from another process (or this one): the mapping, its
//! import (one handle, or many at once) and the per-process import cache.

use std::cell::RefCell;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use hal_core::exchange::sealed::{take_sealed, take_sealed_batch, Sealed};
use hal_core::exchange::Lease;
use hal_core::kit::export::Expect;
use hal_core::kit::os::Prot;
use hal_core::{
    BackendId, Error, Handle, HandleError, HandleFlags, HandleKind, ImportOptions, ImportPlacement,
    Location, Mapping, Memory, Result, SharedHandle,
};
use rustc_hash::FxHashMap;

use crate::io;
use crate::memory::{lock, read_only_error};
use crate::named::region::open_for_import;
use crate::view::View;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    creator_pid: u32,
    object_id: [u8; 16],
    offset: u64,
    size: u64,
    read_only: bool,
    fixed: bool,
}

type Cache = Mutex<FxHashMap<CacheKey, Weak<MapInner>>>;

/// The process's import cache: every live cacheable mapping by its key.
fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(FxHashMap::default()))
}

/// How many entries a thread's view of the cache holds before the dead
/// ones are dropped.
const NEAR_MAX: usize = 1024;

thread_local! {
    /// This thread's view of the cache: a hit takes no lock that other
    /// threads take. Entries of mappings that went are dropped lazily
    /// (their `Weak` no longer upgrades).
    static NEAR: RefCell<FxHashMap<CacheKey, Weak<MapInner>>> =
        RefCell::new(FxHashMap::default());
}

#[derive(Debug)]
enum Source {
    /// A sealed memfd: its size cannot change, direct copies are safe.
    Sealed,
    /// A named region: copies go through its descriptor.
    Named { fd: OwnedFd, file_offset: u64 },
}

#[derive(Debug)]
struct MapInner {
    view: View,
    handle: Handle,
    read_only: bool,
    source: Source,
    key: CacheKey,
    _lease: Option<Lease>,
}

impl Drop for MapInner {
    fn drop(&mut self) {
        let mut c = lock(cache());
        if let Some(w) = c.get(&self.key) {
            if std::ptr::eq(w.as_ptr(), self) {
                c.remove(&self.key);
            }
        }
    }
}

/// Memory imported from another process (or from this one), by handle.
///
/// Cloning is cheap and shares the mapping; importing the same handle again in
/// this process returns a clone of the existing mapping (the import cache).
/// The mapping and the importer's lease go when the last clone is dropped.
#[derive(Debug, Clone)]
#[must_use = "the import is unmapped and its lease released when this value drops"]
pub struct CpuMapping {
    inner: Arc<MapInner>,
}

impl CpuMapping {
    /// How many clones of this mapping exist in this process (imports of the
    /// same handle included).
    pub fn ref_count(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// True when this value and `other` share one mapping.
    pub fn same_mapping(&self, other: &CpuMapping) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn describe(&self) -> String {
        match &self.inner.source {
            Source::Sealed => "imported region".into(),
            Source::Named { .. } => format!(
                "imported named region {:?}",
                String::from_utf8_lossy(&self.inner.handle.payload)
            ),
        }
    }

    /// Import a memory handle.
    pub(crate) fn import(shared: SharedHandle, opts: &ImportOptions) -> Result<CpuMapping> {
        match prepare(shared, opts)? {
            Step::Done(m) => Ok(m),
            Step::Fetch(mut p) => {
                let expect = p.expect();
                let sealed = take_sealed::<1>(&mut p.shared, &expect);
                p.finish(sealed)
            }
        }
    }

    /// Import many memory handles: the descriptors of those that name one
    /// exporter's broker come in one round trip
    /// ([`take_sealed_batch`]); one result per handle, in order, as
    /// [`CpuMapping::import`] gives it.
    pub(crate) fn import_batch(
        shared: Vec<SharedHandle>,
        opts: &ImportOptions,
    ) -> Vec<Result<CpuMapping>> {
        let mut out: Vec<Option<Result<CpuMapping>>> = Vec::with_capacity(shared.len());
        let mut pending: Vec<(usize, Pending)> = Vec::new();
        for (i, s) in shared.into_iter().enumerate() {
            match prepare(s, opts) {
                Ok(Step::Fetch(p)) => {
                    pending.push((i, *p));
                    out.push(None);
                }
                Ok(Step::Done(m)) => out.push(Some(Ok(m))),
                Err(e) => out.push(Some(Err(e))),
            }
        }
        let mut handles: Vec<SharedHandle> = pending
            .iter_mut()
            .map(|(_, p)| {
                let copy = SharedHandle::from(p.handle_copy());
                std::mem::replace(&mut p.shared, copy)
            })
            .collect();
        let sealed = take_sealed_batch::<1>(&mut handles, |k| pending[k].1.expect());
        for (((i, mut p), s), h) in pending.into_iter().zip(sealed).zip(handles) {
            p.shared = h;
            out[i] = Some(p.finish(s));
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::invalid("an import of the batch was lost"))))
            .collect()
    }
}

/// Where an import stands after its checks.
enum Step {
    /// Done: a cached mapping, or a named region.
    Done(CpuMapping),
    /// Its descriptors must be taken.
    Fetch(Box<Pending>),
}

/// An import of a sealed memfd, checked, waiting for its descriptor.
struct Pending {
    shared: SharedHandle,
    key: CacheKey,
    cacheable: bool,
    read_only: bool,
    at: Option<u64>,
    end: u64,
}

/// Check a handle and find it in the cache; import a named region at once.
fn prepare(shared: SharedHandle, opts: &ImportOptions) -> Result<Step> {
    let h = &shared.handle;
    h.expect(HandleKind::Memory, BackendId::CpuShm)?;
    if h.location != Location::Host {
        return Err(malformed("location", "CPU shared memory is host memory"));
    }
    if let Some(d) = opts.device {
        if d != 0 {
            return Err(Error::NotFound {
                what: format!("device {d} of backend cpu-shm (it has only device 0, the host)"),
            });
        }
    }
    let page = View::page();
    if h.size == 0 || h.size % page != 0 || h.offset % page != 0 {
        return Err(malformed(
            "size",
            format!(
                "range {:#x}+{:#x} is not whole {page}-byte pages",
                h.offset, h.size
            ),
        ));
    }
    let end = h
        .offset
        .checked_add(h.size)
        .ok_or(HandleError::LengthOverflow { field: "offset" })?;
    let fixed = opts.placement == ImportPlacement::ExporterAddress;
    if fixed && !h.flags.contains(HandleFlags::HAS_ADDRESS) {
        return Err(Error::invalid(
            "ImportPlacement::ExporterAddress needs a handle that carries the exporter's \
             address",
        ));
    }
    let read_only = h.flags.contains(HandleFlags::READ_ONLY);
    let key = CacheKey {
        creator_pid: h.creator_pid,
        object_id: h.object_id,
        offset: h.offset,
        size: h.size,
        read_only,
        fixed,
    };
    // Only imports whose descriptors came from a checked source (the
    // creator's own broker, or a name, whose owner `named::region::open_fd`
    // checks) are cached, and a hit must match the whole handle: a
    // forged handle that names a genuine object but carries a peer's
    // descriptors never poisons a later import of the genuine one.
    let named = h.flags.contains(HandleFlags::NAMED);
    let cacheable = named || hal_core::exchange::source_is_checked(&shared);
    if cacheable {
        if let Some(inner) = cached(&key, &shared.handle) {
            // Close the descriptors that came with the handle; nothing else.
            drop(shared);
            return Ok(Step::Done(CpuMapping { inner }));
        }
    }
    let at = fixed.then_some(h.address);
    if !named {
        return Ok(Step::Fetch(Box::new(Pending {
            shared,
            key,
            cacheable,
            read_only,
            at,
            end,
        })));
    }
    let prot = if read_only {
        Prot::Read
    } else {
        Prot::ReadWrite
    };
    let name = std::str::from_utf8(&h.payload)
        .map_err(|_| malformed("payload", "the region name is not UTF-8"))?
        .to_owned();
    let (fd, size) = open_for_import(&name, read_only, h.creator_pid, h.creator_start)?;
    if size < end {
        return Err(Error::invalid(format!(
            "named region {name:?} holds {size} bytes, fewer than the {end} the handle \
             names"
        )));
    }
    let view = View::map(fd.as_fd(), h.size, h.offset, prot, 0, page, at)
        .map_err(|e| fixed_error(e, h))?;
    let source = Source::Named {
        fd,
        file_offset: h.offset,
    };
    Ok(Step::Done(publish(
        view,
        shared.handle,
        read_only,
        source,
        key,
        None,
        cacheable,
    )))
}

/// The live mapping of `key` in this process, when it maps `handle`: from
/// this thread's view of the cache, else from the process's (and then
/// remembered in this thread's).
fn cached(key: &CacheKey, handle: &Handle) -> Option<Arc<MapInner>> {
    let near = NEAR
        .try_with(|n| n.borrow().get(key).and_then(Weak::upgrade))
        .ok()
        .flatten();
    if let Some(inner) = near.filter(|inner| inner.handle == *handle) {
        return Some(inner);
    }
    let found = lock(cache())
        .get(key)
        .and_then(Weak::upgrade)
        .filter(|inner| inner.handle == *handle)?;
    let _ = NEAR.try_with(|n| {
        let mut n = n.borrow_mut();
        if n.len() >= NEAR_MAX {
            n.retain(|_, w| w.strong_count() > 0);
        }
        n.insert(key.clone(), Arc::downgrade(&found));
    });
    Some(found)
}

/// A new mapping, entered in the cache when `cacheable`.
fn publish(
    view: View,
    handle: Handle,
    read_only: bool,
    source: Source,
    key: CacheKey,
    lease: Option<Lease>,
    cacheable: bool,
) -> CpuMapping {
    let inner = Arc::new(MapInner {
        view,
        handle,
        read_only,
        source,
        key: key.clone(),
        _lease: lease,
    });
    if cacheable {
        lock(cache()).insert(key, Arc::downgrade(&inner));
    }
    CpuMapping { inner }
}

impl Pending {
    fn expect(&self) -> Expect<'static> {
        // Seals and size first: nothing is mapped from a descriptor a
        // peer could still truncate.
        Expect {
            what: "a CPU memory handle (the data memfd)",
            min_size: self.end,
            read_only: self.read_only,
            leased: true,
        }
    }

    fn handle_copy(&self) -> Handle {
        self.shared.handle.clone()
    }

    /// Map the descriptor taken for this import.
    fn finish(self, sealed: Result<Sealed<1>>) -> Result<CpuMapping> {
        let taken = sealed?;
        let cacheable = self.cacheable && taken.checked;
        if cacheable {
            // The same handle twice in a batch: the first one's mapping.
            if let Some(inner) = cached(&self.key, &self.shared.handle) {
                return Ok(CpuMapping { inner });
            }
        }
        let h = &self.shared.handle;
        let prot = if self.read_only {
            Prot::Read
        } else {
            Prot::ReadWrite
        };
        let [data] = taken.fds;
        let view = View::map(
            data.as_fd(),
            h.size,
            h.offset,
            prot,
            0,
            View::page(),
            self.at,
        )
        .map_err(|e| fixed_error(e, h))?;
        Ok(publish(
            view,
            self.shared.handle,
            self.read_only,
            Source::Sealed,
            self.key,
            taken.lease,
            cacheable,
        ))
    }
}

fn malformed(field: &'static str, detail: impl Into<String>) -> Error {
    HandleError::Malformed {
        field,
        detail: detail.into(),
    }
    .into()
}

fn fixed_error(e: Error, h: &Handle) -> Error {
    match e {
        Error::AlreadyExists { .. } => Error::AlreadyExists {
            what: format!(
                "the exporter's address range {:#x}+{:#x} is already mapped in this process, so \
                 the region cannot be placed there; import with ImportPlacement::Anywhere, or \
                 import before that range gets used",
                h.address, h.size
            ),
        },
        e => e,
    }
}

impl Memory for CpuMapping {
    fn addr(&self) -> u64 {
        self.inner.view.addr()
    }

    fn len(&self) -> u64 {
        self.inner.view.len()
    }

    fn location(&self) -> Location {
        Location::Host
    }

    fn host_ptr(&self) -> Option<*mut u8> {
        Some(self.inner.view.ptr())
    }

    fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.inner.view.check_origin()?;
        hal_core::device::check_bounds(offset, dst.len() as u64, self.len())?;
        match &self.inner.source {
            Source::Sealed => self.inner.view.read(offset, dst),
            Source::Named { fd, file_offset } => {
                io::read_at(fd.as_fd(), file_offset + offset, dst, &self.describe())
            }
        }
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.inner.view.check_origin()?;
        hal_core::device::check_bounds(offset, src.len() as u64, self.len())?;
        if self.inner.read_only {
            return Err(read_only_error(&self.describe()));
        }
        match &self.inner.source {
            Source::Sealed => self.inner.view.write(offset, src),
            Source::Named { fd, file_offset } => {
                io::write_at(fd.as_fd(), file_offset + offset, src, &self.describe())
            }
        }
    }
}

impl Mapping for CpuMapping {
    fn handle(&self) -> &Handle {
        &self.inner.handle
    }
}
