//! The pages an allocation sits on, and the alignment an export of it
//! needs. `aclrtIpcMemGetExportKey` refuses a range that is not whole pages
//! of the memory's page table (4 KiB, or 2 MiB / 1 GiB huge pages) so that
//! no neighbouring data leaks (`vendor/ascend.md`, "Semantics"); which page
//! size that is follows from the allocation policy `aclrtMalloc` was given
//! (`aclrtMemMallocPolicy`, `acl_rt.h`):
//!
//! | placement asked for | policy | page an export must cover whole |
//! |---|---|---|
//! | `HugePages::Explicit(1 GiB)` | `ACL_MEM_MALLOC_HUGE1G_ONLY` | 1 GiB |
//! | `HugePages::Explicit(2 MiB)` | `ACL_MEM_MALLOC_HUGE_ONLY` | 2 MiB |
//! | `HugePages::Explicit(4 KiB)` | `ACL_MEM_MALLOC_NORMAL_ONLY` | 4 KiB |
//! | none, a size of whole 2 MiB pages | `ACL_MEM_MALLOC_HUGE_FIRST` | 2 MiB |
//! | none, any other size | `ACL_MEM_MALLOC_NORMAL_ONLY` | 4 KiB |
//!
//! Huge pages first, as the runtime's default policy does, wherever the
//! size is whole huge pages; the check is then against 2 MiB pages, as
//! allocated. Should the runtime have fallen back to 4 KiB pages, a range
//! of whole 2 MiB pages is whole 4 KiB pages too: the check is never
//! looser than the memory's real pages. Smaller buffers ask for normal
//! pages, so that they stay exportable by 4 KiB pages (they may still be
//! sub-allocations that do not start on one: refused, never widened).

use hal_core::{ByteRange, Error, HugePages, Result};

use crate::ffi::bindings::{
    aclrtMemMallocPolicy, ACL_MEM_MALLOC_HUGE1G_ONLY, ACL_MEM_MALLOC_HUGE_FIRST,
    ACL_MEM_MALLOC_HUGE_ONLY, ACL_MEM_MALLOC_NORMAL_ONLY,
};

/// A normal page.
pub(crate) const NORMAL: u64 = 4 << 10;
/// A huge page.
pub(crate) const HUGE: u64 = 2 << 20;
/// A 1 GiB huge page.
pub(crate) const HUGE_1G: u64 = 1 << 30;

/// Every page size of a device, smallest first.
pub(crate) const SIZES: [u64; 3] = [NORMAL, HUGE, HUGE_1G];

/// The policy to allocate `size` bytes with, and the page the memory then
/// sits on.
pub(crate) fn policy(size: u64, huge: HugePages) -> Result<(aclrtMemMallocPolicy, u64)> {
    match huge {
        HugePages::Explicit(HUGE_1G) => Ok((ACL_MEM_MALLOC_HUGE1G_ONLY, HUGE_1G)),
        HugePages::Explicit(HUGE) => Ok((ACL_MEM_MALLOC_HUGE_ONLY, HUGE)),
        HugePages::Explicit(NORMAL) => Ok((ACL_MEM_MALLOC_NORMAL_ONLY, NORMAL)),
        HugePages::Explicit(p) => Err(Error::invalid(format!(
            "page size {p:#x} is not one of an Ascend device's ({NORMAL:#x}, {HUGE:#x}, \
             {HUGE_1G:#x})"
        ))),
        HugePages::None | HugePages::Transparent if size % HUGE == 0 => {
            Ok((ACL_MEM_MALLOC_HUGE_FIRST, HUGE))
        }
        HugePages::None | HugePages::Transparent => Ok((ACL_MEM_MALLOC_NORMAL_ONLY, NORMAL)),
    }
}

/// Refuse an export of `range` of memory at `addr` that is not whole
/// `page`s at a `page`-aligned address: [`Error::Misaligned`], naming the
/// page size.
pub(crate) fn check_export(addr: u64, range: ByteRange, page: u64) -> Result<()> {
    if (addr + range.offset) % page != 0 || range.len % page != 0 {
        return Err(Error::Misaligned {
            offset: range.offset,
            len: range.len,
            page_size: page,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_follows_the_placement_and_the_size() {
        let none = HugePages::None;
        assert_eq!(
            policy(HUGE, none).unwrap(),
            (ACL_MEM_MALLOC_HUGE_FIRST, HUGE)
        );
        assert_eq!(
            policy(3 * HUGE, HugePages::Transparent).unwrap(),
            (ACL_MEM_MALLOC_HUGE_FIRST, HUGE)
        );
        assert_eq!(
            policy(HUGE + NORMAL, none).unwrap(),
            (ACL_MEM_MALLOC_NORMAL_ONLY, NORMAL)
        );
        assert_eq!(
            policy(100, none).unwrap(),
            (ACL_MEM_MALLOC_NORMAL_ONLY, NORMAL)
        );
        assert_eq!(
            policy(100, HugePages::Explicit(HUGE)).unwrap(),
            (ACL_MEM_MALLOC_HUGE_ONLY, HUGE)
        );
        assert_eq!(
            policy(HUGE, HugePages::Explicit(HUGE_1G)).unwrap(),
            (ACL_MEM_MALLOC_HUGE1G_ONLY, HUGE_1G)
        );
        assert_eq!(
            policy(HUGE, HugePages::Explicit(NORMAL)).unwrap(),
            (ACL_MEM_MALLOC_NORMAL_ONLY, NORMAL)
        );
        assert!(policy(HUGE, HugePages::Explicit(64 << 10)).is_err());
    }

    #[test]
    fn an_export_is_whole_pages_at_a_page_boundary() {
        let r = |offset, len| ByteRange::new(offset, len);
        assert!(check_export(HUGE, r(0, HUGE), HUGE).is_ok());
        assert!(check_export(0, r(HUGE, 2 * HUGE), HUGE).is_ok());
        for (addr, range) in [
            (HUGE, r(NORMAL, HUGE)),
            (HUGE, r(0, HUGE - NORMAL)),
            (HUGE + NORMAL, r(0, HUGE)),
            (0, r(0, HUGE + 1)),
        ] {
            match check_export(addr, range, HUGE) {
                Err(Error::Misaligned { page_size, .. }) => assert_eq!(page_size, HUGE),
                other => panic!("{addr:#x} {range:?}: {other:?}"),
            }
        }
        assert!(check_export(NORMAL, r(0, NORMAL), NORMAL).is_ok());
        assert!(check_export(NORMAL, r(0, NORMAL), HUGE).is_err());
    }
}
