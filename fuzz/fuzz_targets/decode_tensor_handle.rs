//! Fuzz the tensor handle's decoders: `TensorHandle::from_bytes` on the
//! input, `TensorHandle::from_text` on the input's text form and on the
//! input itself when it is UTF-8. Any input decodes or gives an error, never
//! a panic; what decodes round-trips through both forms, and re-encodes to
//! the input when its memory handle is of wire version 2. The text form of
//! an input decodes exactly as the input when the input is within
//! `MAX_TENSOR_ENCODED_LEN`; over it, both forms are refused, each with
//! its own bound (`TensorHandle::from_text` says why they agree).

#![no_main]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hal_core::dlpack::{
    TensorHandle, MAX_TENSOR_ENCODED_LEN, MAX_TENSOR_TEXT_LEN, TENSOR_TEXT_PREFIX,
};
use hal_core::HandleError;
use libfuzzer_sys::fuzz_target;

/// Decode `bytes`; an accepted input round-trips through both forms.
fn decode(bytes: &[u8]) -> Result<TensorHandle, HandleError> {
    let decoded = TensorHandle::from_bytes(bytes);
    if let Ok(t) = &decoded {
        assert_eq!(t.memory.validate(), Ok(()));
        assert_eq!(TensorHandle::from_bytes(&t.to_bytes()).as_ref(), Ok(t));
        assert_eq!(TensorHandle::from_text(&t.to_text()).as_ref(), Ok(t));
        // The memory handle's version byte: after magic, version and its length.
        if bytes[7 + 4] == 2 {
            assert_eq!(t.to_bytes(), bytes);
        }
    }
    decoded
}

fuzz_target!(|data: &[u8]| {
    let decoded = decode(data);

    let text = format!("{TENSOR_TEXT_PREFIX}{}", URL_SAFE_NO_PAD.encode(data));
    let from_text = TensorHandle::from_text(&text);
    if data.len() <= MAX_TENSOR_ENCODED_LEN {
        assert_eq!(from_text, decoded);
        // Whitespace around a text is ignored.
        assert_eq!(TensorHandle::from_text(&format!(" {text}\n")), decoded);
    } else {
        assert_eq!(
            from_text,
            Err(HandleError::OverBound {
                field: "text",
                len: text.len(),
                max: MAX_TENSOR_TEXT_LEN
            })
        );
        assert_eq!(
            decoded,
            Err(HandleError::OverBound {
                field: "tensor handle",
                len: data.len(),
                max: MAX_TENSOR_ENCODED_LEN
            })
        );
    }

    // The input as a text handle.
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(t) = TensorHandle::from_text(text) {
            assert_eq!(TensorHandle::from_text(&t.to_text()), Ok(t));
        }
    }

    // The input with its last four bytes replaced by the right checksum, so
    // that the checks after the checksum see mutated fields too.
    if let Some(body) = data.len().checked_sub(4) {
        let mut sealed = data.to_vec();
        let crc = crc32fast::hash(&sealed[..body]);
        sealed[body..].copy_from_slice(&crc.to_le_bytes());
        let _ = decode(&sealed);
    }
});
