//! The runtime's keys: 64 printable characters and a NUL (65 bytes, the
//! length of a key buffer) that name an *envelope* holding the simulator
//! export's handle text (`hal_core::exchange::envelope`). Another process's
//! runtime (this build) reads the envelope's name out of the key alone,
//! fetches it from the exporter's descriptor broker, and opens the object
//! with the simulator. An IPC event handle carries the same 64 characters
//! in its 64 bytes.
//!
//! The characters are the URL-safe base64 (no padding) of 48 bytes:
//!
//! | bytes | field |
//! | ---: | --- |
//! | 0 | `A` |
//! | 1 | version 1 (high nibble), what the key names (low nibble: 0 memory, 1 a notify, 2 an event) |
//! | 2..46 | the envelope's name ([`EnvelopeRef::to_bytes`]) |
//! | 46..48 | FNV-1a of bytes 0..46, folded to 16 bits |

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hal_core::exchange::envelope::{self, EnvelopeRef};
use hal_core::kit::vendor::acl;
use hal_core::{BackendId, Exported, Handle};

use crate::error::sim;
use crate::refusal::{refuse, Refusal};

/// The bytes of a key buffer: 64 characters and a NUL.
pub const KEY_LEN: usize = 65;
/// The characters of a key.
pub(crate) const KEY_CHARS: usize = 64;
/// Bytes under the characters.
const RAW: usize = 48;
const VERSION: u8 = 1;

/// What a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Names {
    Memory = 0,
    Notify = 1,
    Event = 2,
}

/// FNV-1a folded to 16 bits.
fn check(bytes: &[u8]) -> u16 {
    let h = bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    ((h >> 16) ^ (h & 0xffff)) as u16
}

/// The key's characters for `names` and the envelope `r`.
pub(crate) fn encode(names: Names, r: &EnvelopeRef) -> String {
    let mut b = [0u8; RAW];
    b[0] = b'A';
    b[1] = (VERSION << 4) | names as u8;
    b[2..46].copy_from_slice(&r.to_bytes());
    let sum = check(&b[..46]);
    b[46..48].copy_from_slice(&sum.to_le_bytes());
    URL_SAFE_NO_PAD.encode(b)
}

/// What the characters `key` say; `ACL_ERROR_RT_PARAM_INVALID` for
/// characters this layout did not write or a key of another kind.
pub(crate) fn decode(key: &str, want: Names) -> Result<EnvelopeRef, Refusal> {
    let bad = || {
        refuse(
            acl::RT_PARAM_INVALID,
            format!("`{key}` is not a key of this runtime"),
        )
    };
    if key.len() != KEY_CHARS {
        return Err(bad());
    }
    let b = URL_SAFE_NO_PAD.decode(key).map_err(|_| bad())?;
    if b.len() != RAW || b[0] != b'A' || b[1] >> 4 != VERSION {
        return Err(bad());
    }
    let mut sum = [0u8; 2];
    sum.copy_from_slice(&b[46..48]);
    if u16::from_le_bytes(sum) != check(&b[..46]) {
        return Err(bad());
    }
    if b[1] & 0xf != want as u8 {
        return Err(refuse(
            acl::RT_PARAM_INVALID,
            format!("`{key}` names another kind of object"),
        ));
    }
    let mut r = [0u8; EnvelopeRef::LEN];
    r.copy_from_slice(&b[2..46]);
    Ok(EnvelopeRef::from_bytes(&r))
}

/// Seal the simulator export `inner` into an envelope: the envelope (kept
/// as long as the key) and the key's characters.
pub(crate) fn seal(inner: &Exported, names: Names) -> Result<(Exported, String), Refusal> {
    let (envelope, r) = sim(envelope::seal(&inner.to_text(), BackendId::MockAscend))?;
    Ok((envelope, encode(names, &r)))
}

/// The simulator handle the key `key` names.
pub(crate) fn open(key: &str, want: Names) -> Result<Handle, Refusal> {
    let r = decode(key, want)?;
    let text = envelope::open(&r, BackendId::MockAscend).map_err(|e| {
        refuse(
            acl::RT_PARAM_INVALID,
            format!("the key's exporter does not serve it (closed, or gone): {e}"),
        )
    })?;
    Handle::from_text(&text).map_err(|e| refuse(acl::RT_PARAM_INVALID, e.to_string()))
}

/// The key in the C string at `key`: its characters up to the NUL.
///
/// # Safety
///
/// `key` is null or points to a NUL-terminated string.
pub(crate) unsafe fn read(key: *const std::ffi::c_char) -> Result<String, Refusal> {
    crate::abi::non_null(key, "the key")?;
    // SAFETY: not null and NUL-terminated (this fn's contract).
    let s = unsafe { std::ffi::CStr::from_ptr(key) };
    s.to_str()
        .map(str::to_owned)
        .map_err(|_| refuse(acl::RT_PARAM_INVALID, "a key that is not text"))
}

/// Write `key` and its NUL into the caller's buffer of `len` bytes.
///
/// # Safety
///
/// `out` is null or valid for `len` bytes of writes.
pub(crate) unsafe fn write(
    out: *mut std::ffi::c_char,
    len: usize,
    key: &str,
) -> Result<(), Refusal> {
    crate::abi::non_null(out, "the key buffer")?;
    if len < KEY_LEN {
        return Err(refuse(
            acl::INVALID_PARAM,
            format!("a key buffer of {len} bytes: keys need {KEY_LEN}"),
        ));
    }
    let bytes = key.as_bytes();
    // SAFETY: `out` is valid for `len >= 65` bytes (this fn's contract) and
    // a key is 64 bytes, so the key and its NUL fit.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), bytes.len());
        out.add(bytes.len()).write(0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> EnvelopeRef {
        EnvelopeRef {
            pid: 4242,
            start: 99,
            pid_ns: 4026531836,
            broker: [1, 2, 3, 4, 5, 6, 7, 0xab],
            object_id: [9; 16],
        }
    }

    #[test]
    fn keys_are_64_printable_characters_that_round_trip() {
        for names in [Names::Memory, Names::Notify, Names::Event] {
            let k = encode(names, &sample());
            assert_eq!(k.len(), KEY_CHARS);
            assert!(k.bytes().all(|c| c.is_ascii_graphic()), "{k}");
            assert_eq!(decode(&k, names).unwrap(), sample());
        }
        let k = encode(Names::Memory, &sample());
        assert!(decode(&k, Names::Notify).is_err(), "another kind");
        for i in 0..k.len() {
            let mut bad = k.clone().into_bytes();
            bad[i] = if bad[i] == b'B' { b'C' } else { b'B' };
            let bad = String::from_utf8(bad).unwrap();
            assert!(decode(&bad, Names::Memory).is_err(), "char {i}");
        }
        assert!(decode(&k[1..], Names::Memory).is_err());
    }
}
