//! Fuzz the decoder of the messages a node receives from other hosts
//! (hal-ucx's protocol): any input decodes or is refused, never a panic,
//! and what decodes re-encodes to the input.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hal_ucx::fuzzing::check_message(data);
});
