//! The parameters of the PostgreSQL check and benchmark.

use std::time::Duration;

/// Sessions that write and read the buffer at once.
pub(super) const SESSIONS: usize = 16;
/// Bytes of each session's slice.
pub(super) const SLICE: usize = 64 * 1024;
/// The buffer's size, MiB.
pub(super) const SIZE_MB: u64 = 16;
/// How long a step may wait for the server.
pub(super) const PATIENCE: Duration = Duration::from_secs(60);
