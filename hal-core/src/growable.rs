//! A shared buffer that grows after it was exported; importers follow.
//!
//! Built only on the [`Device`] VMM operations, so it works on every backend
//! with [`Capabilities::VMM`](crate::Capabilities::VMM): the exporter reserves
//! address space for the largest size up front, then creates, maps and exports
//! physical chunks as the data grows. A small header allocation, exported once,
//! publishes the chunk handles and their count; an importer maps the chunks it
//! has not seen yet whenever it calls [`GrowableView::refresh`].
//!
//! The handle of a growable buffer is the handle of its header allocation
//! with [`HandleKind::Growable`]. Header layout (little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `HALGROW1` |
//! | 8 | 8 | published chunk count (written last) |
//! | 16 | 8 | chunk size |
//! | 24 | 8 | capacity (bytes reserved) |
//! | 64 + 512·i | 2 | length of chunk i's handle text |
//! | 66 + 512·i | ≤ 510 | chunk i's handle text |

use crate::device::DeviceExt;
use std::sync::atomic::{fence, Ordering};

use crate::device::{Allocation, Device, Memory};
use crate::error::{Error, HandleError, Result};
use crate::handle::{Handle, HandleKind, SharedHandle};
use crate::types::{
    Access, AllocDesc, Capabilities, ExportOptions, Granularity, ImportOptions, Location,
};
use crate::vmm::{Reservation, Vmm, VmmExt};
use crate::Exported;

const MAGIC: &[u8; 8] = b"HALGROW1";
const HEADER: u64 = 64;
const SLOT: u64 = 512;

fn header_len(max_chunks: u64, page: u64) -> u64 {
    (HEADER + SLOT * max_chunks).div_ceil(page) * page
}

fn header_location<D: Device>(device: &D) -> Location {
    if device.capabilities().contains(Capabilities::MEMORY_IS_HOST) {
        Location::Host
    } else {
        Location::Device(device.info().ordinal)
    }
}

fn read_u64(mem: &impl Memory, offset: u64) -> Result<u64> {
    let mut b = [0u8; 8];
    mem.read(offset, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// The exporter's side of a growable buffer.
#[must_use = "the buffer and its exports end when this value drops"]
pub struct GrowableBuffer<'d, D: Vmm> {
    device: &'d D,
    reservation: D::Reservation,
    chunks: Vec<(D::Physical, Exported)>,
    header: D::Allocation,
    header_export: Exported,
    handle: Handle,
    chunk_size: u64,
    opts: ExportOptions,
}

impl<D: Vmm> std::fmt::Debug for GrowableBuffer<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrowableBuffer")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .field("chunk_size", &self.chunk_size)
            .finish()
    }
}

impl<'d, D: Vmm> GrowableBuffer<'d, D> {
    /// Reserve `capacity` bytes, grown in chunks of `chunk_size` (0 = the
    /// device's recommended granularity), exported to the importers `opts`
    /// names. The buffer starts empty.
    pub fn create(
        device: &'d D,
        capacity: u64,
        chunk_size: u64,
        opts: ExportOptions,
    ) -> Result<Self> {
        let min = device.granularity(Granularity::Minimum)?;
        let chunk_size = if chunk_size == 0 {
            device.granularity(Granularity::Recommended)?
        } else {
            chunk_size
        };
        if min == 0 || chunk_size % min != 0 || capacity == 0 || capacity % chunk_size != 0 {
            return Err(Error::invalid(format!(
                "capacity {capacity} and chunk size {chunk_size} must be non-zero multiples \
                 of the chunk size and of the {min}-byte granularity"
            )));
        }
        let max_chunks = capacity / chunk_size;
        if max_chunks > 65_536 {
            return Err(Error::invalid(
                "a growable buffer holds at most 65536 chunks: use larger chunks",
            ));
        }
        let reservation = device.reserve(capacity, min)?;
        let page = device.info().page_size();
        let mut desc = AllocDesc::host(header_len(max_chunks, page));
        desc.location = header_location(device);
        // Whole pages, page-aligned: some allocators (aclrtMalloc) hand out
        // sub-allocations that could not be exported otherwise.
        desc.align = page;
        let header = device.allocate(&desc)?;
        let mut fields = [0u8; 32];
        fields[..8].copy_from_slice(MAGIC);
        fields[16..24].copy_from_slice(&chunk_size.to_le_bytes());
        fields[24..32].copy_from_slice(&capacity.to_le_bytes());
        header.write(0, &fields)?;
        let header_export = device.export_memory(
            &header,
            &ExportOptions {
                range: None,
                importers: opts.importers.clone(),
                read_only: false,
            },
        )?;
        let mut handle = header_export.handle().clone();
        handle.kind = HandleKind::Growable;
        Ok(GrowableBuffer {
            device,
            reservation,
            chunks: Vec::new(),
            header,
            header_export,
            handle,
            chunk_size,
            opts,
        })
    }

    /// The handle importers open with [`GrowableView::open`] (its text form
    /// is enough: the descriptors come from this process's broker).
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The handle with duplicated descriptors, for an import in this process
    /// or a child that inherits them.
    pub fn share(&self) -> Result<SharedHandle> {
        let mut shared = self.header_export.share()?;
        shared.handle.kind = HandleKind::Growable;
        Ok(shared)
    }

    /// Bytes usable now.
    pub fn len(&self) -> u64 {
        self.chunks.len() as u64 * self.chunk_size
    }

    /// True when no chunk is mapped yet.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Bytes reserved.
    pub fn capacity(&self) -> u64 {
        self.reservation.len()
    }

    /// The chunk size.
    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    /// Grow to at least `len` bytes: map and export new chunks, then publish
    /// them to importers.
    pub fn grow_to(&mut self, len: u64) -> Result<()> {
        if len > self.capacity() {
            return Err(Error::OutOfMemory {
                requested: len,
                detail: format!(
                    "the growable buffer reserved {} bytes; create it with a larger capacity",
                    self.capacity()
                ),
            });
        }
        while self.len() < len {
            let i = self.chunks.len() as u64;
            let phys = self.device.allocate_physical(self.chunk_size)?;
            self.device
                .map(&self.reservation, i * self.chunk_size, &phys)?;
            self.device.set_access(
                &self.reservation,
                i * self.chunk_size,
                self.chunk_size,
                Access::ReadWrite,
            )?;
            let exported = self.device.export_physical(&phys, &self.opts)?;
            let text = exported.handle().to_text();
            if text.len() > (SLOT - 2) as usize {
                return Err(Error::invalid(
                    "chunk handle text does not fit its header slot",
                ));
            }
            let mut slot = Vec::with_capacity(text.len() + 2);
            slot.extend_from_slice(&(text.len() as u16).to_le_bytes());
            slot.extend_from_slice(text.as_bytes());
            self.header.write(HEADER + SLOT * i, &slot)?;
            self.chunks.push((phys, exported));
            fence(Ordering::SeqCst);
            self.header
                .write(8, &(self.chunks.len() as u64).to_le_bytes())?;
        }
        Ok(())
    }

    /// Copy out of the buffer.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        crate::device::check_bounds(offset, dst.len() as u64, self.len())?;
        self.reservation.read(offset, dst)
    }

    /// Copy into the buffer.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        crate::device::check_bounds(offset, src.len() as u64, self.len())?;
        self.reservation.write(offset, src)
    }

    /// How many importers hold the header.
    pub fn importers(&self) -> Result<usize> {
        self.header.importers()
    }
}

/// An importer's view of a growable buffer.
#[must_use = "the view is unmapped when this value drops"]
pub struct GrowableView<'d, D: Vmm> {
    device: &'d D,
    header: D::Mapping,
    reservation: D::Reservation,
    chunks: Vec<D::Physical>,
    chunk_size: u64,
}

impl<D: Vmm> std::fmt::Debug for GrowableView<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrowableView")
            .field("len", &self.len())
            .field("chunk_size", &self.chunk_size)
            .finish()
    }
}

impl<'d, D: Vmm> GrowableView<'d, D> {
    /// Open a growable buffer from its handle and map the chunks published so far.
    pub fn open(device: &'d D, shared: SharedHandle, opts: &ImportOptions) -> Result<Self> {
        let SharedHandle { mut handle, fds } = shared;
        if handle.kind != HandleKind::Growable {
            return Err(HandleError::WrongKind {
                expected: HandleKind::Growable.name(),
                found: handle.kind.name(),
            }
            .into());
        }
        handle.kind = HandleKind::Memory;
        let header = device.import_memory(SharedHandle { handle, fds }, opts)?;
        let mut magic = [0u8; 8];
        header.read(0, &mut magic)?;
        if &magic != MAGIC {
            return Err(HandleError::Malformed {
                field: "growable header",
                detail: "the memory does not hold a growable buffer header".into(),
            }
            .into());
        }
        let chunk_size = read_u64(&header, 16)?;
        let capacity = read_u64(&header, 24)?;
        let min = device.granularity(Granularity::Minimum)?;
        if chunk_size == 0
            || min == 0
            || chunk_size % min != 0
            || capacity % chunk_size != 0
            || header_len(capacity / chunk_size, 1) > header.len()
        {
            return Err(HandleError::Malformed {
                field: "growable header",
                detail: format!("chunk size {chunk_size} / capacity {capacity} are inconsistent"),
            }
            .into());
        }
        let reservation = device.reserve(capacity, min)?;
        let mut view = GrowableView {
            device,
            header,
            reservation,
            chunks: Vec::new(),
            chunk_size,
        };
        view.refresh()?;
        Ok(view)
    }

    /// Map every chunk published since the last call; returns the new length.
    pub fn refresh(&mut self) -> Result<u64> {
        let published = read_u64(&self.header, 8)?;
        let max = self.reservation.len() / self.chunk_size;
        if published > max {
            return Err(HandleError::Malformed {
                field: "growable header",
                detail: format!("{published} chunks published, room for {max}"),
            }
            .into());
        }
        fence(Ordering::SeqCst);
        while (self.chunks.len() as u64) < published {
            let i = self.chunks.len() as u64;
            let mut len = [0u8; 2];
            self.header.read(HEADER + SLOT * i, &mut len)?;
            let len = u16::from_le_bytes(len) as u64;
            if len == 0 || len > SLOT - 2 {
                return Err(HandleError::Malformed {
                    field: "growable chunk slot",
                    detail: format!("slot {i} holds {len} bytes"),
                }
                .into());
            }
            let mut text = vec![0u8; len as usize];
            self.header.read(HEADER + SLOT * i + 2, &mut text)?;
            let text = std::str::from_utf8(&text).map_err(|_| HandleError::Malformed {
                field: "growable chunk slot",
                detail: "not text".into(),
            })?;
            let handle = Handle::from_text(text)?;
            let phys = self
                .device
                .import_physical(SharedHandle::from(handle), &ImportOptions::default())?;
            self.device
                .map(&self.reservation, i * self.chunk_size, &phys)?;
            self.device.set_access(
                &self.reservation,
                i * self.chunk_size,
                self.chunk_size,
                Access::ReadWrite,
            )?;
            self.chunks.push(phys);
        }
        Ok(self.len())
    }

    /// Bytes mapped now.
    pub fn len(&self) -> u64 {
        self.chunks.len() as u64 * self.chunk_size
    }

    /// True when no chunk is mapped yet.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Copy out of the mapped part.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        crate::device::check_bounds(offset, dst.len() as u64, self.len())?;
        self.reservation.read(offset, dst)
    }

    /// Copy into the mapped part.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        crate::device::check_bounds(offset, src.len() as u64, self.len())?;
        self.reservation.write(offset, src)
    }
}
