//! VMM: physical allocations (memfds), address reservations, and the
//! mappings between them with their access rights.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use hal_core::kit::os::{self, Prot, SharedMap};
use hal_core::{
    Access, AccessGrant, AccessTarget, Physical, PhysicalLocation, Reservation, Result,
    ShareableHandle,
};

use crate::state::{lock, DevRef};

/// The memory of a physical allocation, shared by its owner, its mappings
/// and its importers in this process.
///
/// As the driver frees a physical allocation only when its handle, every
/// handle imported from it and every mapping of it are gone
/// (`cuMemRelease`), an import in the allocating process shares this
/// value ([`live`]) and the device is refunded at the last of them.
pub(crate) struct PhysMem {
    pub(crate) fd: OwnedFd,
    pub(crate) size: u64,
    pub(crate) location: PhysicalLocation,
    /// The device charged for it (`None` for memory made elsewhere).
    charged: Option<DevRef>,
    /// Its memfd's identity, the key in [`live`].
    key: Option<FileKey>,
}

impl Drop for PhysMem {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            let mut live = lock(live());
            if live
                .get(&key)
                .is_some_and(|w| std::ptr::eq(w.as_ptr(), self))
            {
                live.remove(&key);
            }
        }
        if let Some(dev) = &self.charged {
            dev.state().refund(self.size);
        }
    }
}

/// A memfd's identity: device and inode.
type FileKey = (u64, u64);

fn file_key(fd: BorrowedFd<'_>) -> Option<FileKey> {
    let st = os::fstat(fd).ok()?;
    Some((st.st_dev, st.st_ino))
}

/// The physical allocations made in this process, by memfd: what an
/// import of a descriptor of one of them finds.
fn live() -> &'static Mutex<HashMap<FileKey, Weak<PhysMem>>> {
    static LIVE: OnceLock<Mutex<HashMap<FileKey, Weak<PhysMem>>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
}

/// A VMM physical allocation: memory with no address until mapped into a
/// [`MockReservation`].
#[must_use = "the physical memory is released when this value drops"]
pub struct MockPhysical {
    pub(crate) dev: DevRef,
    pub(crate) mem: Arc<PhysMem>,
    pub(crate) imported: bool,
    pub(crate) handle: ShareableHandle,
}

impl std::fmt::Debug for MockPhysical {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockPhysical")
            .field("backend", &self.dev.name())
            .field("device", &self.dev.ordinal)
            .field("size", &self.mem.size)
            .field("location", &self.mem.location)
            .field("handle", &self.handle)
            .field("imported", &self.imported)
            .finish()
    }
}

impl MockPhysical {
    /// Create `size` bytes for `dev` at `location`, made for `handle` (the
    /// caller checked all three). Device memory is charged to the device
    /// that holds it (`charged`); host NUMA memory to no device.
    pub(crate) fn create(
        dev: &DevRef,
        size: u64,
        location: PhysicalLocation,
        charged: Option<DevRef>,
        handle: ShareableHandle,
    ) -> Result<MockPhysical> {
        if let Some(holder) = &charged {
            holder.state().charge(holder.vendor(), size)?;
        }
        let refund = || {
            if let Some(holder) = &charged {
                holder.state().refund(size);
            }
        };
        let label = format!(
            "hal-mock-{}-{}-physical-{}",
            dev.profile().name,
            dev.ordinal,
            location_label(location)
        );
        let fd = match os::memfd(&label, size, None)
            .and_then(|fd| os::add_seals(fd.as_fd(), os::EXPORT_SEALS).map(|()| fd))
        {
            Ok(fd) => fd,
            Err(e) => {
                refund();
                return Err(e);
            }
        };
        let key = file_key(fd.as_fd());
        let mem = Arc::new(PhysMem {
            fd,
            size,
            location,
            charged,
            key,
        });
        if let Some(key) = key {
            lock(live()).insert(key, Arc::downgrade(&mem));
        }
        Ok(MockPhysical {
            dev: dev.clone(),
            mem,
            imported: false,
            handle,
        })
    }

    /// Wrap an imported, verified memfd of `size` bytes.
    pub(crate) fn imported(
        dev: &DevRef,
        fd: OwnedFd,
        size: u64,
        location: PhysicalLocation,
        handle: ShareableHandle,
    ) -> MockPhysical {
        // An allocation of this process: its memory, kept until the last
        // handle and mapping of it go.
        let made_here =
            file_key(fd.as_fd()).and_then(|key| lock(live()).get(&key).and_then(Weak::upgrade));
        let mem = made_here.unwrap_or_else(|| {
            Arc::new(PhysMem {
                fd,
                size,
                location,
                charged: None,
                key: None,
            })
        });
        MockPhysical {
            dev: dev.clone(),
            mem,
            imported: true,
            handle,
        }
    }

    /// True when this physical allocation was imported.
    pub fn is_imported(&self) -> bool {
        self.imported
    }

    /// A new descriptor of the memfd that holds the allocation's bytes:
    /// what a stand-in vendor library hands out as the allocation's POSIX
    /// shareable handle (see [`MockDevice::adopt_physical_fd`](crate::MockDevice::adopt_physical_fd)).
    pub fn dup_fd(&self) -> Result<OwnedFd> {
        os::dup(self.mem.fd.as_fd())
    }
}

/// The part of a physical allocation's memfd name that says where its
/// pages live: `device-N` or `host-numa-N`. The name travels with the
/// descriptor (`/proc/self/fd/N` names it `/memfd:...`), so a process that
/// receives only the descriptor learns the location from it, as a driver
/// does from its own handle.
pub(crate) fn location_label(location: PhysicalLocation) -> String {
    match location {
        PhysicalLocation::Device(d) => format!("device-{d}"),
        PhysicalLocation::HostNuma(n) => format!("host-numa-{n}"),
    }
}

/// The location [`location_label`] wrote into the name of the memfd `fd`;
/// `None` when the name is not one of a physical allocation.
pub(crate) fn location_of_fd(fd: std::os::fd::BorrowedFd<'_>) -> Option<PhysicalLocation> {
    use std::os::fd::AsRawFd;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    let name = link
        .to_str()?
        .strip_suffix(" (deleted)")
        .unwrap_or(link.to_str()?);
    let (_, tail) = name.rsplit_once("-physical-")?;
    if let Some(n) = tail.strip_prefix("host-numa-") {
        return n.parse().ok().map(PhysicalLocation::HostNuma);
    }
    tail.strip_prefix("device-")?
        .parse()
        .ok()
        .map(PhysicalLocation::Device)
}

impl Physical for MockPhysical {
    fn size(&self) -> u64 {
        self.mem.size
    }

    fn location(&self) -> PhysicalLocation {
        self.mem.location
    }

    fn handle_type(&self) -> ShareableHandle {
        self.handle
    }
}

/// One mapped part of a reservation.
pub(crate) struct Segment {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) mem: Arc<PhysMem>,
    /// Which `map` call made it (unmap must cover whole mappings).
    pub(crate) map_id: u64,
    /// Who may access it, and how; a target not listed has no access.
    pub(crate) grants: Vec<AccessGrant>,
}

impl Segment {
    /// The access `target` has to this segment.
    pub(crate) fn access_of(&self, target: AccessTarget) -> Access {
        self.grants
            .iter()
            .find(|g| g.target == target)
            .map_or(Access::None, |g| g.access)
    }
}

#[derive(Default)]
pub(crate) struct Segments {
    pub(crate) next_id: u64,
    /// Sorted by offset, not overlapping.
    pub(crate) list: Vec<Segment>,
}

/// A VMM address range reservation. Parts are mapped with
/// [`VmmExt::map`](hal_core::VmmExt::map) and made accessible with
/// [`VmmExt::set_access`](hal_core::VmmExt::set_access) or, for several
/// devices and the host at once,
/// [`Vmm::set_access_for`](hal_core::Vmm::set_access_for). Reads and
/// writes through the reservation are the reserving device's: parts that are
/// not mapped, or where that device lacks the access needed, are refused
/// with the vendor's error instead of faulting.
#[must_use = "the address range is unmapped and released when this value drops"]
pub struct MockReservation {
    pub(crate) dev: DevRef,
    pub(crate) map: SharedMap,
    pub(crate) len: u64,
    pub(crate) segments: Mutex<Segments>,
}

impl std::fmt::Debug for MockReservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockReservation")
            .field("backend", &self.dev.name())
            .field("device", &self.dev.ordinal)
            .field("base", &format_args!("{:#x}", self.base()))
            .field("len", &self.len)
            .field("mapped", &lock(&self.segments).list.len())
            .finish()
    }
}

impl MockReservation {
    pub(crate) fn create(dev: &DevRef, size: u64, align: u64) -> Result<MockReservation> {
        Ok(MockReservation {
            dev: dev.clone(),
            map: SharedMap::reserve_aligned(size, align)?,
            len: size,
            segments: Mutex::new(Segments::default()),
        })
    }

    /// Check that `offset..offset+len` is mapped with at least `need` access.
    fn check_access(&self, offset: u64, len: u64, write: bool) -> Result<()> {
        self.dev.alive()?;
        hal_core::device::check_bounds(offset, len, self.len)?;
        let segs = lock(&self.segments);
        let end = offset + len;
        let mut at = offset;
        for s in segs
            .list
            .iter()
            .filter(|s| s.offset + s.len > offset && s.offset < end)
        {
            if s.offset > at {
                break;
            }
            let access = s.access_of(self.me());
            let ok = match access {
                Access::ReadWrite => true,
                Access::Read => !write,
                Access::None => false,
            };
            if !ok {
                return Err(self.dev.err(
                    self.dev.vendor().invalid_value(),
                    format!(
                        "address {:#x} of the reservation is mapped with {:?} access for \
                         device {}; {} it needs {} access (set_access first)",
                        self.base() + at,
                        access,
                        self.dev.ordinal,
                        if write { "writing" } else { "reading" },
                        if write { "read-write" } else { "read" }
                    ),
                ));
            }
            at = s.offset + s.len;
            if at >= end {
                return Ok(());
            }
        }
        if len == 0 {
            return Ok(());
        }
        Err(self.dev.err(
            self.dev.vendor().invalid_value(),
            format!(
                "address {:#x} of the reservation is not mapped (map a physical allocation \
                 there first)",
                self.base() + at
            ),
        ))
    }

    /// The reserving device, as an access target.
    fn me(&self) -> AccessTarget {
        AccessTarget::Device(self.dev.ordinal)
    }

    /// Map `len` bytes of `mem` from `mem_offset` at `offset`, with no
    /// access (the caller checked both ranges).
    pub(crate) fn map_mem(
        &self,
        offset: u64,
        mem: &Arc<PhysMem>,
        mem_offset: u64,
        len: u64,
    ) -> Result<()> {
        let mut segs = lock(&self.segments);
        let end = offset + len;
        if let Some(s) = segs
            .list
            .iter()
            .find(|s| s.offset < end && s.offset + s.len > offset)
        {
            return Err(self.dev.err(
                self.dev.vendor().invalid_value(),
                format!(
                    "range {offset:#x}+{len:#x} overlaps the mapping at {:#x}+{:#x}: unmap it \
                     first",
                    s.offset, s.len
                ),
            ));
        }
        self.map
            .map_over(offset, mem.fd.as_fd(), mem_offset, len, Prot::None)?;
        segs.next_id += 1;
        let map_id = segs.next_id;
        let at = segs.list.partition_point(|s| s.offset < offset);
        segs.list.insert(
            at,
            Segment {
                offset,
                len,
                mem: Arc::clone(mem),
                map_id,
                grants: Vec::new(),
            },
        );
        Ok(())
    }

    /// Unmap exactly the mappings that make up `offset..offset+len`.
    pub(crate) fn unmap_range(&self, offset: u64, len: u64) -> Result<()> {
        let mut segs = lock(&self.segments);
        let end = offset + len;
        let inside = |s: &Segment| s.offset >= offset && s.offset + s.len <= end;
        let touched: Vec<u64> = segs
            .list
            .iter()
            .filter(|s| s.offset < end && s.offset + s.len > offset)
            .map(|s| s.map_id)
            .collect();
        let covered: u64 = segs.list.iter().filter(|s| inside(s)).map(|s| s.len).sum();
        let whole = segs
            .list
            .iter()
            .filter(|s| touched.contains(&s.map_id))
            .all(inside);
        if covered != len || !whole {
            return Err(self.dev.err(
                self.dev.vendor().invalid_value(),
                format!(
                    "range {offset:#x}+{len:#x} is not exactly a set of whole mappings: unmap \
                     what one map call mapped, with no unmapped hole"
                ),
            ));
        }
        self.map.unmap_part(offset, len)?;
        segs.list.retain(|s| !inside(s));
        Ok(())
    }

    /// Apply `grants` (checked by the caller against the device list) to
    /// `offset..offset+len`, which must be mapped whole. Host grants need
    /// host pages. Nothing changes when the range or a grant is refused.
    pub(crate) fn set_range_access(
        &self,
        offset: u64,
        len: u64,
        grants: &[AccessGrant],
    ) -> Result<()> {
        let mut segs = lock(&self.segments);
        let end = offset + len;
        let touched = |s: &Segment| s.offset + s.len > offset && s.offset < end;
        // Every byte of the range must be mapped.
        let mut at = offset;
        for s in segs.list.iter().filter(|s| touched(s)) {
            if s.offset > at {
                break;
            }
            at = s.offset + s.len;
        }
        if at < end {
            return Err(self.dev.err(
                self.dev.vendor().invalid_value(),
                format!(
                    "address {:#x} of the range is not mapped: set access only on mapped memory",
                    self.base() + at
                ),
            ));
        }
        let host = grants.iter().any(|g| g.target == AccessTarget::Host);
        if let Some(s) = segs
            .list
            .iter()
            .filter(|s| touched(s))
            .find(|s| host && !matches!(s.mem.location, PhysicalLocation::HostNuma(_)))
        {
            return Err(self.dev.err(
                self.dev.vendor().invalid_value(),
                format!(
                    "host access to the mapping at {:#x}: its pages live in {:?}; only host \
                     NUMA pages (PhysicalLocation::HostNuma) can be made host-accessible",
                    self.base() + s.offset,
                    s.mem.location
                ),
            ));
        }
        // Split the segments at the range's ends, then set the access.
        for cut in [offset, end] {
            if let Some(i) = segs
                .list
                .iter()
                .position(|s| s.offset < cut && s.offset + s.len > cut)
            {
                let s = &mut segs.list[i];
                let tail = Segment {
                    offset: cut,
                    len: s.offset + s.len - cut,
                    mem: Arc::clone(&s.mem),
                    map_id: s.map_id,
                    grants: s.grants.clone(),
                };
                s.len = cut - s.offset;
                segs.list.insert(i + 1, tail);
            }
        }
        // The process's view of the range is the reserving device's.
        if let Some(mine) = grants.iter().find(|g| g.target == self.me()) {
            let prot = match mine.access {
                Access::None => Prot::None,
                Access::Read => Prot::Read,
                Access::ReadWrite => Prot::ReadWrite,
            };
            self.map.protect(offset, len, prot)?;
        }
        for s in segs
            .list
            .iter_mut()
            .filter(|s| s.offset >= offset && s.offset + s.len <= end)
        {
            for g in grants {
                match s.grants.iter_mut().find(|h| h.target == g.target) {
                    Some(h) => h.access = g.access,
                    None => s.grants.push(*g),
                }
            }
        }
        Ok(())
    }

    /// The access `target` has to the mapped byte at `offset`.
    pub(crate) fn access_at(&self, offset: u64, target: AccessTarget) -> Result<Access> {
        let segs = lock(&self.segments);
        segs.list
            .iter()
            .find(|s| s.offset <= offset && offset < s.offset + s.len)
            .map(|s| s.access_of(target))
            .ok_or_else(|| {
                self.dev.err(
                    self.dev.vendor().invalid_value(),
                    format!(
                        "address {:#x} of the reservation is not mapped",
                        self.base() + offset
                    ),
                )
            })
    }
}

impl Reservation for MockReservation {
    fn base(&self) -> u64 {
        self.map.as_ptr() as u64
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.check_access(offset, dst.len() as u64, false)?;
        self.map.read(offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.check_access(offset, src.len() as u64, true)?;
        self.map.write(offset, src)
    }
}

/// Refuse `value` unless it is a non-zero multiple of the granularity.
pub(crate) fn check_granular(dev: &DevRef, what: &str, value: u64, zero_ok: bool) -> Result<()> {
    let g = dev.profile().granularity_min;
    if (value == 0 && !zero_ok) || value % g != 0 {
        return Err(dev.err(
            dev.vendor().invalid_value(),
            format!(
                "{what} {value:#x} is not a {}multiple of the minimum granularity {g:#x} \
                 (granularity(Minimum))",
                if zero_ok { "" } else { "non-zero " }
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_physical_memfd_names_where_its_pages_live() {
        for location in [PhysicalLocation::Device(3), PhysicalLocation::HostNuma(1)] {
            let label = format!("hal-mock-mock-cuda-0-physical-{}", location_label(location));
            let fd = os::memfd(&label, 4096, None).unwrap();
            assert_eq!(location_of_fd(fd.as_fd()), Some(location), "{label}");
        }
        let other = os::memfd("hal-mock-something-else", 4096, None).unwrap();
        assert_eq!(location_of_fd(other.as_fd()), None);
        let bad = os::memfd("x-physical-host-numa-nope", 4096, None).unwrap();
        assert_eq!(location_of_fd(bad.as_fd()), None);
    }
}
