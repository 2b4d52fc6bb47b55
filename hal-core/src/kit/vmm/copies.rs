//! The [`Reservation`] of a backend that reads and writes a reservation's
//! bytes with vendor copies, never through its address: every byte is
//! checked to be mapped with the access the copy needs before the vendor is
//! called (a device copy through a mapping without access faults), and an
//! empty copy calls nothing.
//!
//! A backend implements [`ReservationByCopies`], the reservation's own
//! parts, and has [`Reservation`] from it.

use crate::error::Result;
use crate::vmm::Reservation;

/// The parts of a reservation whose bytes only vendor copies reach:
/// implementing them implements [`Reservation`].
pub trait ReservationByCopies: Send + Sync {
    /// Its first address and its length in bytes.
    fn range(&self) -> (u64, u64);

    /// Refuse unless every byte of `len` bytes from `offset` is mapped with
    /// the access a read (`write` false) or a write needs, bounds included.
    fn check_access(&self, offset: u64, len: u64, write: bool) -> Result<()>;

    /// The vendor's copy out of a checked, non-empty range.
    fn copy_out(&self, offset: u64, dst: &mut [u8]) -> Result<()>;

    /// The vendor's copy into a checked, non-empty range.
    fn copy_in(&self, offset: u64, src: &[u8]) -> Result<()>;
}

impl<R: ReservationByCopies> Reservation for R {
    fn base(&self) -> u64 {
        self.range().0
    }

    fn len(&self) -> u64 {
        self.range().1
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.check_access(offset, dst.len() as u64, false)?;
        if dst.is_empty() {
            return Ok(());
        }
        self.copy_out(offset, dst)
    }

    fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        self.check_access(offset, src.len() as u64, true)?;
        if src.is_empty() {
            return Ok(());
        }
        self.copy_in(offset, src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::sync::Mutex;

    /// A reservation of 8 bytes whose first 4 are mapped, counting copies.
    struct Four {
        bytes: Mutex<[u8; 8]>,
        copies: Mutex<usize>,
    }

    impl ReservationByCopies for Four {
        fn range(&self) -> (u64, u64) {
            (0x1000, 8)
        }

        fn check_access(&self, offset: u64, len: u64, _write: bool) -> Result<()> {
            if offset + len > 4 {
                return Err(Error::invalid("unmapped"));
            }
            Ok(())
        }

        fn copy_out(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
            *self.copies.lock().unwrap() += 1;
            let o = offset as usize;
            dst.copy_from_slice(&self.bytes.lock().unwrap()[o..o + dst.len()]);
            Ok(())
        }

        fn copy_in(&self, offset: u64, src: &[u8]) -> Result<()> {
            *self.copies.lock().unwrap() += 1;
            let o = offset as usize;
            self.bytes.lock().unwrap()[o..o + src.len()].copy_from_slice(src);
            Ok(())
        }
    }

    #[test]
    fn copies_are_checked_first_and_empty_ones_call_nothing() {
        let r = Four {
            bytes: Mutex::new([0; 8]),
            copies: Mutex::new(0),
        };
        assert_eq!((r.base(), r.len()), (0x1000, 8));
        r.write(1, &[7, 8]).unwrap();
        let mut out = [0; 3];
        r.read(0, &mut out).unwrap();
        assert_eq!(out, [0, 7, 8]);
        assert!(r.write(3, &[1, 2]).is_err());
        assert!(r.read(4, &mut [0; 1]).is_err());
        r.read(2, &mut []).unwrap();
        r.write(2, &[]).unwrap();
        assert_eq!(*r.copies.lock().unwrap(), 2);
    }
}
