//! The copies and fills a host step (`step.rs`) does on home pages the
//! GPU does not reach: straight between the home pages and the memory
//! beside them (a staging buffer of the GPU's, read or written through its
//! `Memory`), with a bounce only between two ranges of home pages, which
//! may overlap.

use hal_core::device::check_bounds;
use hal_core::{Error, Memory, Result};

/// The home pages `offset..offset + len` of `home` as bytes.
fn bytes(home: &dyn Memory, offset: u64, len: u64) -> Result<&[u8]> {
    check_bounds(offset, len, home.len())?;
    let base = home
        .host_ptr()
        .ok_or_else(|| Error::invalid("home pages without a host address"))?;
    let len = usize::try_from(len).map_err(|_| Error::invalid("a copy too large for memory"))?;
    // SAFETY: the range lies inside the mapping (bounds checked), which
    // `home` keeps mapped while the borrow lives. The pages are shared with
    // other processes and the GPU: what they write meanwhile is plain data
    // to this copy, as for every shared mapping.
    Ok(unsafe { std::slice::from_raw_parts(base.add(offset as usize), len) })
}

/// The home pages `offset..offset + len` of `home` as writable bytes.
#[allow(clippy::mut_from_ref)]
fn bytes_mut(home: &dyn Memory, offset: u64, len: u64) -> Result<&mut [u8]> {
    if home.is_read_only() {
        return Err(Error::PermissionDenied {
            pid: None,
            reason: "the shared managed buffer is mapped read-only here; writes are refused".into(),
        });
    }
    let b = bytes(home, offset, len)?;
    // SAFETY: as in `bytes`, and the mapping is writable (checked above);
    // the slice lives only for the copy into it.
    Ok(unsafe { std::slice::from_raw_parts_mut(b.as_ptr().cast_mut(), b.len()) })
}

/// Copy `len` bytes from `src` at `src_offset` into `dst` at `dst_offset`,
/// at least one of them home pages (`dst_home`, `src_home`).
pub fn copy(
    dst: &dyn Memory,
    dst_offset: u64,
    dst_home: bool,
    src: &dyn Memory,
    src_offset: u64,
    src_home: bool,
    len: u64,
) -> Result<()> {
    check_bounds(src_offset, len, src.len())?;
    check_bounds(dst_offset, len, dst.len())?;
    match (dst_home, src_home) {
        // The GPU's memory from the home pages.
        (false, true) => dst.write(dst_offset, bytes(src, src_offset, len)?),
        // The home pages from the GPU's memory.
        (true, false) => src.read(src_offset, bytes_mut(dst, dst_offset, len)?),
        // Home to home: a bounce keeps overlapping ranges of one buffer right.
        _ => {
            let staged = bytes(src, src_offset, len)?.to_vec();
            dst.write(dst_offset, &staged)
        }
    }
}

/// Set `len` bytes of the home pages `dst` at `offset` to `value`.
pub fn fill(dst: &dyn Memory, offset: u64, len: u64, value: u8) -> Result<()> {
    bytes_mut(dst, offset, len)?.fill(value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use hal_core::{AllocDesc, Backend, Device};

    use super::*;

    const PAGE: u64 = 4096;

    fn home() -> hal_cpu_shm::CpuAllocation {
        hal_cpu_shm::CpuShm::new()
            .host()
            .allocate(&AllocDesc::host(2 * PAGE))
            .unwrap()
    }

    /// The other side of a copy is read and written through its `Memory`
    /// alone: the simulator's device memory, which has no host address.
    #[test]
    fn the_other_side_needs_no_host_address() {
        let gpu = hal_mock::MockBackend::cuda().open(0).unwrap();
        let device = gpu.allocate(&AllocDesc::device(0, PAGE)).unwrap();
        assert!(device.host_ptr().is_none());
        let pages = home();
        pages.write(PAGE, b"home to device").unwrap();
        copy(&device, 8, false, &pages, PAGE, true, 14).unwrap();
        let mut got = [0u8; 14];
        device.read(8, &mut got).unwrap();
        assert_eq!(&got, b"home to device");
        device.write(100, b"device to home").unwrap();
        copy(&pages, 0, true, &device, 100, false, 14).unwrap();
        pages.read(0, &mut got).unwrap();
        assert_eq!(&got, b"device to home");
    }

    /// Overlapping ranges of one buffer's home pages copy as if through a
    /// copy of the source; a fill sets what it names and nothing else.
    #[test]
    fn overlapping_home_ranges_and_fills() {
        let pages = home();
        pages.write(0, b"abcdefgh").unwrap();
        copy(&pages, 2, true, &pages, 0, true, 6).unwrap();
        let mut got = [0u8; 8];
        pages.read(0, &mut got).unwrap();
        assert_eq!(&got, b"ababcdef");
        fill(&pages, 1, 3, b'z').unwrap();
        pages.read(0, &mut got).unwrap();
        assert_eq!(&got, b"azzzcdef");
        assert!(fill(&pages, 2 * PAGE - 1, 2, 0).is_err(), "out of bounds");
        assert!(copy(&pages, 0, true, &pages, 2 * PAGE, true, 1).is_err());
    }
}
