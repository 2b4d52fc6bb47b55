//! The [`Reservation`](crate::Reservation) of a backend that reads and
//! writes a reservation's bytes with vendor copies, never through its
//! address: every byte is checked to be mapped with the access the copy
//! needs before the vendor is called (a device copy through a mapping
//! without access faults), and an empty copy calls nothing.
//!
//! [`reservation_by_copies!`](crate::reservation_by_copies) writes the
//! `impl Reservation` from the reservation's own parts.

/// `impl Reservation for $reservation`, from its fields `base: u64` and
/// `len: u64` and its inherent methods
///
/// - `check_access(&self, offset: u64, len: u64, write: bool) -> Result<()>`:
///   refuse unless every byte of the range is mapped with the access a read
///   (`write` false) or a write needs, bounds included;
/// - `copy_out(&self, offset: u64, dst: &mut [u8]) -> Result<()>` and
///   `copy_in(&self, offset: u64, src: &[u8]) -> Result<()>`: the vendor's
///   copies of a checked, non-empty range.
#[macro_export]
macro_rules! reservation_by_copies {
    ($reservation:ty) => {
        impl $crate::Reservation for $reservation {
            fn base(&self) -> u64 {
                self.base
            }

            fn len(&self) -> u64 {
                self.len
            }

            fn read(&self, offset: u64, dst: &mut [u8]) -> $crate::Result<()> {
                self.check_access(offset, dst.len() as u64, false)?;
                if dst.is_empty() {
                    return Ok(());
                }
                self.copy_out(offset, dst)
            }

            fn write(&self, offset: u64, src: &[u8]) -> $crate::Result<()> {
                self.check_access(offset, src.len() as u64, true)?;
                if src.is_empty() {
                    return Ok(());
                }
                self.copy_in(offset, src)
            }
        }
    };
}
