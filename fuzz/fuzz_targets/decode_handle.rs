//! Fuzz the handle decoders: any input must decode or give an error, never
//! panic; whatever decodes must be canonical (version 2 bytes re-encode to
//! themselves, version 1 bytes to their version 2 form) and survive a round
//! trip. The same input goes to the tensor handle's decoder, with the same
//! promises (its embedded memory handle follows the memory handle's rules),
//! and its text form decodes as it does (over the binary form's bound, both
//! forms are refused, each with its own bound).

#![no_main]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hal_core::dlpack::{
    TensorHandle, MAX_TENSOR_ENCODED_LEN, MAX_TENSOR_TEXT_LEN, TENSOR_TEXT_PREFIX,
};
use hal_core::handle::wire::{FIXED_LEN, FIXED_LEN_V1, MAX_ENCODED_LEN, TEXT_PREFIX};
use hal_core::{Handle, HandleError, PidKind};
use libfuzzer_sys::fuzz_target;

/// A decoded handle re-encodes to a handle that decodes to itself.
fn round_trip(h: &Handle) {
    assert_eq!(h.validate(), Ok(()));
    assert_eq!(Handle::from_bytes(&h.to_bytes()).as_ref(), Ok(h));
    assert_eq!(Handle::from_text(&h.to_text()).as_ref(), Ok(h));
}

/// What the wire format promises an accepted input re-encodes to: version
/// 2 bytes to themselves; version 1 bytes to the version 2 encoding with the
/// new fields at their defaults (creator pid namespace 0, pid kind 0)
/// inserted after the flags, and the checksum recomputed.
fn canonical(bytes: &[u8]) -> Vec<u8> {
    if bytes[4] != 1 {
        return bytes.to_vec();
    }
    let mut v2 = bytes[..bytes.len() - 4].to_vec();
    v2[4] = 2;
    v2.splice(FIXED_LEN_V1..FIXED_LEN_V1, [0; FIXED_LEN - FIXED_LEN_V1]);
    let crc = crc32fast::hash(&v2);
    v2.extend_from_slice(&crc.to_le_bytes());
    v2
}

/// Decode `bytes`; an accepted input is exactly the encoding of its handle
/// (after the upgrade of a version 1 input).
fn decode_bytes(bytes: &[u8]) -> Result<Handle, hal_core::HandleError> {
    let decoded = Handle::from_bytes(bytes);
    if let Ok(h) = &decoded {
        round_trip(h);
        if bytes[4] == 1 {
            assert_eq!((h.pid_kind, h.creator_pid_ns), (PidKind::Os, 0));
        }
        assert_eq!(h.to_bytes(), canonical(bytes));
    }
    decoded
}

/// Decode `bytes` as a tensor handle; an accepted input round-trips, and
/// re-encodes to itself when its memory handle is of version 2.
fn decode_tensor(bytes: &[u8]) -> Result<TensorHandle, hal_core::HandleError> {
    let decoded = TensorHandle::from_bytes(bytes);
    if let Ok(t) = &decoded {
        round_trip(&t.memory);
        assert_eq!(TensorHandle::from_bytes(&t.to_bytes()).as_ref(), Ok(t));
        assert_eq!(TensorHandle::from_text(&t.to_text()).as_ref(), Ok(t));
        if bytes[7 + 4] == 2 {
            assert_eq!(t.to_bytes(), bytes);
        }
    }
    decoded
}

/// The text form of `bytes` decodes exactly as `bytes` when they are
/// within the binary form's bound; over it, each decoder refuses with its
/// own bound (the text's is the base64 of the binary one, so a text is over
/// its bound exactly when its bytes are over theirs; see
/// `TensorHandle::from_text`).
fn tensor_text_agrees(bytes: &[u8], decoded: &Result<TensorHandle, hal_core::HandleError>) {
    let text = format!("{TENSOR_TEXT_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    let from_text = TensorHandle::from_text(&text);
    if bytes.len() <= MAX_TENSOR_ENCODED_LEN {
        assert_eq!(&from_text, decoded);
        assert!(text.len() <= MAX_TENSOR_TEXT_LEN);
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
            &Err(HandleError::OverBound {
                field: "tensor handle",
                len: bytes.len(),
                max: MAX_TENSOR_ENCODED_LEN
            })
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let tensor = decode_tensor(data);
    tensor_text_agrees(data, &tensor);

    let decoded = decode_bytes(data);

    // The input as a text handle.
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(h) = Handle::from_text(text) {
            round_trip(&h);
        }
    }

    // The input in the text form decodes exactly as the input itself.
    if data.len() <= MAX_ENCODED_LEN {
        let text = format!("{TEXT_PREFIX}{}", URL_SAFE_NO_PAD.encode(data));
        assert_eq!(Handle::from_text(&text), decoded);
    }

    // The input with its last four bytes replaced by the right checksum, so
    // that the checks after the checksum see mutated fields too.
    if let Some(body) = data.len().checked_sub(4) {
        let mut sealed = data.to_vec();
        let crc = crc32fast::hash(&sealed[..body]);
        sealed[body..].copy_from_slice(&crc.to_le_bytes());
        let _ = decode_bytes(&sealed);
        let _ = decode_tensor(&sealed);
    }
});
