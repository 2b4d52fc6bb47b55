//! Fuzz the decoder of the messages between a channel's publisher side and
//! its remote subscribers (hal-ucx's channels across hosts): any input
//! decodes or is refused, never a panic, and what decodes re-encodes to
//! the input.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hal_ucx::fuzzing::check_channel_message(data);
});
