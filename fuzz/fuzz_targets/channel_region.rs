//! Fuzz a subscriber's reading of a channel's control region
//! (`hal_core::fuzzing::channel_region`): the input is the region's length
//! (8 bytes) and its first bytes. Its head is checked, and a region whose
//! head states a channel is mapped and read whole (handle texts, the
//! publisher, slots, subscribers): any bytes give a reading or a refusal,
//! never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = hal_core::fuzzing::channel_region(data);
});
