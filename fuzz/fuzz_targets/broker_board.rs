//! Fuzz an importer's reading of an exporter's direct-import board
//! (`hal_core::fuzzing::broker_board`): the input is an object id, the
//! board's header and the entries from the id's home entry on. The
//! header is checked, the id's entry looked up and read whole, and checked
//! again for being live: any bytes give a reading or a refusal, never a
//! panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = hal_core::fuzzing::broker_board(data);
});
