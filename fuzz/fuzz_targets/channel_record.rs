//! Fuzz the decoder of a channel's name file (`hal_core::fuzzing::channel_record`):
//! any bytes decode or are refused, never a panic; a record that decodes
//! re-encodes to the input, save the four bytes after the flags that the
//! record does not use (written as zeros), and its encoding decodes to
//! itself.

#![no_main]

use hal_core::fuzzing::channel_record;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(encoded) = channel_record(data) {
        assert_eq!(encoded.len(), data.len());
        assert_eq!(encoded[..60], data[..60]);
        assert_eq!(encoded[60..], [0; 4]);
        assert_eq!(channel_record(&encoded).as_ref(), Ok(&encoded));
    }
});
