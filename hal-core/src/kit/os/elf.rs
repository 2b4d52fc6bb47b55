//! What a shared library's ELF headers say, read from the file without
//! loading it: whether the file holds every byte its segments need (the
//! dynamic loader maps a cut-short library and the process dies of
//! `SIGBUS` inside `dlopen`), and whether it is marked never to be
//! unloaded (`DF_1_NODELETE`).
//!
//! Only 64-bit little-endian files are read; any other file is left to the
//! dynamic loader, whose own message says what is wrong with it.
//!
//! ```
//! use hal_core::kit::os::elf;
//!
//! let text = std::env::temp_dir().join(format!("hal-elf-doc-{}", std::process::id()));
//! std::fs::write(&text, "not a library\n")?;
//! assert_eq!(elf::missing_bytes(&text)?, None, "not ELF: the loader judges it");
//! assert!(elf::is_nodelete(&text).is_err());
//! std::fs::remove_file(&text)?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::File;
use std::io::{Error, ErrorKind, Result};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// `PT_LOAD`: a segment the loader maps.
const PT_LOAD: u32 = 1;
/// `PT_DYNAMIC`: the program header of the dynamic section.
const PT_DYNAMIC: u32 = 2;
/// `DT_NULL`: the dynamic section's last entry.
const DT_NULL: u64 = 0;
/// `DT_FLAGS_1`: the entry that holds the `DF_1_*` flags.
const DT_FLAGS_1: u64 = 0x6fff_fffb;
/// `DF_1_NODELETE`: `dlclose` never unmaps the object.
const DF_1_NODELETE: u64 = 0x8;
/// The identification of a 64-bit little-endian ELF file.
const IDENT_64_LE: [u8; 6] = [0x7f, b'E', b'L', b'F', 2, 1];

/// Bytes of an ELF image, read at an offset: a file or, in tests, a slice.
trait Image {
    /// The image's length in bytes.
    fn len(&self) -> u64;
    /// `N` bytes at `at`; an error when the image ends before them.
    fn at<const N: usize>(&self, at: u64) -> Result<[u8; N]>;

    fn u16(&self, at: u64) -> Result<u64> {
        self.at(at).map(|b| u64::from(u16::from_le_bytes(b)))
    }
    fn u32(&self, at: u64) -> Result<u32> {
        self.at(at).map(u32::from_le_bytes)
    }
    fn u64(&self, at: u64) -> Result<u64> {
        self.at(at).map(u64::from_le_bytes)
    }
}

fn cut_short(at: u64) -> Error {
    Error::new(
        ErrorKind::UnexpectedEof,
        format!("the file ends before offset {at}"),
    )
}

impl Image for (&File, u64) {
    fn len(&self) -> u64 {
        self.1
    }
    fn at<const N: usize>(&self, at: u64) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.0
            .read_exact_at(&mut b, at)
            .map_err(|e| match e.kind() {
                ErrorKind::UnexpectedEof => cut_short(at),
                _ => e,
            })?;
        Ok(b)
    }
}

impl Image for &[u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn at<const N: usize>(&self, at: u64) -> Result<[u8; N]> {
        usize::try_from(at)
            .ok()
            .and_then(|i| self.get(i..i.checked_add(N)?))
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| cut_short(at))
    }
}

/// A program header: its type, file offset and size in the file.
struct Segment {
    kind: u32,
    offset: u64,
    size: u64,
}

/// The program headers of a 64-bit little-endian ELF image; `None` when
/// the image is not one.
fn segments(img: &impl Image) -> Result<Option<Vec<Segment>>> {
    if img.len() < 6 || img.at::<6>(0)? != IDENT_64_LE {
        return Ok(None);
    }
    let (phoff, phentsize, phnum) = (img.u64(0x20)?, img.u16(0x36)?, img.u16(0x38)?);
    (0..phnum)
        .map(|i| {
            let ph = phoff + i * phentsize;
            Ok(Segment {
                kind: img.u32(ph)?,
                offset: img.u64(ph + 8)?,
                size: img.u64(ph + 32)?,
            })
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// How many bytes the image lacks for its headers and mapped segments;
/// `None` when it is complete or not a 64-bit little-endian ELF image.
fn missing(img: &impl Image) -> Result<Option<u64>> {
    let segments = match segments(img) {
        Ok(Some(s)) => s,
        Ok(None) => return Ok(None),
        // The headers themselves run past the end.
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(Some(1)),
        Err(e) => return Err(e),
    };
    let need = segments
        .iter()
        .filter(|s| s.kind == PT_LOAD || s.kind == PT_DYNAMIC)
        .map(|s| s.offset.saturating_add(s.size))
        .max()
        .unwrap_or(0);
    Ok(need.checked_sub(img.len()).filter(|&n| n > 0))
}

/// The value of `DT_FLAGS_1` (0 when absent) of the image.
fn flags_1(img: &impl Image) -> Result<u64> {
    let not_a_library = |what: &str| Error::new(ErrorKind::InvalidData, what.to_string());
    let segments =
        segments(img)?.ok_or_else(|| not_a_library("not a 64-bit little-endian ELF file"))?;
    let dynamic = segments
        .iter()
        .find(|s| s.kind == PT_DYNAMIC)
        .ok_or_else(|| not_a_library("no dynamic section: not a shared library"))?;
    let end = dynamic.offset.saturating_add(dynamic.size);
    let mut entry = dynamic.offset;
    while entry + 16 <= end {
        match img.u64(entry)? {
            DT_NULL => break,
            DT_FLAGS_1 => return img.u64(entry + 8),
            _ => entry += 16,
        }
    }
    Ok(0)
}

fn open(path: &Path) -> Result<(File, u64)> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    Ok((file, len))
}

/// How many bytes the 64-bit little-endian ELF file at `path` lacks for
/// its headers and the segments it maps (at least 1 when the headers
/// themselves are cut); `None` when it is complete, or is not such a file.
pub fn missing_bytes(path: &Path) -> Result<Option<u64>> {
    let (file, len) = open(path)?;
    missing(&(&file, len))
}

/// True when the 64-bit little-endian ELF shared library at `path` is
/// marked never to be unloaded (`DF_1_NODELETE`, linked `-z nodelete`); an
/// error when the file cannot be read or is not such a library.
pub fn is_nodelete(path: &Path) -> Result<bool> {
    let (file, len) = open(path)?;
    flags_1(&(&file, len)).map(|f| f & DF_1_NODELETE != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 image: one `PT_LOAD` of the whole image, one
    /// `PT_DYNAMIC` header whose section holds `entries`, then `DT_NULL`.
    fn image(entries: &[(u64, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 2 * 56];
        b[..6].copy_from_slice(&IDENT_64_LE);
        b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&2u16.to_le_bytes());
        let dynamic = b.len() as u64;
        let size = 16 * (entries.len() as u64 + 1);
        for (ph, kind, offset, len) in [
            (64, PT_LOAD, 0, dynamic + size),
            (120, PT_DYNAMIC, dynamic, size),
        ] {
            b[ph..ph + 4].copy_from_slice(&kind.to_le_bytes());
            b[ph + 8..ph + 16].copy_from_slice(&offset.to_le_bytes());
            b[ph + 32..ph + 40].copy_from_slice(&len.to_le_bytes());
        }
        for &(tag, val) in entries.iter().chain([&(DT_NULL, 0)]) {
            b.extend_from_slice(&tag.to_le_bytes());
            b.extend_from_slice(&val.to_le_bytes());
        }
        b
    }

    #[test]
    fn the_flag_is_read_from_the_dynamic_section() {
        let flags = |b: Vec<u8>| flags_1(&b.as_slice()).unwrap();
        assert_eq!(flags(image(&[(1, 5), (DT_FLAGS_1, 0x9)])), 0x9);
        assert_eq!(flags(image(&[(1, 5)])), 0, "no DT_FLAGS_1");
        assert_eq!(
            flags(image(&[(DT_NULL, 0), (DT_FLAGS_1, 0x8)])),
            0,
            "entries after DT_NULL do not count"
        );
    }

    #[test]
    fn a_complete_image_lacks_nothing_and_a_cut_one_says_how_much() {
        let whole = image(&[(DT_FLAGS_1, 0x8)]);
        assert_eq!(missing(&whole.as_slice()).unwrap(), None);
        let cut = &whole[..whole.len() - 20];
        assert_eq!(missing(&cut).unwrap(), Some(20));
        assert!(flags_1(&cut).is_err());
        for headers_cut in [10, 64 + 20, 64 + 56 + 30] {
            assert_eq!(
                missing(&&whole[..headers_cut]).unwrap(),
                Some(1),
                "{headers_cut}"
            );
        }
    }

    #[test]
    fn other_files_are_left_to_the_loader() {
        let text: &[u8] = b"root:x:0:0:root:/root:/bin/bash\n";
        assert_eq!(missing(&text).unwrap(), None);
        assert_eq!(flags_1(&text).unwrap_err().kind(), ErrorKind::InvalidData);
        let mut elf32 = image(&[]);
        elf32[4] = 1;
        assert_eq!(missing(&elf32.as_slice()).unwrap(), None);
        assert!(flags_1(&elf32.as_slice()).is_err());
    }

    #[test]
    fn files_are_read_as_their_images_are() {
        let exe = std::env::current_exe().unwrap();
        assert_eq!(missing_bytes(&exe).unwrap(), None, "a complete program");
        // A program, not a library marked -z nodelete.
        assert!(!is_nodelete(&exe).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let cut = dir.path().join("cut.so");
        let whole = std::fs::read(&exe).unwrap();
        std::fs::write(&cut, &whole[..4096]).unwrap();
        assert!(missing_bytes(&cut).unwrap().unwrap() > 0);
        assert_eq!(
            missing_bytes(&dir.path().join("absent.so"))
                .unwrap_err()
                .kind(),
            ErrorKind::NotFound
        );
    }
}
