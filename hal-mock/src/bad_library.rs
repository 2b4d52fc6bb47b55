//! Files a program may be pointed at in place of a vendor library, made
//! for tests of what a backend says when its library does not load: each
//! is loaded for real, so the message tested is the dynamic loader's (or
//! the loader check's) own.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("hal-bad-doc-{}", std::process::id()));
//! std::fs::create_dir(&dir)?;
//! for bad in hal_mock::bad_library::make(&dir)? {
//!     assert!(bad.path.starts_with(&dir), "{}", bad.what);
//! }
//! std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), std::io::Error>(())
//! ```

use std::path::{Path, PathBuf};

/// One file that is not a loadable library, and what the loader's
/// message about it contains.
#[derive(Debug, Clone)]
pub struct BadLibrary {
    /// The file (or, for a missing one, the path that does not exist).
    pub path: PathBuf,
    /// What is wrong with it, for a test's failure message.
    pub what: &'static str,
    /// Words the reason for not loading it contains.
    pub says: &'static str,
}

/// Why `backend` is unavailable, as its availability and as the error of
/// `open(0)` say it. Panics when it is available: for tests.
pub fn unavailable(backend: impl hal_core::Backend) -> (String, String) {
    let hal_core::Availability::Unavailable { reason, .. } = backend.availability() else {
        panic!("the backend is available");
    };
    let error = backend.open(0).map(|_| ()).unwrap_err();
    (reason, error.to_string())
}

/// Check that a backend pointed at each bad library ([`make`], in a
/// folder of its own under the temporary directory) says why in the
/// loader's words: `unavailable(path)` gives what the backend on the
/// library at `path` answers (see [`unavailable`]), and each answer names
/// the file and the loader's reason, never a bare "dlopen failed", and not
/// `remedy`, the advice to install the vendor's software (the program
/// named the library, so installing is no remedy). Panics at the first
/// answer that does not: for tests.
pub fn check_refusals(unavailable: impl Fn(&Path) -> (String, String), remedy: &str) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("hal-bad-library-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir).expect("a folder for the bad libraries");
    // Removed however the check ends, a failed assertion included.
    struct Removed(PathBuf);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let dir = Removed(dir);
    for bad in make(&dir.0).expect("the bad libraries") {
        let (reason, error) = unavailable(&bad.path);
        for text in [&reason, &error] {
            let what = bad.what;
            assert!(text.contains(bad.says), "{what}: {text}");
            let path = bad.path.display().to_string();
            assert!(text.contains(&path), "{what}: {text}");
            assert!(!text.contains("dlopen failed"), "{what}: {text}");
            assert!(!text.contains(remedy), "{what}: {text}");
        }
    }
}

/// Make, in `dir`, one of each: a text file, a 32-bit ELF file, a 64-bit
/// ELF file cut short (this test executable's first 4 KiB), a library
/// that needs a glibc version no glibc has (a copy of glibc's own
/// `libutil.so.1` asking for `GLIBC_9.9.9`), and a path that does not
/// exist.
pub fn make(dir: &Path) -> std::io::Result<Vec<BadLibrary>> {
    let text = dir.join("text.so");
    std::fs::write(
        &text,
        "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n",
    )?;
    // An ELF32 header, padded past the length the loader reads first.
    let mut elf32 = vec![0x7f, b'E', b'L', b'F', 1, 1, 1];
    elf32.resize(1024, 0);
    let class32 = dir.join("elf32.so");
    std::fs::write(&class32, elf32)?;
    let exe = std::fs::read(std::env::current_exe()?)?;
    let cut = dir.join("cut.so");
    std::fs::write(&cut, &exe[..exe.len().min(4096)])?;
    let future = dir.join("future-glibc.so");
    std::fs::write(
        &future,
        needing_a_future_glibc(&glibc_library("libutil.so.1")?)?,
    )?;
    Ok(vec![
        BadLibrary {
            path: text,
            what: "a text file",
            says: "invalid ELF header",
        },
        BadLibrary {
            path: class32,
            what: "a 32-bit ELF file",
            says: "wrong ELF class: ELFCLASS32",
        },
        BadLibrary {
            path: cut,
            what: "an ELF file cut short",
            says: "the file is cut short",
        },
        BadLibrary {
            path: future,
            what: "a library that needs a newer glibc",
            says: "version `GLIBC_9.9.9' not found",
        },
        BadLibrary {
            path: dir.join("absent.so"),
            what: "a path that does not exist",
            says: "cannot open shared object file: No such file or directory",
        },
    ])
}

/// The library `file` of the glibc this process runs on: in the folder of
/// the `libc.so.6` it mapped.
fn glibc_library(file: &str) -> std::io::Result<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.ends_with("/libc.so.6"))
        .and_then(|libc| Path::new(libc).parent())
        .map(|dir| dir.join(file))
        .ok_or_else(|| std::io::Error::other("this process maps no libc.so.6 (not glibc?)"))
}

/// The library at `path` with every glibc version it needs
/// (`GLIBC_2.2.5`, `GLIBC_2.17`, ...) rewritten in place to the same
/// length of nines (`GLIBC_9.9.9`, `GLIBC_9.99`): a version no glibc
/// defines, so the dynamic loader refuses it by name.
fn needing_a_future_glibc(path: &Path) -> std::io::Result<Vec<u8>> {
    const NAME: &[u8] = b"\0GLIBC_2.";
    let mut bytes = std::fs::read(path)?;
    let mut rewritten = 0;
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(NAME.len()).position(|w| w == NAME) {
        let start = at + found + 7; // the first digit, after "\0GLIBC_"
        let len = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit() || **b == b'.')
            .count();
        if bytes.get(start + len) == Some(&0) {
            for b in &mut bytes[start..start + len] {
                if *b != b'.' {
                    *b = b'9';
                }
            }
            rewritten += 1;
        }
        at = start + len;
    }
    if rewritten == 0 {
        return Err(std::io::Error::other(format!(
            "{} needs no GLIBC_2.x version",
            path.display()
        )));
    }
    Ok(bytes)
}
