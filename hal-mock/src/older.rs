//! A stand-in library as an older runtime: a copy of the built stand-in
//! whose dynamic symbol table no longer has some entry points, so that
//! `dlsym` finds nothing for them, as with a driver or a CANN older than
//! the calls. Tests load the copy in a child process to exercise a
//! backend's paths for an older runtime (a capability not offered, an
//! entry point named as missing).
//!
//! A library cannot hide a symbol it exports, and a second build per set
//! of entry points would cost a link each; instead the copy's `.dynstr`
//! entry of each hidden name gets its first byte replaced by `_` (same
//! length, so that no offset moves). The hash tables still hold the old
//! name's hash, but `dlsym` compares the names after the hash, so a lookup
//! of the hidden name ends without a match, and every other lookup is
//! unchanged. Only 64-bit little-endian ELF (x86_64, aarch64) is read.

use std::io;
use std::path::{Path, PathBuf};

/// `SHT_DYNSYM`: the dynamic symbol table's section type.
const SHT_DYNSYM: u32 = 11;
/// Bytes of an `Elf64_Sym`.
const SYM_SIZE: usize = 24;
/// Bytes of an `Elf64_Shdr`.
const SHDR_SIZE: usize = 64;

/// A copy of a library without some of its entry points, removed when
/// dropped.
#[derive(Debug)]
pub struct LibraryCopy {
    path: PathBuf,
}

impl LibraryCopy {
    /// Copy `library` to a new file in `dir` (named after this process and
    /// a counter, so that parallel tests never share one) without the
    /// dynamic symbols `hidden`. Errors: `library` unreadable, not a 64-bit
    /// little-endian ELF, a name of `hidden` not among its dynamic symbols,
    /// or its name's bytes shared with another symbol's name.
    pub fn without(library: &Path, hidden: &[&str], dir: &Path) -> io::Result<LibraryCopy> {
        let mut bytes = std::fs::read(library)?;
        hide(&mut bytes, hidden)?;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = library
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = dir.join(format!("older-{}-{n}-{name}", std::process::id()));
        std::fs::write(&path, &bytes)?;
        Ok(LibraryCopy { path })
    }

    /// Where the copy lies.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LibraryCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

fn field(bytes: &[u8], at: usize, len: usize) -> io::Result<u64> {
    let b = bytes
        .get(at..at + len)
        .ok_or_else(|| invalid(format!("the file ends before byte {}", at + len)))?;
    Ok(b.iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
}

fn usize_at(bytes: &[u8], at: usize, len: usize) -> io::Result<usize> {
    usize::try_from(field(bytes, at, len)?).map_err(|_| invalid("an offset past usize"))
}

/// Replace the first byte of each name of `hidden` in the `.dynstr` of
/// the ELF image `bytes` by `_`.
fn hide(bytes: &mut [u8], hidden: &[&str]) -> io::Result<()> {
    if bytes.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return Err(invalid("not a 64-bit little-endian ELF file"));
    }
    let shoff = usize_at(bytes, 0x28, 8)?;
    let shnum = usize_at(bytes, 0x3c, 2)?;
    let section = |i: usize| shoff + i * SHDR_SIZE;
    let dynsym = (0..shnum)
        .find(|&i| field(bytes, section(i) + 4, 4).ok() == Some(u64::from(SHT_DYNSYM)))
        .ok_or_else(|| invalid("no dynamic symbol table"))?;
    let (sym_off, sym_size) = (
        usize_at(bytes, section(dynsym) + 24, 8)?,
        usize_at(bytes, section(dynsym) + 32, 8)?,
    );
    let strtab = usize_at(bytes, section(dynsym) + 40, 4)?;
    let (str_off, str_size) = (
        usize_at(bytes, section(strtab) + 24, 8)?,
        usize_at(bytes, section(strtab) + 32, 8)?,
    );
    let strings = bytes
        .get(str_off..str_off + str_size)
        .ok_or_else(|| invalid("the string table lies past the end"))?;
    // Every dynamic symbol's name, as the range of its bytes in `strings`.
    let mut names = Vec::new();
    for i in 0..sym_size / SYM_SIZE {
        let start = usize_at(bytes, sym_off + i * SYM_SIZE, 4)?;
        let len = strings
            .get(start..)
            .and_then(|s| s.iter().position(|&b| b == 0))
            .ok_or_else(|| invalid(format!("symbol {i}'s name is not terminated")))?;
        names.push(start..start + len);
    }
    let mut patches = Vec::with_capacity(hidden.len());
    for name in hidden {
        let at = names
            .iter()
            .find(|r| &strings[(*r).clone()] == name.as_bytes())
            .map(|r| r.start)
            .ok_or_else(|| invalid(format!("no dynamic symbol {name}")))?;
        if let Some(other) = names
            .iter()
            .find(|r| r.start < at && r.end == at + name.len())
        {
            let shared = String::from_utf8_lossy(&strings[other.clone()]);
            return Err(invalid(format!("{name} is the tail of {shared}")));
        }
        patches.push(str_off + at);
    }
    for at in patches {
        bytes[at] = b'_';
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF image: a header, a string table, a dynamic symbol
    /// table of `names` (the last stored as the tail of the one before
    /// when `tail` is set) and the two section headers.
    fn image(names: &[&str], tail: bool) -> Vec<u8> {
        let mut strings = vec![0u8];
        let mut starts = Vec::new();
        for (i, n) in names.iter().enumerate() {
            if tail && i == names.len() - 1 {
                let prev = starts[i - 1] as usize;
                let prev_len = names[i - 1].len();
                starts.push((prev + prev_len - n.len()) as u32);
            } else {
                starts.push(strings.len() as u32);
                strings.extend_from_slice(n.as_bytes());
                strings.push(0);
            }
        }
        let mut syms = vec![0u8; SYM_SIZE * names.len()];
        for (i, s) in starts.iter().enumerate() {
            syms[i * SYM_SIZE..i * SYM_SIZE + 4].copy_from_slice(&s.to_le_bytes());
        }
        let str_off = 64;
        let sym_off = str_off + strings.len();
        let shoff = sym_off + syms.len();
        let mut out = vec![0u8; 64];
        out[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1]);
        out[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        out[0x3c..0x3e].copy_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&strings);
        out.extend_from_slice(&syms);
        let mut shdr = |ty: u32, off: usize, size: usize, link: u32| {
            let mut h = vec![0u8; SHDR_SIZE];
            h[4..8].copy_from_slice(&ty.to_le_bytes());
            h[24..32].copy_from_slice(&(off as u64).to_le_bytes());
            h[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            h[40..44].copy_from_slice(&link.to_le_bytes());
            out.extend_from_slice(&h);
        };
        shdr(3, str_off, strings.len(), 0);
        shdr(SHT_DYNSYM, sym_off, syms.len(), 0);
        out
    }

    fn contains(bytes: &[u8], s: &str) -> bool {
        bytes.windows(s.len()).any(|w| w == s.as_bytes())
    }

    #[test]
    fn a_hidden_name_loses_its_first_byte_and_no_other_changes() {
        let mut b = image(&["cuInit", "cuMemCreate", "cuMemMap"], false);
        let before = b.clone();
        hide(&mut b, &["cuMemCreate"]).unwrap();
        assert!(contains(&b, "_uMemCreate") && !contains(&b, "cuMemCreate"));
        let changed = before.iter().zip(&b).filter(|(x, y)| x != y).count();
        assert_eq!(changed, 1, "one byte");
        assert!(contains(&b, "cuInit") && contains(&b, "cuMemMap"));
    }

    #[test]
    fn what_cannot_be_hidden_is_refused() {
        let mut b = image(&["cuInit"], false);
        let e = hide(&mut b, &["cuMemCreate"]).unwrap_err();
        assert!(
            e.to_string().contains("no dynamic symbol cuMemCreate"),
            "{e}"
        );
        let mut b = image(&["xcuInit", "cuInit"], true);
        let e = hide(&mut b, &["cuInit"]).unwrap_err();
        assert!(e.to_string().contains("tail of xcuInit"), "{e}");
        let mut b = image(&["cuInit"], false);
        b[4] = 1;
        assert!(hide(&mut b, &["cuInit"]).is_err(), "32-bit");
        assert!(hide(&mut [0u8; 8], &["cuInit"]).is_err(), "not ELF");
    }

    #[test]
    fn a_copy_lies_beside_and_goes_when_dropped() {
        let dir = std::env::temp_dir();
        let src = dir.join(format!("hal-older-src-{}", std::process::id()));
        std::fs::write(&src, image(&["aclInit", "aclrtMallocPhysical"], false)).unwrap();
        let copy = LibraryCopy::without(&src, &["aclrtMallocPhysical"], &dir).unwrap();
        let written = std::fs::read(copy.path()).unwrap();
        assert!(contains(&written, "_clrtMallocPhysical"));
        assert!(contains(
            &std::fs::read(&src).unwrap(),
            "aclrtMallocPhysical"
        ));
        let path = copy.path().to_path_buf();
        drop(copy);
        assert!(!path.exists(), "removed");
        std::fs::remove_file(&src).unwrap();
    }
}
