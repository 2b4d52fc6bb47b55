//! Fuzz the decoder of a group's name file (`hal_core::fuzzing::group_record`):
//! any bytes decode or are refused, never a panic; a name that decodes
//! re-encodes to a name of the input's length that keeps its header
//! (magic, version, shape, the board's identity), and that encoding
//! decodes to itself.

#![no_main]

use hal_core::fuzzing::group_record;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(encoded) = group_record(data) {
        assert_eq!(encoded.len(), data.len());
        assert_eq!(encoded[..32], data[..32]);
        assert_eq!(group_record(&encoded).as_ref(), Ok(&encoded));
    }
});
