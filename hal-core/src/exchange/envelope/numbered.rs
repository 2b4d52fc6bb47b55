//! Envelopes named by a single `u64`, for vendor handles that are a bare
//! number (Ascend's VMM shareable handle, `aclrtMemExportToShareableHandle`).
//!
//! An [`EnvelopeRef`] is 44 bytes; a `u64` holds only the exporter's pid
//! (high 32 bits) and a number the exporter chose (low 32 bits, never 0).
//! The rest is found from those two:
//!
//! - the envelope is registered under an object id made from the whole
//!   `u64` ([`object_id`]), so the number alone names it at the broker;
//! - the exporter's broker is the abstract socket `hal-<pid>-<16 hex>`
//!   that `/proc/net/unix` lists (abstract names are only reachable in the
//!   same network namespace, where that file lists them); the broker
//!   client checks that whoever answers on it *is* that pid, so a squatter
//!   who binds a look-alike name is refused;
//! - the exporter's start time is read from `/proc/<pid>/stat`, and its
//!   pid namespace is the importer's own (a pid is meaningful only there).
//!
//! The envelope is open to anyone, as every envelope is: guessing a number
//! yields only the handle text, and the object inside keeps its own
//! allow-list, which its broker checks when its descriptors are fetched.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use super::{broker_suffix, EnvelopeRef};
use crate::error::{Error, Result};
use crate::kit::os;
use crate::types::BackendId;
use crate::Exported;

/// The first 8 bytes of the object id of a numbered envelope.
const MAGIC: [u8; 8] = *b"hal-u64:";

/// The object id of the envelope `number` names.
pub fn object_id(number: u64) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&MAGIC);
    id[8..].copy_from_slice(&number.to_le_bytes());
    id
}

/// The exporter's pid that `number` carries.
pub fn pid_of(number: u64) -> u32 {
    (number >> 32) as u32
}

/// A fresh number of this process: its pid, and a counter that starts at
/// a random value, skipping 0 (so no number is 0).
fn next_number() -> u64 {
    static BASE: OnceLock<u32> = OnceLock::new();
    static COUNT: AtomicU32 = AtomicU32::new(0);
    let base = *BASE.get_or_init(|| {
        let seed = os::random_id();
        u32::from_le_bytes([seed[0], seed[1], seed[2], seed[3]])
    });
    let low = loop {
        let low = base.wrapping_add(COUNT.fetch_add(1, Ordering::Relaxed));
        if low != 0 {
            break low;
        }
    };
    (u64::from(os::pid()) << 32) | u64::from(low)
}

/// Seal `text` into an envelope registered with this process's broker,
/// open to anyone, named by the returned number: the envelope (keep it as
/// long as the number is valid) and the number. [`Error::Unsupported`]
/// where no broker can run.
pub fn seal(text: &str, backend: BackendId) -> Result<(Exported, u64)> {
    let number = next_number();
    let (envelope, _) = super::seal_as(text, backend, Some(object_id(number)))?;
    Ok((envelope, number))
}

/// The broker suffixes (`hal-<pid>-<these 8 bytes>`) that `/proc/net/unix`
/// lists for process `pid`.
pub fn brokers_of(pid: u32) -> Vec<[u8; 8]> {
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return Vec::new();
    };
    table
        .lines()
        .filter_map(|line| line.split_ascii_whitespace().last())
        .filter_map(|path| path.strip_prefix('@'))
        .filter_map(|name| broker_suffix(name, pid))
        .collect()
}

/// The text inside the envelope `number` names, fetched from its
/// exporter's broker; [`Error::InvalidArgument`] when no live process of
/// that pid runs a broker that holds it.
pub fn open(number: u64, backend: BackendId) -> Result<String> {
    let pid = pid_of(number);
    let gone = |why: &str| {
        Error::invalid(format!(
            "the shareable handle {number:#x} names no envelope ({why}): its exporter (pid \
             {pid}) exited or released it, or runs in another pid or network namespace"
        ))
    };
    if number as u32 == 0 || pid == 0 {
        return Err(gone("no such number"));
    }
    let start = os::process_start_time(pid).ok_or_else(|| gone("no such process"))?;
    let mut last = gone("the process has no descriptor broker");
    for broker in brokers_of(pid) {
        let r = EnvelopeRef {
            pid,
            start,
            pid_ns: os::pid_namespace(),
            broker,
            object_id: object_id(number),
        };
        match super::open(&r, backend) {
            Ok(text) => return Ok(text),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_numbered_envelope_opens_to_its_text() {
        let (kept, n) = seal("numbered text", BackendId::MockAscend).unwrap();
        assert_eq!(pid_of(n), os::pid());
        assert_ne!(n as u32, 0);
        assert_eq!(open(n, BackendId::MockAscend).unwrap(), "numbered text");
        let (_other, m) = seal("other", BackendId::MockAscend).unwrap();
        assert_ne!(n, m, "numbers are not reused");
        assert_eq!(open(m, BackendId::MockAscend).unwrap(), "other");
        assert!(open(n ^ 0x8000_0000, BackendId::MockAscend).is_err());
        drop(kept);
        assert!(open(n, BackendId::MockAscend).is_err(), "released");
    }

    #[test]
    fn a_number_of_no_process_is_refused() {
        assert!(open(0, BackendId::MockAscend).is_err());
        assert!(open((0x7fff_fff0u64 << 32) | 5, BackendId::MockAscend).is_err());
    }

    #[test]
    fn this_process_broker_is_listed() {
        let (_kept, r) = super::super::seal("x", BackendId::MockAscend).unwrap();
        assert!(brokers_of(os::pid()).contains(&r.broker));
        assert!(brokers_of(0x7fff_fff0).is_empty());
    }
}
