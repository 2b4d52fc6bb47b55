//! Fuzz the decoder of the messages of a group across hosts (hal-ucx's
//! group rendezvous): the first byte is the head's length, then the head,
//! then the body. Any input decodes or is refused, never a panic, and
//! what decodes re-encodes to the input.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hal_ucx::fuzzing::check_group_message(data);
});
