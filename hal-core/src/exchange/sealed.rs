//! The importer's side of a memfd-backed export: taking the descriptors of
//! a shared handle (attached, or fetched from the exporter's broker) and
//! checking them with the kit ([`check_memfds`]) before anything maps
//! them.

use std::os::fd::OwnedFd;

use crate::error::Result;
use crate::exchange::{self, Lease, Taken};
use crate::handle::SharedHandle;
use crate::kit::export::syncpage::{PageKind, SyncPage, PAGE_LEN};
use crate::kit::export::{check_memfds, Expect, SealedMemfd};
use crate::kit::os;

/// The descriptors [`take_sealed`] took and checked.
#[derive(Debug)]
pub struct Sealed<const N: usize> {
    /// The memfds, in the exporter's order.
    pub fds: [OwnedFd; N],
    /// The importer's lease, when asked for and the exporter counts
    /// importers; keep it as long as the import lives.
    pub lease: Option<Lease>,
    /// True when the descriptors are the exporter's own
    /// ([`Taken::checked`](crate::exchange::Taken::checked)): only such
    /// imports may be cached.
    pub checked: bool,
}

/// Take the `N` descriptors of `shared` (attached, or fetched from the
/// exporter's broker) and check each before it is mapped: a memfd sealed
/// against shrinking and growing (and against writes for a read-only
/// handle) of at least [`Expect::min_size`] bytes.
///
/// Another number of descriptors than `N`, a descriptor that is no memfd,
/// an unsealed or too small memfd, or a writable memfd for a read-only
/// handle are refused with [`HandleError::Descriptors`](crate::HandleError::Descriptors); the errors of
/// [`exchange::take_fds`] come as they are.
///
/// ```
/// use hal_core::exchange::sealed::take_sealed;
/// use hal_core::kit::export::{Expect, SealedMemfd};
/// use hal_core::{Exported, SharedHandle};
///
/// # let mut handle = hal_core::kit::export::new_handle(&hal_core::kit::export::HandleSpec {
/// #     kind: hal_core::HandleKind::Notify, backend: hal_core::BackendId::CpuShm, device: 0,
/// #     device_uuid: [0; 16], location: hal_core::Location::Host, default_allow_list: false,
/// # }, &Default::default())?;
/// let page = SealedMemfd::create("example", 4096)?;
/// let exported = Exported::new(handle, vec![page.dup_fd()?])?;
/// let mut shared = SharedHandle::from(exported.handle().clone());
/// let expect = Expect { what: "an example handle", min_size: 4096, read_only: false, leased: false };
/// let [fd] = take_sealed::<1>(&mut shared, &expect)?.fds;
/// let mine = SealedMemfd::open(fd, 4096)?;
/// # Ok::<(), hal_core::Error>(())
/// ```
pub fn take_sealed<const N: usize>(
    shared: &mut SharedHandle,
    expect: &Expect<'_>,
) -> Result<Sealed<N>> {
    check_sealed(exchange::take(shared, expect.leased)?, expect)
}

/// [`take_sealed`] for many handles at once, with one round trip per
/// exporter for the handles that name its broker
/// ([`exchange::take_fds_leased_batch`]; the lease is always asked for).
/// One result per handle, in order: a refused handle does not spoil the
/// others. `expect` gives each handle's [`Expect`].
pub fn take_sealed_batch<'a, const N: usize>(
    shared: &mut [SharedHandle],
    expect: impl Fn(usize) -> Expect<'a>,
) -> Vec<Result<Sealed<N>>> {
    exchange::take_fds_leased_batch(shared)
        .into_iter()
        .enumerate()
        .map(|(i, taken)| check_sealed(taken?, &expect(i)))
        .collect()
}

/// The descriptors of `taken` as exactly `N` memfds checked against
/// `expect` (see [`take_sealed`] and [`check_memfds`]).
pub fn check_sealed<const N: usize>(taken: Taken, expect: &Expect<'_>) -> Result<Sealed<N>> {
    let facts: Vec<Option<os::FileFacts>> = (0..N).map(|i| taken.facts(i).copied()).collect();
    let fds = check_memfds::<N>(taken.fds, &facts, expect)?;
    Ok(Sealed {
        fds,
        lease: taken.lease,
        checked: taken.checked,
    })
}

/// The import of an event's or a notify's shared page, whose descriptor the
/// exchange takes (the page itself is the kit's).
impl SyncPage {
    /// Import the page of a shared handle: its one descriptor taken and
    /// checked ([`take_sealed`]), then opened as [`SyncPage::open`] does.
    /// With `leased`, the importer's lease (when the exporter counts
    /// importers) is kept in the page.
    pub fn import(
        shared: &mut SharedHandle,
        kind: PageKind,
        what: &str,
        leased: bool,
    ) -> Result<SyncPage> {
        let expect = Expect {
            what: &format!("{what} handle"),
            min_size: PAGE_LEN,
            read_only: false,
            leased,
        };
        let taken = take_sealed::<1>(shared, &expect)?;
        let [fd] = taken.fds;
        let page = SyncPage::checked(SealedMemfd::mapped(fd, PAGE_LEN)?, kind, what)?;
        Ok(page.with_lease(taken.lease))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, HandleError};
    use crate::handle::{FdSource, Handle};
    use crate::kit::export::check_fd_count;
    use std::os::fd::AsFd;

    fn attached(fds: Vec<OwnedFd>) -> SharedHandle {
        SharedHandle {
            handle: Handle {
                fds: FdSource::Attached {
                    count: fds.len() as u8,
                },
                ..crate::handle::sample()
            },
            fds,
        }
    }

    fn expect(min_size: u64, read_only: bool) -> Expect<'static> {
        Expect {
            what: "a test handle",
            min_size,
            read_only,
            leased: false,
        }
    }

    fn sealed(len: u64) -> OwnedFd {
        crate::kit::export::sealed_memfd("take-test", len, os::EXPORT_SEALS).unwrap()
    }

    fn descriptors_error(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::InvalidHandle(HandleError::Descriptors(m))) => m,
            other => panic!("a Descriptors error, not {other:?}"),
        }
    }

    #[test]
    fn sealed_descriptors_of_the_right_count_are_taken() {
        let mut shared = attached(vec![sealed(4096), sealed(8192)]);
        let got = take_sealed::<2>(&mut shared, &expect(4096, false)).unwrap();
        assert!(got.lease.is_none() && !got.checked);
        assert!(shared.fds.is_empty(), "taken out of the handle");
    }

    #[test]
    fn a_count_mismatch_is_refused() {
        let mut shared = attached(vec![sealed(4096), sealed(4096)]);
        let msg = descriptors_error(take_sealed::<1>(&mut shared, &expect(4096, false)));
        assert_eq!(msg, "a test handle takes 1 descriptor(s), 2 came");
        let msg = descriptors_error(check_fd_count("a test handle", 1, 0));
        assert_eq!(msg, "a test handle takes 1 descriptor(s), 0 came");
        check_fd_count("a test handle", 3, 3).unwrap();
    }

    #[test]
    fn an_unsealed_or_short_memfd_is_refused() {
        let unsealed = os::memfd("take-test", 4096, None).unwrap();
        let mut shared = attached(vec![unsealed]);
        let msg = descriptors_error(take_sealed::<1>(&mut shared, &expect(4096, false)));
        assert!(msg.contains("not sealed"), "{msg}");
        let mut shared = attached(vec![sealed(4096)]);
        let msg = descriptors_error(take_sealed::<1>(&mut shared, &expect(8192, false)));
        assert!(msg.contains("fewer than"), "{msg}");
    }

    #[test]
    fn a_read_only_handle_needs_a_write_sealed_memfd() {
        let mut shared = attached(vec![sealed(4096)]);
        let msg = descriptors_error(take_sealed::<1>(&mut shared, &expect(4096, true)));
        assert!(msg.contains("F_SEAL_FUTURE_WRITE"), "{msg}");
        let fd = crate::kit::export::sealed_memfd("take-test", 4096, os::SIZE_SEALS).unwrap();
        os::seal_for_export(fd.as_fd(), true).unwrap();
        let mut shared = attached(vec![fd]);
        take_sealed::<1>(&mut shared, &expect(4096, true)).unwrap();
    }

    #[test]
    fn what_is_not_a_memfd_is_refused() {
        let file = tempfile::tempfile().unwrap();
        file.set_len(4096).unwrap();
        let mut shared = attached(vec![file.into()]);
        let msg = descriptors_error(take_sealed::<1>(&mut shared, &expect(4096, false)));
        assert!(msg.contains("not a sealable memfd"), "{msg}");
    }
}
