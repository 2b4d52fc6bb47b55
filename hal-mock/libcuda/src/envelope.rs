//! The 64 bytes of a stand-in IPC handle and the *envelope* they name,
//! shared by legacy IPC of memory (`ipc.rs`) and of events (`ipc_event.rs`).
//!
//! # How 64 bytes reach another process's object
//!
//! The first `cuIpcGet*Handle` of an object exports it with the simulator
//! (open to anyone), writes that export's handle text into a small sealed
//! memfd, the *envelope*, and registers the envelope with this process's
//! descriptor broker (`hal_core::exchange::envelope`, which the stand-in
//! libascendcl's keys use too). Both exports live as long as
//! the object. The 64 bytes name the envelope; another process's stand-in
//! (the same build) rebuilds the envelope's handle from them, fetches its
//! descriptor from the broker (`hal_core::exchange::take_fds`), reads and
//! decodes the text, and opens the object with the simulator.
//!
//! | bytes | field |
//! | ---: | --- |
//! | 0..4 | magic `HLCI` |
//! | 4 | version, 1 |
//! | 5 | what the handle names: 0 memory, 1 an event |
//! | 6..8 | zero |
//! | 8..12 | the exporter's pid (`u32`, little-endian, as everywhere here) |
//! | 12..20 | the exporter's start time, clock ticks since boot |
//! | 20..28 | the exporter's pid namespace (inode of `/proc/self/ns/pid`) |
//! | 28..36 | the broker's name: `hal-<pid>-<these 8 bytes in hex>` |
//! | 36..52 | the envelope's object id |
//! | 52..60 | the object's id (an allocation's buffer id; 0 for an event) |
//! | 60..64 | FNV-1a (32 bits) of bytes 0..60 |

use hal_core::exchange::envelope::{self, EnvelopeRef};
use hal_core::kit::vendor::{cuda, Code};
use hal_core::{BackendId, Error, Exported, Handle};

use crate::error::{code_of, sim};

/// The first bytes of a stand-in IPC handle.
const MAGIC: [u8; 4] = *b"HLCI";
/// The layout's version.
const VERSION: u8 = 1;
/// Where the [`EnvelopeRef`] lies in the 64 bytes.
const ENVELOPE: std::ops::Range<usize> = 8..8 + EnvelopeRef::LEN;

/// What a stand-in IPC handle names (byte 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Names {
    /// Device memory (`cuIpcGetMemHandle`).
    Memory = 0,
    /// An event (`cuIpcGetEventHandle`).
    Event = 1,
}

/// What the 64 bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wire {
    pub(crate) names: Names,
    /// The exporter, its broker and the envelope's object id.
    pub(crate) envelope: EnvelopeRef,
    pub(crate) id: u64,
}

/// FNV-1a, 32 bits.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

impl Wire {
    pub(crate) fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = self.names as u8;
        b[ENVELOPE].copy_from_slice(&self.envelope.to_bytes());
        b[52..60].copy_from_slice(&self.id.to_le_bytes());
        let sum = fnv1a(&b[..60]);
        b[60..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// The fields of `b`; `CUDA_ERROR_INVALID_VALUE` for bytes this layout
    /// did not write.
    pub(crate) fn decode(b: &[u8; 64]) -> Result<Wire, Code> {
        let mut sum = [0u8; 4];
        sum.copy_from_slice(&b[60..64]);
        if b[0..4] != MAGIC
            || b[4] != VERSION
            || b[6..8] != [0; 2]
            || u32::from_le_bytes(sum) != fnv1a(&b[..60])
        {
            return Err(cuda::INVALID_VALUE);
        }
        let names = match b[5] {
            0 => Names::Memory,
            1 => Names::Event,
            _ => return Err(cuda::INVALID_VALUE),
        };
        let mut envelope = [0u8; EnvelopeRef::LEN];
        envelope.copy_from_slice(&b[ENVELOPE]);
        let mut id = [0u8; 8];
        id.copy_from_slice(&b[52..60]);
        Ok(Wire {
            names,
            envelope: EnvelopeRef::from_bytes(&envelope),
            id: u64::from_le_bytes(id),
        })
    }

    /// True when this process wrote the handle.
    pub(crate) fn is_own(&self) -> bool {
        self.envelope.is_own()
    }
}

/// Seal `text` (a simulator export's handle) into an envelope registered
/// with this process's broker: the envelope, kept as long as the object,
/// and the 64 bytes naming it.
pub(crate) fn seal(text: &str, names: Names, id: u64) -> Result<(Exported, [u8; 64]), Code> {
    let (kept, envelope) = envelope::seal(text, BackendId::MockCuda).map_err(|e| match e {
        // Without a broker (sockets forbidden) the envelope cannot be fetched.
        Error::Unsupported { .. } => cuda::UNKNOWN,
        e => code_of(&e),
    })?;
    let wire = Wire {
        names,
        envelope,
        id,
    };
    Ok((kept, wire.encode()))
}

/// The simulator handle inside the envelope `wire` names.
pub(crate) fn open(wire: &Wire) -> Result<Handle, Code> {
    let text = sim(envelope::open(&wire.envelope, BackendId::MockCuda))?;
    Handle::from_text(&text).map_err(|_| cuda::INVALID_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire() -> Wire {
        Wire {
            names: Names::Memory,
            envelope: EnvelopeRef {
                pid: 4242,
                start: 99,
                pid_ns: 4026531836,
                broker: [1, 2, 3, 4, 5, 6, 7, 0xab],
                object_id: [9; 16],
            },
            id: 17,
        }
    }

    #[test]
    fn the_64_bytes_round_trip_and_refuse_damage() {
        for names in [Names::Memory, Names::Event] {
            let w = Wire { names, ..wire() };
            let b = w.encode();
            assert_eq!(Wire::decode(&b), Ok(w));
            for i in 0..64 {
                let mut bad = b;
                bad[i] ^= 0x40;
                assert_eq!(Wire::decode(&bad), Err(cuda::INVALID_VALUE), "byte {i}");
            }
        }
        assert_eq!(Wire::decode(&[0; 64]), Err(cuda::INVALID_VALUE));
        let mut other = wire().encode();
        other[5] = 2;
        let sum = fnv1a(&other[..60]);
        other[60..64].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(Wire::decode(&other), Err(cuda::INVALID_VALUE));
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        let b = wire().encode();
        assert_eq!(&b[0..4], b"HLCI");
        assert_eq!(b[4], 1);
        assert_eq!(&b[8..12], &4242u32.to_le_bytes());
        assert_eq!(&b[12..20], &99u64.to_le_bytes());
        assert_eq!(&b[20..28], &4026531836u64.to_le_bytes());
        assert_eq!(&b[28..36], &[1, 2, 3, 4, 5, 6, 7, 0xab]);
        assert_eq!(&b[36..52], &[9; 16]);
        assert_eq!(&b[52..60], &17u64.to_le_bytes());
    }

    #[test]
    fn a_sealed_handle_opens_to_its_text() {
        let text = Handle::from_text(
            &envelope::seal("placeholder", BackendId::MockCuda)
                .unwrap()
                .0
                .to_text(),
        )
        .unwrap()
        .to_text();
        let (_kept, bytes) = seal(&text, Names::Event, 3).unwrap();
        let w = Wire::decode(&bytes).unwrap();
        assert!(w.is_own());
        assert_eq!((w.names, w.id), (Names::Event, 3));
        assert_eq!(open(&w).unwrap().to_text(), text);
    }
}
