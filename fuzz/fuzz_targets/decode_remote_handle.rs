//! Fuzz the remote handle's decoders: `RemoteHandle::from_bytes` on the
//! input, `RemoteHandle::from_text` on the input's text form and on the
//! input itself when it is UTF-8. Any input decodes or gives an error, never
//! a panic; what decodes round-trips through both forms and re-encodes to
//! the input; the text of an input decodes exactly as the input does when
//! the input is within `MAX_REMOTE_ENCODED_LEN`.

#![no_main]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hal_core::handle::remote::{RemoteHandle, MAX_REMOTE_ENCODED_LEN, REMOTE_TEXT_PREFIX};
use hal_core::HandleError;
use libfuzzer_sys::fuzz_target;

fn decode(bytes: &[u8]) -> Result<RemoteHandle, HandleError> {
    let decoded = RemoteHandle::from_bytes(bytes);
    if let Ok(h) = &decoded {
        assert_eq!(h.to_bytes(), bytes);
        assert_eq!(RemoteHandle::from_text(&h.to_text()).as_ref(), Ok(h));
        assert!(h.base.checked_add(h.size).is_some());
        assert_ne!(h.listener.port(), 0);
    }
    decoded
}

fuzz_target!(|data: &[u8]| {
    let decoded = decode(data);
    let text = format!("{REMOTE_TEXT_PREFIX}{}", URL_SAFE_NO_PAD.encode(data));
    let from_text = RemoteHandle::from_text(&text);
    if data.len() <= MAX_REMOTE_ENCODED_LEN {
        assert_eq!(from_text, decoded);
    } else {
        assert!(from_text.is_err() && decoded.is_err());
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(h) = RemoteHandle::from_text(text) {
            assert_eq!(RemoteHandle::from_text(&h.to_text()), Ok(h));
        }
    }
    // The input with its last four bytes made the right checksum, so that
    // the checks after the checksum see mutated fields too.
    if let Some(body) = data.len().checked_sub(4) {
        let mut sealed = data.to_vec();
        let crc = crc32fast::hash(&sealed[..body]);
        sealed[body..].copy_from_slice(&crc.to_le_bytes());
        let _ = decode(&sealed);
    }
});
