//! Fuzz a member's reading of a group's board
//! (`hal_core::fuzzing::group_board`): the input is the board's first
//! bytes. Its header is checked, and a board whose header states a group
//! is mapped and read (every slot's member, state, round and payloads):
//! any bytes give a reading or a refusal, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = hal_core::fuzzing::group_board(data);
});
