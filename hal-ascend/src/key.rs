//! A key as the runtime writes it: up to 64 characters and a NUL in a
//! 65-byte buffer, carried whole in a handle's payload. The length is the
//! runtime documentation's (memory keys: 65; notify keys: at least 65); the
//! public headers have no constant for it.

use std::ffi::{c_char, CStr, CString};

use hal_core::{HandleError, Result};

/// Bytes of a key buffer (the runtime documentation's length).
pub(crate) const KEY_LEN: usize = 65;

/// A fresh key buffer.
pub(crate) fn buffer() -> [c_char; KEY_LEN] {
    [0; KEY_LEN]
}

/// The key the runtime wrote into `buf`, and the 65 payload bytes.
pub(crate) fn from_buffer(buf: &[c_char; KEY_LEN]) -> Result<(CString, Vec<u8>)> {
    let bytes: Vec<u8> = buf.iter().map(|&c| c as u8).collect();
    let key = CStr::from_bytes_until_nul(&bytes)
        .map_err(|_| hal_core::Error::invalid("the runtime wrote a key without its NUL"))?;
    Ok((key.to_owned(), bytes))
}

/// The key in a handle's payload (65 bytes, NUL-terminated).
pub(crate) fn from_payload(payload: &[u8]) -> Result<CString> {
    let malformed = |detail: String| -> hal_core::Error {
        HandleError::Malformed {
            field: "payload",
            detail,
        }
        .into()
    };
    if payload.len() != KEY_LEN {
        return Err(malformed(format!(
            "an Ascend key is {KEY_LEN} bytes, this one {}",
            payload.len()
        )));
    }
    let key = CStr::from_bytes_until_nul(payload)
        .map_err(|_| malformed("an Ascend key without its NUL".into()))?;
    if key.is_empty() {
        return Err(malformed("an empty Ascend key".into()));
    }
    Ok(key.to_owned())
}

/// Importer ids as the runtime takes them (`int32_t` bare tgids).
pub(crate) fn tgids(pids: &[u32]) -> Result<Vec<i32>> {
    pids.iter()
        .map(|&p| {
            i32::try_from(p)
                .ok()
                .filter(|&t| t > 0)
                .ok_or_else(|| hal_core::Error::invalid(format!("{p} is no bare tgid")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_payloads() {
        let mut buf = buffer();
        for (i, c) in b"abc".iter().enumerate() {
            buf[i] = *c as c_char;
        }
        let (k, payload) = from_buffer(&buf).unwrap();
        assert_eq!(k.as_bytes(), b"abc");
        assert_eq!(payload.len(), 65);
        assert_eq!(from_payload(&payload).unwrap(), k);
        assert!(from_payload(&payload[1..]).is_err());
        assert!(from_payload(&[0u8; 65]).is_err());
        assert!(from_payload(&[b'a'; 65]).is_err());
        assert!(tgids(&[0]).is_err() && tgids(&[u32::MAX]).is_err());
    }
}
