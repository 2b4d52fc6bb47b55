//! The 64 bytes of a stand-in IPC handle and the *envelope* they name,
//! shared by legacy IPC of memory (`ipc.rs`) and of events (`ipc_event.rs`).
//!
//! # How 64 bytes reach another process's object
//!
//! The first `cuIpcGet*Handle` of an object exports it with the simulator
//! (open to anyone), writes that export's handle text into a small sealed
//! memfd, the *envelope*, and registers the envelope with this process's
//! descriptor broker (`hal_core::Exported`). Both exports live as long as
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

use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt as _;

use hal_core::export::{new_handle, HandleSpec};
use hal_core::vendor::{cuda, Code};
use hal_core::{
    os, BackendId, ExportOptions, Exported, FdSource, Handle, HandleKind, Importers, Location,
    SharedHandle,
};

use crate::error::sim;

/// The first bytes of a stand-in IPC handle.
const MAGIC: [u8; 4] = *b"HLCI";
/// The layout's version.
const VERSION: u8 = 1;
/// The most bytes an envelope holds (a handle's text is far shorter).
const MAX_ENVELOPE: u64 = 4096;

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
    pub(crate) pid: u32,
    pub(crate) start: u64,
    pub(crate) pid_ns: u64,
    pub(crate) broker: [u8; 8],
    pub(crate) object_id: [u8; 16],
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
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..20].copy_from_slice(&self.start.to_le_bytes());
        b[20..28].copy_from_slice(&self.pid_ns.to_le_bytes());
        b[28..36].copy_from_slice(&self.broker);
        b[36..52].copy_from_slice(&self.object_id);
        b[52..60].copy_from_slice(&self.id.to_le_bytes());
        let sum = fnv1a(&b[..60]);
        b[60..64].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// The fields of `b`; `CUDA_ERROR_INVALID_VALUE` for bytes this layout
    /// did not write.
    pub(crate) fn decode(b: &[u8; 64]) -> Result<Wire, Code> {
        let u64_at = |i: usize| {
            let mut v = [0u8; 8];
            v.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(v)
        };
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
        let mut pid = [0u8; 4];
        pid.copy_from_slice(&b[8..12]);
        let mut broker = [0u8; 8];
        broker.copy_from_slice(&b[28..36]);
        let mut object_id = [0u8; 16];
        object_id.copy_from_slice(&b[36..52]);
        Ok(Wire {
            names,
            pid: u32::from_le_bytes(pid),
            start: u64_at(12),
            pid_ns: u64_at(20),
            broker,
            object_id,
            id: u64_at(52),
        })
    }

    /// True when this process wrote the handle.
    pub(crate) fn is_own(&self) -> bool {
        let (pid, start) = os::self_identity();
        (self.pid, self.start, self.pid_ns) == (pid, start, os::pid_namespace())
    }

    /// The broker's name.
    fn broker_name(&self) -> String {
        format!("hal-{}-{}", self.pid, os::hex(&self.broker))
    }

    /// The envelope's handle, as the exporter's broker needs it: the
    /// object id, the broker, and the creator it checks the broker against.
    fn envelope_handle(&self) -> Handle {
        Handle {
            kind: HandleKind::Memory,
            backend: BackendId::MockCuda,
            device: 0,
            device_uuid: [0; 16],
            location: Location::Host,
            size: 0,
            offset: 0,
            address: 0,
            creator_pid: self.pid,
            creator_start: self.start,
            creator_pid_ns: self.pid_ns,
            object_id: self.object_id,
            flags: hal_core::HandleFlags::ANY_IMPORTER,
            pid_kind: hal_core::PidKind::Os,
            allowed_pids: Vec::new(),
            fds: FdSource::Broker {
                count: 1,
                name: self.broker_name(),
            },
            payload: Vec::new(),
        }
    }
}

/// The 8 bytes of a broker name `hal-<pid>-<16 hex digits>`.
fn broker_suffix(name: &str, pid: u32) -> Option<[u8; 8]> {
    let hex = name.strip_prefix(&format!("hal-{pid}-"))?;
    if hex.len() != 16 {
        return None;
    }
    let mut out = [0u8; 8];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A sealed memfd holding `text`.
fn envelope_fd(text: &str) -> Result<OwnedFd, Code> {
    let fd = sim(os::memfd("hal-libcuda-ipc", 0, None))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(text.as_bytes())
        .map_err(|_| cuda::OUT_OF_MEMORY)?;
    let fd = OwnedFd::from(file);
    sim(os::add_seals(
        fd.as_fd(),
        seals::SEAL | seals::SHRINK | seals::GROW | seals::WRITE,
    ))?;
    Ok(fd)
}

/// The `F_SEAL_*` bits (`fcntl.h`).
mod seals {
    pub(super) const SEAL: i32 = 0x0001;
    pub(super) const SHRINK: i32 = 0x0002;
    pub(super) const GROW: i32 = 0x0004;
    pub(super) const WRITE: i32 = 0x0008;
}

/// The text an envelope holds.
fn read_envelope(fd: OwnedFd) -> Result<String, Code> {
    let file = std::fs::File::from(fd);
    let len = file.metadata().map_err(|_| cuda::INVALID_VALUE)?.len();
    if len > MAX_ENVELOPE {
        return Err(cuda::INVALID_VALUE);
    }
    let mut buf = vec![0u8; usize::try_from(len).map_err(|_| cuda::INVALID_VALUE)?];
    file.read_exact_at(&mut buf, 0)
        .map_err(|_| cuda::INVALID_VALUE)?;
    String::from_utf8(buf).map_err(|_| cuda::INVALID_VALUE)
}

/// Seal `text` (a simulator export's handle) of device `ordinal` into an
/// envelope registered with this process's broker: the envelope, kept as
/// long as the object, and the 64 bytes naming it.
pub(crate) fn seal(
    text: &str,
    names: Names,
    ordinal: u32,
    uuid: [u8; 16],
    id: u64,
) -> Result<(Exported, [u8; 64]), Code> {
    let opts = ExportOptions {
        importers: Importers::Anyone,
        ..ExportOptions::default()
    };
    let spec = HandleSpec {
        kind: HandleKind::Memory,
        backend: BackendId::MockCuda,
        device: ordinal,
        device_uuid: uuid,
        location: Location::Host,
        default_allow_list: false,
    };
    let mut handle = sim(new_handle(&spec, &opts))?;
    handle.size = text.len() as u64;
    let envelope = sim(Exported::new(handle, vec![envelope_fd(text)?]))?;
    let h = envelope.handle();
    // Without a broker (sockets forbidden) the envelope cannot be fetched.
    let FdSource::Broker { name, .. } = &h.fds else {
        return Err(cuda::UNKNOWN);
    };
    let broker = broker_suffix(name, h.creator_pid).ok_or(cuda::UNKNOWN)?;
    let wire = Wire {
        names,
        pid: h.creator_pid,
        start: h.creator_start,
        pid_ns: h.creator_pid_ns,
        broker,
        object_id: h.object_id,
        id,
    };
    Ok((envelope, wire.encode()))
}

/// The simulator handle inside the envelope `wire` names.
pub(crate) fn open(wire: &Wire) -> Result<Handle, Code> {
    let mut envelope = SharedHandle::from(wire.envelope_handle());
    let fd = sim(hal_core::exchange::take_fds(&mut envelope))?
        .into_iter()
        .next()
        .ok_or(cuda::INVALID_VALUE)?;
    Handle::from_text(&read_envelope(fd)?).map_err(|_| cuda::INVALID_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire() -> Wire {
        Wire {
            names: Names::Memory,
            pid: 4242,
            start: 99,
            pid_ns: 4026531836,
            broker: [1, 2, 3, 4, 5, 6, 7, 0xab],
            object_id: [9; 16],
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
    fn the_broker_name_round_trips() {
        let w = wire();
        assert_eq!(w.broker_name(), "hal-4242-01020304050607ab");
        assert_eq!(broker_suffix(&w.broker_name(), 4242), Some(w.broker));
        assert_eq!(broker_suffix("hal-4242-0102", 4242), None);
        assert_eq!(broker_suffix(&w.broker_name(), 4243), None);
        assert_eq!(broker_suffix("hal-4242-zz02030405060708", 4242), None);
    }
}
