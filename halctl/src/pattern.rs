//! Filling, verifying and reading memory: the byte pattern of the demo, the
//! checksum, and the read-bandwidth passes.
//!
//! Every access goes through [`hal::Memory::read`] and [`hal::Memory::write`],
//! which work on host-visible and device memory alike and stay sound while a
//! peer process writes the same bytes. The one exception is the bandwidth pass
//! over host-visible memory, which reads the mapping in place as a consumer
//! would (see [`read_pass`]).

use std::hint::black_box;

use hal::Memory;

use crate::fail::{CmdResult, Context};

/// Bytes copied per `Memory::read` / `Memory::write` call.
pub const CHUNK: usize = 1 << 20;

/// Word `k` (little-endian u64 at byte offset `8k`) of the pattern `seed`.
pub fn word(seed: u64, k: u64) -> u64 {
    // splitmix64: cheap, and every word differs from its neighbours, so a
    // shifted, repeated or zeroed page is caught.
    let mut z = seed.wrapping_add(k.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Byte `offset` of the pattern `seed`.
pub fn byte(seed: u64, offset: u64) -> u8 {
    word(seed, offset / 8).to_le_bytes()[(offset % 8) as usize]
}

fn chunks(len: u64) -> impl Iterator<Item = (u64, usize)> {
    (0..len)
        .step_by(CHUNK)
        .map(move |off| (off, (len - off).min(CHUNK as u64) as usize))
}

/// What to write or expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// The pseudo-random pattern with this seed.
    Pattern(u64),
    /// Every byte equal to this value.
    Fill(u8),
}

impl Content {
    fn render(self, offset: u64, dst: &mut [u8]) {
        match self {
            Content::Fill(b) => dst.fill(b),
            Content::Pattern(seed) => {
                // Offsets are multiples of CHUNK, so words stay aligned.
                let first = offset / 8;
                for (i, w) in dst.chunks_mut(8).enumerate() {
                    let bytes = word(seed, first + i as u64).to_le_bytes();
                    w.copy_from_slice(&bytes[..w.len()]);
                }
            }
        }
    }

    fn expected(self, offset: u64) -> u8 {
        match self {
            Content::Fill(b) => b,
            Content::Pattern(seed) => byte(seed, offset),
        }
    }
}

/// Write `content` over all of `mem`; returns the CRC-32 of what was written.
pub fn fill(mem: &dyn Memory, content: Content) -> CmdResult<u32> {
    let mut buf = vec![0u8; CHUNK];
    let mut crc = crc32fast::Hasher::new();
    for (off, n) in chunks(mem.len()) {
        let b = &mut buf[..n];
        content.render(off, b);
        crc.update(b);
        mem.write(off, b).ctx("writing the buffer")?;
    }
    Ok(crc.finalize())
}

/// The outcome of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Bytes checked.
    pub bytes: u64,
    /// Bytes that differ from what was expected.
    pub mismatches: u64,
    /// The first differing byte: offset, expected, found.
    pub first_mismatch: Option<(u64, u8, u8)>,
    /// CRC-32 of the bytes read.
    pub crc32: u32,
}

impl Verified {
    /// True when every byte matched.
    pub fn ok(&self) -> bool {
        self.mismatches == 0
    }
}

/// Read all of `mem`, compare every byte with `content` (when given) and
/// compute the CRC-32 of what was read.
pub fn verify(mem: &dyn Memory, content: Option<Content>) -> CmdResult<Verified> {
    let mut buf = vec![0u8; CHUNK];
    let mut want = vec![0u8; CHUNK];
    let mut crc = crc32fast::Hasher::new();
    let mut out = Verified {
        bytes: 0,
        mismatches: 0,
        first_mismatch: None,
        crc32: 0,
    };
    for (off, n) in chunks(mem.len()) {
        let b = &mut buf[..n];
        mem.read(off, b).ctx("reading the buffer")?;
        crc.update(b);
        if let Some(content) = content {
            let w = &mut want[..n];
            content.render(off, w);
            if b != w {
                for (i, (&got, &exp)) in b.iter().zip(w.iter()).enumerate() {
                    if got != exp {
                        out.mismatches += 1;
                        if out.first_mismatch.is_none() {
                            let at = off + i as u64;
                            out.first_mismatch = Some((at, content.expected(at), got));
                        }
                    }
                }
            }
        }
        out.bytes += n as u64;
    }
    out.crc32 = crc.finalize();
    Ok(out)
}

/// One pass over `words`, summing them. Every in-place read of a bandwidth
/// measurement (the demo's and the bench's, shared and private alike) goes
/// through this one function, so that all are compiled alike.
#[inline(never)]
pub fn sum_words(words: &[u64]) -> u64 {
    words.iter().fold(0u64, |a, &w| a.wrapping_add(w))
}

fn sum_bytes(bytes: &[u8]) -> u64 {
    bytes.chunks_exact(8).fold(0u64, |a, w| {
        let mut x = [0u8; 8];
        x.copy_from_slice(w);
        a.wrapping_add(u64::from_le_bytes(x))
    })
}

/// How a bandwidth pass reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPath {
    /// In place through the host pointer.
    Direct,
    /// Copied out in [`CHUNK`]-byte pieces with `Memory::read`.
    Copied,
}

impl ReadPath {
    /// How to read `mem`: in place when it is host-visible.
    pub fn for_memory(mem: &dyn Memory) -> ReadPath {
        if mem.host_ptr().is_some() {
            ReadPath::Direct
        } else {
            ReadPath::Copied
        }
    }

    /// A label for reports.
    pub fn label(self) -> &'static str {
        match self {
            ReadPath::Direct => "in place (host-visible memory)",
            ReadPath::Copied => "copied out with Memory::read (device memory is not host-visible)",
        }
    }
}

/// One pass over all of `mem`, summing its words; `bounce` is scratch space
/// for [`ReadPath::Copied`].
///
/// The demo's exporter wrote the buffer before sending its handle and does not
/// write it again while the consumer reads, so the in-place pass reads memory
/// that no one modifies.
pub fn read_pass(mem: &dyn Memory, path: ReadPath, bounce: &mut [u8]) -> CmdResult<u64> {
    match (path, mem.host_ptr()) {
        (ReadPath::Direct, Some(ptr)) => {
            let words = (mem.len() / 8) as usize;
            // SAFETY: the Memory contract makes `host_ptr` valid for `len`
            // bytes as long as `mem` lives; mappings are page-aligned, so the
            // pointer is aligned for u64; nothing writes the bytes during the
            // pass (the demo's protocol, see above), and the slice does not
            // outlive this call.
            let slice =
                unsafe { std::slice::from_raw_parts(ptr.cast::<u64>().cast_const(), words) };
            Ok(black_box(sum_words(black_box(slice))))
        }
        _ => {
            let mut sum = 0u64;
            for (off, n) in chunks(mem.len()) {
                let b = &mut bounce[..n];
                mem.read(off, b).ctx("reading the buffer")?;
                sum = sum.wrapping_add(sum_bytes(black_box(b)));
            }
            Ok(black_box(sum))
        }
    }
}

/// One pass over `len` bytes at `offset` of `mem`, summing its words: in
/// place when it is host-visible, else copied out in [`CHUNK`]-byte pieces
/// through `bounce`. Nothing writes the bytes while they are read (the
/// callers' protocols: a region written before its handle was sent, a
/// received sample, which its publisher does not write until released).
pub fn read_range(mem: &dyn Memory, offset: u64, len: u64, bounce: &mut [u8]) -> CmdResult<u64> {
    let end = offset.checked_add(len).filter(|&e| e <= mem.len());
    if end.is_none() || offset % 8 != 0 {
        return Err(crate::fail::Fail::failed(format!(
            "{len} bytes at {offset} of a region of {}",
            mem.len()
        )));
    }
    match mem.host_ptr() {
        Some(ptr) => {
            // SAFETY: the Memory contract makes `host_ptr` valid for `len()`
            // bytes as long as `mem` lives, and `offset..offset + len` is
            // inside (checked); mappings are page-aligned and `offset` a
            // multiple of 8, so the words are aligned; nothing writes them
            // during the pass (see above), and the slice does not outlive
            // this call.
            let slice = unsafe {
                std::slice::from_raw_parts(
                    ptr.add(offset as usize).cast::<u64>().cast_const(),
                    (len / 8) as usize,
                )
            };
            Ok(black_box(sum_words(black_box(slice))))
        }
        None => {
            let mut sum = 0u64;
            for (off, n) in chunks(len) {
                let b = &mut bounce[..n];
                mem.read(offset + off, b).ctx("reading the buffer")?;
                sum = sum.wrapping_add(sum_bytes(black_box(b)));
            }
            Ok(black_box(sum))
        }
    }
}

/// The same pass over a private buffer of this process.
pub fn read_private(private: &[u64], path: ReadPath, bounce: &mut [u8]) -> u64 {
    match path {
        ReadPath::Direct => black_box(sum_words(black_box(private))),
        ReadPath::Copied => {
            let mut sum = 0u64;
            for part in private.chunks(CHUNK / 8) {
                let b = &mut bounce[..part.len() * 8];
                for (dst, w) in b.chunks_exact_mut(8).zip(part) {
                    dst.copy_from_slice(&w.to_le_bytes());
                }
                sum = sum.wrapping_add(sum_bytes(black_box(b)));
            }
            black_box(sum)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_agrees_with_word() {
        let seed = 42;
        let mut buf = vec![0u8; 64];
        Content::Pattern(seed).render(CHUNK as u64, &mut buf);
        for (i, &b) in buf.iter().enumerate() {
            assert_eq!(b, byte(seed, CHUNK as u64 + i as u64));
        }
        assert_ne!(word(seed, 0), word(seed, 1));
    }
}
