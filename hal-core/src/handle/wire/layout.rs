//! The wire format's constants: magic, versions, field bounds and the
//! lengths they give; the layout itself is in the module documentation of
//! [`wire`](super).

/// The first four bytes of every binary handle.
pub const MAGIC: [u8; 4] = *b"\x89HAL";
/// The wire version this build writes, and the newest it reads.
pub const VERSION: u8 = 2;
/// The oldest wire version this build reads.
pub const OLDEST_VERSION: u8 = 1;
/// The start of every text handle.
pub const TEXT_PREFIX: &str = "hal1.";
/// The start of every tensor handle's text
/// ([`TensorHandle`](crate::dlpack::TensorHandle)): kept beside
/// [`TEXT_PREFIX`] so that each decoder tells the other's text apart.
pub const TENSOR_TEXT_PREFIX: &str = "hal1t.";
/// Most pids in an allow-list.
pub const MAX_PIDS: usize = 64;
/// Most bytes of vendor payload.
pub const MAX_PAYLOAD: usize = 256;
/// Longest broker socket name: a Unix socket path holds 108 bytes, and an
/// abstract name spends the first on its leading NUL.
pub const MAX_SOCKET_NAME: usize = 107;
/// Length of the fixed fields of version 2, magic to pid kind.
pub const FIXED_LEN: usize = FIXED_LEN_V1 + 8 + 1;
/// Length of the shortest version 2 encoding: no pids, no descriptors, no
/// payload.
pub const MIN_ENCODED_LEN: usize = FIXED_LEN + VARIABLE_MIN;
/// Length of the longest version 2 encoding: every variable field at its
/// bound. No encoding of any version this build reads is longer.
pub const MAX_ENCODED_LEN: usize = FIXED_LEN + VARIABLE_MAX;
/// Length of the fixed fields of version 1, magic to flags.
pub const FIXED_LEN_V1: usize = 89;
/// Length of the shortest version 1 encoding. No encoding of any version
/// this build reads is shorter.
pub const MIN_ENCODED_LEN_V1: usize = FIXED_LEN_V1 + VARIABLE_MIN;
/// Length of the longest version 1 encoding.
pub const MAX_ENCODED_LEN_V1: usize = FIXED_LEN_V1 + VARIABLE_MAX;
/// Length of the longest text form (of the longest encoding, version 2).
pub const MAX_TEXT_LEN: usize = TEXT_PREFIX.len() + base64_len(MAX_ENCODED_LEN);

/// Bytes after the fixed fields, at the least: pid count, fd tag, payload
/// length, checksum.
pub(crate) const VARIABLE_MIN: usize = 1 + 1 + 2 + 4;
/// Bytes after the fixed fields, at the most.
pub(crate) const VARIABLE_MAX: usize = 1 + 4 * MAX_PIDS + 3 + MAX_SOCKET_NAME + 2 + MAX_PAYLOAD + 4;

/// Fd tag: no descriptors.
pub(crate) const FD_NONE: u8 = 0;
/// Fd tag: descriptors travel beside the handle.
pub(crate) const FD_ATTACHED: u8 = 1;
/// Fd tag: descriptors are served by a broker socket.
pub(crate) const FD_BROKER: u8 = 2;

/// Characters of unpadded base64 for `n` bytes.
pub(crate) const fn base64_len(n: usize) -> usize {
    (n * 4).div_ceil(3)
}

/// At most `max` leading items of `items`.
pub(crate) fn clamp<T>(items: &[T], max: usize) -> &[T] {
    items.get(..max).unwrap_or(items)
}
