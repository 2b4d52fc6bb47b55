//! The importer's side of a memfd-backed export: taking the descriptors of
//! a shared handle, exactly as many as the backend's handles carry, and
//! checking their seals before anything maps them.

use std::os::fd::{AsFd, OwnedFd};

use crate::error::{Error, HandleError, Result};
use crate::exchange::{self, Lease, Taken};
use crate::handle::SharedHandle;
use crate::kit::os;

/// What an import requires of the sealed descriptors it takes (see
/// [`take_sealed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect<'a> {
    /// The handle, as errors name it: "a CPU memory handle (the data
    /// memfd)", "a notify handle of `hal-mock-cuda`".
    pub what: &'a str,
    /// The fewest bytes every memfd must hold (what the import maps).
    pub min_size: u64,
    /// The handle is read-only: every memfd must also be sealed against
    /// writes ([`os::verify_read_only_memfd`]).
    pub read_only: bool,
    /// Ask for the importer's lease when the exporter counts its importers
    /// ([`exchange::take_fds_leased`]); without, [`exchange::take_fds`].
    pub leased: bool,
}

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
/// handle are refused with [`HandleError::Descriptors`]; the errors of
/// [`exchange::take_fds`] come as they are.
///
/// ```
/// use hal_core::kit::export::{take_sealed, Expect, SealedMemfd};
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
/// `expect` (see [`take_sealed`]).
pub fn check_sealed<const N: usize>(taken: Taken, expect: &Expect<'_>) -> Result<Sealed<N>> {
    // What this process read of a descriptor it took itself (its seals,
    // then its fstat) is checked as it stands, without reading it again.
    let facts: Vec<Option<os::FileFacts>> = (0..N).map(|i| taken.facts(i).copied()).collect();
    // Refused descriptors may be anyone's files: discarded, never closed
    // here (see `kit::discard`).
    let held = crate::kit::discard::Untrusted::new(taken.fds);
    check_fd_count(expect.what, N, held.len())?;
    for (fd, known) in held.as_slice().iter().zip(facts) {
        match known {
            Some(f) => os::verify_memfd_facts(&f, expect.min_size, expect.read_only)?,
            None if expect.read_only => os::verify_read_only_memfd(fd.as_fd(), expect.min_size)?,
            None => os::verify_sealed_memfd(fd.as_fd(), expect.min_size)?,
        };
    }
    let fds = fd_array::<N>(held.accept(), expect.what)?;
    Ok(Sealed {
        fds,
        lease: taken.lease,
        checked: taken.checked,
    })
}

/// The descriptors of a handle as exactly `N`; another number is refused
/// with [`HandleError::Descriptors`] naming `what` (see [`check_fd_count`]).
pub fn fd_array<const N: usize>(fds: Vec<OwnedFd>, what: &str) -> Result<[OwnedFd; N]> {
    let came = fds.len();
    <[OwnedFd; N]>::try_from(fds).map_err(|_| count_error(what, N, came))
}

/// Refuse `came` descriptors for a handle that carries `expected`:
/// [`HandleError::Descriptors`] saying "`what` takes `expected`
/// descriptor(s), `came` came".
pub fn check_fd_count(what: &str, expected: usize, came: usize) -> Result<()> {
    if came != expected {
        return Err(count_error(what, expected, came));
    }
    Ok(())
}

fn count_error(what: &str, expected: usize, came: usize) -> Error {
    HandleError::Descriptors(format!(
        "{what} takes {expected} descriptor(s), {came} came"
    ))
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::{FdSource, Handle};

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
