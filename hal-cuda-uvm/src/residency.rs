//! Residency on demand: device copies of a shared managed buffer's chunks,
//! made by one process and used by all, with a residency table in a
//! shared header.
//!
//! **Experimental: compiled only with the feature `experimental-residency`
//! (off by default).** The protocol is complete and its tests run in CI with
//! the feature on (over the simulator and the stand-in driver), but nothing
//! of the backend reaches it: `Device::prefetch_async` and advice on a
//! shared managed buffer leave its chunks in their home pages, and the
//! facade's objects, the C library and the Python package offer no
//! residency. It has not run on a GPU either. It joins the default build
//! when a call of the backend uses it (a prefetch to the device of a buffer
//! that has a residency table) and its tests have passed on a GPU; until
//! then a program that wants device copies opts in knowingly.
//!
//! **The consistency rule.** Between a chunk's [`Residency::prefetch`] and
//! its [`Residency::writeback`], the device copy is the chunk's current
//! copy: it is read and written on the device (by kernels at
//! [`Residency::device_addr`], or [`Residency::write_device`]), and its
//! home pages are not written. After the writeback the home pages are
//! current again. What can be enforced is: a host write through
//! [`Residency::write`] to a device-resident chunk is refused, and
//! [`Residency::read`] reads whichever copy is current. What cannot be
//! prevented (a process writing the home pages through their address) is
//! detected: the writeback compares the home pages with what they held at
//! the prefetch, reports every chunk whose home pages changed, and the
//! device copy wins, as the rule says.
//!
//! Device chunks are VMM physical allocations of the GPU, exported by
//! descriptor: the process that prefetched a chunk serves it, and every
//! other process maps the same chunk in its own reservation of the
//! buffer's size (never more). The header's generation of each chunk tells
//! a process whether its mapping is the current one. Copies here are
//! synchronous, so a hand-over is complete when `prefetch` or `writeback`
//! returns; GPU work of several processes on a device copy is ordered with
//! exported events, as any shared GPU memory is.
//!
//! **A server that dies.** The process that made a device copy serves it
//! until it writes it back (its drop does). If it dies first, the slot
//! names a process that is gone (told by pid and start time, so a reused
//! pid is no alibi). A process that maps that device copy writes it home at
//! its next call on the chunk, as the server would have, and nothing is
//! lost; so does one that lets go of its `Residency` while it maps it. A
//! process that does not map it cannot reach it: its calls on the chunk
//! answer [`Error::Closed`] until some process writes it home or
//! [`Residency::reclaim`] gives up the device copy, making the home pages
//! (the bytes from before the prefetch) current again.
//!
//! **A header that other processes write.** Every attached process can
//! write the header, so none trusts it further than it can check. Each call
//! waits for the header's lock at most [`Residency::set_lock_patience`]
//! (10 s unless set), then answers [`Error::Timeout`] naming the holder;
//! the drop waits that long at most in all. A process that made a chunk's
//! device copy knows it serves it, whatever the header says: where the
//! slot no longer names that copy, its next call on the chunk writes the
//! copy home, unless the slot shows that another process brought it home
//! (at home one generation on, with the CRC of this copy, which every
//! writeback records); a slot at a later generation, which may follow such
//! a hand-over and newer writes, is not written over, and the loss is
//! reported ([`Error::Closed`]). An unreadable slot is a dead server's:
//! calls on it answer [`Error::Closed`] until [`Residency::reclaim`] gives
//! the device copy up.

use hal_core::DeviceExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hal_core::{
    Access, AllocDesc, Capabilities, Device, Error, ExportOptions, Exported, Granularity, Handle,
    ImportOptions, Memory, Reservation, Result, SharedHandle, Vmm, VmmExt,
};

use crate::device::UvmDevice;
use crate::gpu::GpuDevice;
use crate::header::{self, Slot};
use crate::memory::{HomePages, UvmAllocation, UvmMapping};

/// This process's mapping of a device chunk.
struct Local<D: Vmm> {
    /// Released after the unmapping.
    _physical: D::Physical,
    generation: u64,
    /// Set in the process that made the device copy: it serves the chunk.
    export: Option<Exported>,
}

/// What keeps the header mapped here.
enum HeaderHold<D: Device> {
    Created {
        _header: UvmAllocation<D>,
        _export: Exported,
    },
    Imported {
        _header: UvmMapping<D>,
    },
}

/// Device copies of a shared managed buffer, shared by every process
/// that attaches to the buffer's residency header.
///
/// **Experimental** (feature `experimental-residency`, off by default): no
/// call of the backend uses it yet and it has not run on a GPU; the crate's
/// README.md says what would make it part of the default build.
///
/// [`Residency`](crate::Residency) keeps a table in a shared header: for every
/// chunk, where its current copy lives, its generation and the process that
/// serves the device copy. **Between a prefetch and its writeback a chunk is
/// written only on the device.** Host writes through [`Residency::write`] to a
/// device-resident chunk are refused; home-page writes made behind the table's
/// back are detected at the writeback, which reports the chunk and keeps the
/// device copy. The header is shared with every attached process, and each
/// reads it as untrusted bytes: no writer of it can make another process wait
/// for ever (its lock has a deadline, set with
/// [`Residency::set_lock_patience`], past which a call answers
/// [`Error::Timeout`](hal_core::Error::Timeout) naming the holder), lose the
/// device writes of a chunk it serves (the server writes them home whatever its
/// slot says, or reports them lost), or disable a chunk for good (an unreadable
/// slot is a dead server's, which [`Residency::reclaim`] recovers). Residency
/// needs the GPU's VMM ([`Capabilities::VMM`](hal_core::Capabilities::VMM),
/// which `hal_cuda` offers where the driver reports it): without it, it answers
/// `Unsupported`.
#[must_use = "this process's device copies are written home and released when this value drops"]
pub struct Residency<'d, D: GpuDevice> {
    dev: &'d UvmDevice<D>,
    data: Arc<dyn HomePages>,
    header: Arc<dyn HomePages>,
    /// Keeps the header mapped (and, in its creator, exported).
    _hold: HeaderHold<D>,
    text: String,
    chunk: u64,
    chunks: u64,
    reservation: D::Reservation,
    local: Vec<Option<Local<D>>>,
    /// How long a call waits for the header's lock.
    patience: Duration,
    /// Set by the drop: mappings are left to the reservation's drop, and
    /// every wait for the lock ends by this time.
    dropping: Option<Instant>,
}

impl<D: GpuDevice> std::fmt::Debug for Residency<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Residency")
            .field("chunk", &self.chunk)
            .field("chunks", &self.chunks)
            .finish()
    }
}

fn need_vmm<D: GpuDevice>(dev: &UvmDevice<D>) -> Result<()> {
    if !dev.capabilities().contains(Capabilities::VMM) {
        return Err(Error::unsupported(
            "cuda-uvm",
            "residency (device copies of chunks)",
            "the GPU backend offers no VMM (Capabilities::VMM is absent): the buffer stays in \
             its home pages, which the GPU reaches in place",
        ));
    }
    Ok(())
}

impl<'d, D: GpuDevice> Residency<'d, D> {
    /// A residency table for `buffer`, in chunks of `chunk` bytes (0: the
    /// GPU's recommended granularity), every chunk at home. The buffer's
    /// length must be a multiple of the chunk. Other processes attach with
    /// [`Residency::header_text`].
    pub fn create(dev: &'d UvmDevice<D>, buffer: &UvmAllocation<D>, chunk: u64) -> Result<Self> {
        need_vmm(dev)?;
        let shared = buffer
            .shared()
            .ok_or_else(|| Error::invalid("residency is for shared managed buffers"))?;
        let chunk = if chunk == 0 {
            dev.granularity(Granularity::Recommended)?
        } else {
            chunk
        };
        let len = buffer.len();
        let min = dev.granularity(Granularity::Minimum)?;
        if chunk % min != 0 || len % chunk != 0 {
            return Err(Error::invalid(format!(
                "a buffer of {len} bytes in chunks of {chunk}: the chunk must be a multiple of \
                 the GPU's {min}-byte granularity and divide the buffer"
            )));
        }
        let chunks = len / chunk;
        let page = dev.info().page_size();
        let head = dev.allocate(&AllocDesc::host(header::len(chunks, page)))?;
        let header = head
            .shared()
            .map(|s| s.pages())
            .ok_or_else(|| Error::invalid("the header is a shared managed buffer"))?;
        header::init(header.memory(), chunk, chunks)?;
        // Attached by the backend's default importers, as the buffer is.
        let export = dev.export_memory(&head, &ExportOptions::default())?;
        let text = export.to_text();
        Residency::build(
            dev,
            shared.pages(),
            header,
            HeaderHold::Created {
                _header: head,
                _export: export,
            },
            text,
        )
    }

    /// Attach to the residency table whose header handle is `text`, for
    /// `buffer`, this process's import of the same buffer.
    pub fn attach(dev: &'d UvmDevice<D>, buffer: &UvmMapping<D>, text: &str) -> Result<Self> {
        need_vmm(dev)?;
        let shared = buffer
            .shared()
            .ok_or_else(|| Error::invalid("residency is for shared managed buffers"))?;
        let head = dev.import_memory(
            SharedHandle::from(Handle::from_text(text)?),
            &ImportOptions::default(),
        )?;
        let header = head
            .shared()
            .map(|s| s.pages())
            .ok_or_else(|| Error::invalid("the header handle names no shared managed buffer"))?;
        Residency::build(
            dev,
            shared.pages(),
            header,
            HeaderHold::Imported { _header: head },
            text.into(),
        )
    }

    fn build(
        dev: &'d UvmDevice<D>,
        data: Arc<dyn HomePages>,
        header: Arc<dyn HomePages>,
        hold: HeaderHold<D>,
        text: String,
    ) -> Result<Self> {
        let (chunk, chunks) = header::geometry(header.memory())?;
        if data.memory().len() < chunk * chunks {
            return Err(Error::invalid(
                "the buffer is smaller than its residency header says: attach with the same buffer",
            ));
        }
        let min = dev.granularity(Granularity::Minimum)?;
        // Address space for this buffer only, in proportion to its size.
        let reservation = dev.reserve(chunk * chunks, min)?;
        Ok(Residency {
            dev,
            data,
            header,
            _hold: hold,
            text,
            chunk,
            chunks,
            reservation,
            local: (0..chunks).map(|_| None).collect(),
            patience: header::PATIENCE,
            dropping: None,
        })
    }

    /// The header's handle text: what other processes attach with.
    pub fn header_text(&self) -> &str {
        &self.text
    }

    /// The chunk size.
    pub fn chunk_size(&self) -> u64 {
        self.chunk
    }

    /// How long each call waits for the header's lock while a live process
    /// holds it (10 s unless set): past it, the call answers
    /// [`Error::Timeout`] naming the holder. Dropping the `Residency` waits
    /// this long at most in all, for all its chunks.
    pub fn set_lock_patience(&mut self, patience: Duration) {
        self.patience = patience;
    }

    /// The header's lock, waited for as long as this call may.
    fn lock<'h>(&self, header: &'h Arc<dyn HomePages>) -> Result<header::Locked<'h>> {
        let patience = match self.dropping {
            Some(until) => until.saturating_duration_since(Instant::now()),
            None => self.patience,
        };
        header::lock(header.memory(), patience)
    }

    /// Where chunk `i`'s current copy lives, as the header says.
    pub fn slot(&self, i: u64) -> Result<Slot> {
        self.check_chunk(i)?;
        // Under the lock: never a slot half written by another process.
        let _lock = self.lock(&self.header)?;
        header::slot(self.header.memory(), i)
    }

    fn check_chunk(&self, i: u64) -> Result<()> {
        if i >= self.chunks {
            return Err(Error::invalid(format!(
                "chunk {i} of a buffer of {} chunks",
                self.chunks
            )));
        }
        Ok(())
    }

    /// The chunks `offset..offset + len` touches.
    fn span(&self, offset: u64, len: u64) -> Result<std::ops::Range<u64>> {
        hal_core::device::check_bounds(offset, len, self.chunk * self.chunks)?;
        if len == 0 {
            return Ok(0..0);
        }
        Ok(offset / self.chunk..(offset + len).div_ceil(self.chunk))
    }

    fn drop_local(&mut self, i: u64) -> Result<()> {
        if let Some(local) = self.local[i as usize].take() {
            if self.dropping.is_some() {
                // The reservation's own drop unmaps it, after the device's
                // queued work, never waiting long for that work.
                return Ok(());
            }
            let unmapped = self
                .dev
                .unmap(&self.reservation, i * self.chunk, self.chunk);
            drop(local);
            unmapped?;
        }
        Ok(())
    }

    /// Map chunk `i`'s current device copy here, if this process does not
    /// hold that generation yet.
    fn follow(&mut self, i: u64, s: &Slot) -> Result<()> {
        if self.maps(i, s) {
            return Ok(());
        }
        self.drop_local(i)?;
        let shared = SharedHandle::from(Handle::from_text(&s.text)?);
        let physical = self
            .dev
            .import_physical(shared, &ImportOptions::default())?;
        self.map_here(i, physical, s.generation, None)
    }

    fn map_here(
        &mut self,
        i: u64,
        physical: D::Physical,
        generation: u64,
        export: Option<Exported>,
    ) -> Result<()> {
        let at = i * self.chunk;
        self.dev.map(&self.reservation, at, &physical)?;
        if let Err(e) = self
            .dev
            .set_access(&self.reservation, at, self.chunk, Access::ReadWrite)
        {
            let _ = self.dev.unmap(&self.reservation, at, self.chunk);
            return Err(e);
        }
        self.local[i as usize] = Some(Local {
            _physical: physical,
            generation,
            export,
        });
        Ok(())
    }

    fn home_chunk(&self, i: u64) -> Result<Vec<u8>> {
        let mut bytes = vec![0u8; self.chunk as usize];
        self.data.memory().read(i * self.chunk, &mut bytes)?;
        Ok(bytes)
    }

    /// Make the device copy of every chunk `offset..offset + len` touches
    /// the current one: a chunk at home is copied into a new device chunk,
    /// exported, and published in the header; a chunk another process
    /// already made resident is mapped here.
    pub fn prefetch(&mut self, offset: u64, len: u64) -> Result<()> {
        for i in self.span(offset, len)? {
            let header = Arc::clone(&self.header);
            let _lock = self.lock(&header)?;
            let s = self.current(header.memory(), i)?;
            if s.on_device {
                self.follow(i, &s)?;
                continue;
            }
            self.drop_local(i)?;
            let home = self.home_chunk(i)?;
            let physical = self.dev.allocate_physical(self.chunk)?;
            let export = self
                .dev
                .export_physical(&physical, &ExportOptions::default())?;
            let text = export.to_text();
            let generation = s.generation + 1;
            self.map_here(i, physical, generation, Some(export))?;
            self.reservation.write(i * self.chunk, &home)?;
            header::set_slot(
                header.memory(),
                i,
                &Slot {
                    on_device: true,
                    owner: hal_core::kit::os::pid(),
                    owner_started: header::my_start(),
                    generation,
                    home_crc: crc(&home),
                    text,
                },
            )?;
        }
        Ok(())
    }

    /// Bring every chunk `offset..offset + len` touches home: the device
    /// copy is copied into the home pages, the header says home, and the
    /// device chunk is unmapped here (other processes drop theirs at their
    /// next call). Returns the chunks whose home pages were written while
    /// they were device-resident (the rule broken): their home writes are
    /// lost, the device copy wins.
    ///
    /// Any process may write a chunk back, also one whose server died (see
    /// the module docs); a chunk whose server died and that this process
    /// does not map answers [`Error::Closed`].
    pub fn writeback(&mut self, offset: u64, len: u64) -> Result<Vec<u64>> {
        let mut broken = Vec::new();
        for i in self.span(offset, len)? {
            let header = Arc::clone(&self.header);
            let _lock = self.lock(&header)?;
            let s = header::slot(header.memory(), i)?;
            if self.serves(i) && !self.names_ours(i, &s) {
                self.reconcile(header.memory(), i, &s)?;
                continue;
            }
            if !s.on_device {
                self.drop_local(i)?;
                continue;
            }
            if s.server_gone() && !self.maps(i, &s) {
                return Err(lost(i, &s));
            }
            self.follow(i, &s)?;
            if self.bring_home(header.memory(), i, &s)? {
                broken.push(i);
            }
        }
        Ok(broken)
    }

    /// Give up the device copies of the chunks `offset..offset + len`
    /// touches whose server died and that no process wrote home: their home
    /// pages, which hold the bytes from before the prefetch, become current
    /// again, and the device writes since are lost. Returns those chunks. A
    /// chunk this process maps is written home instead (nothing lost, not
    /// returned); a chunk at home is left as it is; a chunk whose server is
    /// alive is refused ([`Error::InvalidArgument`]): its server writes it
    /// back.
    ///
    /// A surviving process that still maps such a chunk writes it home at
    /// its next call on it, or when it lets go of its [`Residency`]; reclaim
    /// a chunk only once no survivor will, since its device writes are lost
    /// then.
    ///
    /// First, a header lock held in the name of a process that is not seen
    /// to map the header (gone, or whose maps this process may not read) is
    /// broken (`header::break_unproven`): every other call believes such
    /// a holder up to the lock's patience.
    pub fn reclaim(&mut self, offset: u64, len: u64) -> Result<Vec<u64>> {
        // The operator's recovery: a lock held in the name of a process not
        // seen to map the header (a forged word naming pid 1, say) is
        // broken first.
        header::break_unproven(self.header.memory())?;
        let mut given_up = Vec::new();
        for i in self.span(offset, len)? {
            let header = Arc::clone(&self.header);
            let _lock = self.lock(&header)?;
            let s = header::slot(header.memory(), i)?;
            if self.serves(i) && !self.names_ours(i, &s) {
                self.reconcile(header.memory(), i, &s)?;
                continue;
            }
            if !s.on_device {
                continue;
            }
            if !s.server_gone() {
                return Err(Error::invalid(format!(
                    "chunk {i} is served by process {}, which is alive: writeback brings it home \
                     with its device writes; reclaim is for chunks whose server is gone",
                    s.owner
                )));
            }
            if self.maps(i, &s) {
                self.bring_home(header.memory(), i, &s)?;
                continue;
            }
            log::warn!(
                "chunk {i}'s device copy died with process {}; its home pages, from before the \
                 prefetch, are current again",
                s.owner
            );
            header::set_slot(header.memory(), i, &Slot::home(s.generation + 1))?;
            self.drop_local(i)?;
            given_up.push(i);
        }
        Ok(given_up)
    }

    /// True when this process maps the device copy `s` names.
    fn maps(&self, i: u64, s: &Slot) -> bool {
        matches!(&self.local[i as usize], Some(l) if l.generation == s.generation)
    }

    /// True when this process made chunk `i`'s device copy and has not
    /// written it back itself: it serves the chunk, whatever the header
    /// says now.
    fn serves(&self, i: u64) -> bool {
        matches!(&self.local[i as usize], Some(l) if l.export.is_some())
    }

    /// True when slot `s` names the device copy this process serves.
    fn names_ours(&self, i: u64, s: &Slot) -> bool {
        match &self.local[i as usize] {
            Some(Local {
                generation,
                export: Some(export),
                ..
            }) => {
                s.on_device
                    && s.owner == hal_core::kit::os::pid()
                    && s.generation == *generation
                    && s.text == export.to_text()
            }
            _ => false,
        }
    }

    /// Chunk `i`, which this process serves, where slot `s` no longer names
    /// its device copy, the lock held. A copy that another attachment wrote
    /// home (the slot at home one generation on, with the CRC of this
    /// copy) is let go. A slot that no hand-over can have written (a
    /// generation no later than the next one, which only this process's own
    /// writeback or a hand-over of its copy makes) was written by a process
    /// that does not keep the protocol: the device copy is written home, as
    /// the server's writeback would have. A later generation may follow a
    /// true hand-over and new writes, which the device copy must not
    /// overwrite: its device writes since are reported lost. Returns the
    /// slot as it stands after.
    fn reconcile(&mut self, header: &dyn Memory, i: u64, s: &Slot) -> Result<Slot> {
        let ours = match &self.local[i as usize] {
            Some(l) => l.generation,
            None => return Ok(s.clone()),
        };
        let mut bytes = vec![0u8; self.chunk as usize];
        self.reservation.read(i * self.chunk, &mut bytes)?;
        let c = crc(&bytes);
        if !s.on_device && s.generation == ours + 1 && s.home_crc == c {
            self.drop_local(i)?;
            return Ok(s.clone());
        }
        if s.generation <= ours + 1 {
            log::warn!(
                "chunk {i}'s slot in the residency header was overwritten while this process                  serves its device copy (generation {ours}); the device copy is written home"
            );
            self.data.memory().write(i * self.chunk, &bytes)?;
            let home = Slot {
                home_crc: c,
                ..Slot::home(s.generation.max(ours) + 1)
            };
            header::set_slot(header, i, &home)?;
            self.drop_local(i)?;
            return Ok(home);
        }
        self.drop_local(i)?;
        Err(Error::Closed {
            what: format!(
                "chunk {i}'s device copy made by this process (generation {ours}) did not come                  home: the residency header names generation {} now, which may follow a                  hand-over and newer writes, so the device copy is not written over the home                  pages; its device writes since its last writeback are lost. A process attached                  to the header wrote its slot; the chunk is usable again",
                s.generation
            ),
        })
    }

    /// Slot `i` as it stands, with the lock held: a device copy whose
    /// server died is written home here if this process maps it; one this
    /// process cannot reach answers [`Error::Closed`].
    fn current(&mut self, header: &dyn Memory, i: u64) -> Result<Slot> {
        let s = header::slot(header, i)?;
        if self.serves(i) && !self.names_ours(i, &s) {
            return self.reconcile(header, i, &s);
        }
        if !s.server_gone() {
            return Ok(s);
        }
        if !self.maps(i, &s) {
            return Err(lost(i, &s));
        }
        log::warn!(
            "process {} died serving chunk {i} before writing it back; written home here",
            s.owner
        );
        self.bring_home(header, i, &s)?;
        header::slot(header, i)
    }

    /// Copy the device copy of chunk `i` (slot `s`, mapped here) into its
    /// home pages and say so in the header, the lock held. True when the
    /// home pages had been written since the prefetch (the rule broken).
    fn bring_home(&mut self, header: &dyn Memory, i: u64, s: &Slot) -> Result<bool> {
        let mut bytes = vec![0u8; self.chunk as usize];
        self.reservation.read(i * self.chunk, &mut bytes)?;
        let broken = crc(&self.home_chunk(i)?) != s.home_crc;
        if broken {
            log::warn!(
                "chunk {i}'s home pages were written while it was device-resident; the device \
                 copy wins"
            );
        }
        self.data.memory().write(i * self.chunk, &bytes)?;
        // The CRC of what came home tells the server, if it was not this
        // process, that its copy came home.
        let home = Slot {
            home_crc: crc(&bytes),
            ..Slot::home(s.generation + 1)
        };
        header::set_slot(header, i, &home)?;
        self.drop_local(i)?;
        Ok(broken)
    }

    /// Copy out of the current copy of each chunk: the device copy where
    /// the header says so, the home pages elsewhere.
    pub fn read(&mut self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.each(offset, dst.len() as u64, |me, i, at, range, on_device| {
            let out = &mut dst[range];
            if on_device {
                me.reservation.read(at, out)
            } else {
                me.data.memory().read(at, out)
            }
            .map(|()| i)
        })
    }

    /// Write the home pages of chunks at home. A chunk that is
    /// device-resident is refused ([`Error::PermissionDenied`]), nothing
    /// written: write it on the device, or write it back first.
    pub fn write(&mut self, offset: u64, src: &[u8]) -> Result<()> {
        let header = Arc::clone(&self.header);
        let _lock = self.lock(&header)?;
        for i in self.span(offset, src.len() as u64)? {
            let s = self.current(header.memory(), i)?;
            if s.on_device {
                return Err(Error::PermissionDenied {
                    pid: Some(s.owner),
                    reason: format!(
                        "chunk {i} is device-resident (generation {}): between a prefetch and \
                         its writeback a chunk is written only on the device; use write_device, \
                         or writeback first",
                        s.generation
                    ),
                });
            }
        }
        self.data.memory().write(offset, src)
    }

    /// Write the device copy of chunks that are device-resident; a chunk at
    /// home is refused ([`Error::InvalidArgument`]): prefetch it first.
    pub fn write_device(&mut self, offset: u64, src: &[u8]) -> Result<()> {
        self.each(offset, src.len() as u64, |me, i, at, range, on_device| {
            if !on_device {
                return Err(Error::invalid(format!(
                    "chunk {i} is at home: prefetch it before writing its device copy"
                )));
            }
            me.reservation.write(at, &src[range]).map(|()| i)
        })
    }

    /// The device address of `offset`, where its chunk's device copy is
    /// mapped here (for kernels); `None` at home (the home pages' device
    /// address serves then).
    pub fn device_addr(&mut self, offset: u64) -> Result<Option<u64>> {
        let i = offset / self.chunk;
        self.check_chunk(i)?;
        let header = Arc::clone(&self.header);
        let _lock = self.lock(&header)?;
        let s = self.current(header.memory(), i)?;
        if !s.on_device {
            return Ok(None);
        }
        self.follow(i, &s)?;
        Ok(Some(self.reservation.base() + offset))
    }

    /// Run `f` over the pieces of `offset..offset + len`, chunk by chunk,
    /// with the chunk's current copy mapped here where it is on the device.
    fn each(
        &mut self,
        offset: u64,
        len: u64,
        mut f: impl FnMut(&mut Self, u64, u64, std::ops::Range<usize>, bool) -> Result<u64>,
    ) -> Result<()> {
        let header = Arc::clone(&self.header);
        for i in self.span(offset, len)? {
            let _lock = self.lock(&header)?;
            let s = self.current(header.memory(), i)?;
            if s.on_device {
                self.follow(i, &s)?;
            }
            let start = offset.max(i * self.chunk);
            let end = (offset + len).min((i + 1) * self.chunk);
            let range = (start - offset) as usize..(end - offset) as usize;
            f(self, i, start, range, s.on_device)?;
        }
        Ok(())
    }
}

impl<D: GpuDevice> Drop for Residency<'_, D> {
    /// Chunks this process serves are written back first (nobody could
    /// import them after it), and so are the chunks it maps whose server
    /// died (this may be the last mapping of them); then every local
    /// mapping goes with the reservation, whose drop unmaps after the
    /// device's queued work without waiting long for it.
    ///
    /// The drop is bounded: all its waits for the header's lock end within
    /// the lock's patience ([`Residency::set_lock_patience`]). A chunk it
    /// serves that it could not write back (the lock held by a live process
    /// all that time) stays exported, so that other processes can still
    /// bring it home, until this process exits; after that, the header's
    /// dead-server rules apply to it. Each such chunk is logged.
    fn drop(&mut self) {
        self.dropping = Some(Instant::now() + self.patience);
        for i in 0..self.chunks {
            let serves = self.serves(i);
            let orphan = !serves
                && self.local[i as usize].is_some()
                && header::slot(self.header.memory(), i)
                    .is_ok_and(|s| s.server_gone() && self.maps(i, &s));
            if serves || orphan {
                if let Err(e) = self.writeback(i * self.chunk, self.chunk) {
                    log::warn!("writing chunk {i} back when this process let go: {e}");
                    if self.serves(i) {
                        log::warn!(
                            "chunk {i}'s device copy stays exported until this process exits, \
                             for another process to write it home"
                        );
                        std::mem::forget(self.local[i as usize].take());
                    }
                }
            }
            let _ = self.drop_local(i);
        }
    }
}

/// What a call on chunk `i` answers when its device copy (slot `s`) died
/// with its server and this process does not map it.
fn lost(i: u64, s: &Slot) -> Error {
    if s.is_unreadable() {
        return Error::Closed {
            what: format!(
                "chunk {i}'s slot in the residency header is unreadable (bytes no process of                  this library writes; generation {}), and this process does not map its device                  copy. Residency::reclaim gives the device copy up and makes the home pages                  current; a process that serves the chunk writes it home at its next call on it",
                s.generation
            ),
        };
    }
    Error::Closed {
        what: format!(
            "chunk {i}'s device copy (generation {}): process {}, which served it, is gone \
             without writing it back, and this process does not map it. A process that maps \
             it writes it home at its next call on the chunk; Residency::reclaim gives the \
             device copy up and makes the home pages (the bytes from before the prefetch) \
             current",
            s.generation, s.owner
        ),
    }
}

fn crc(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(bytes);
    h.finalize()
}
