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

/// Make, in `dir`, one of each: a text file, a 32-bit ELF file, a 64-bit
/// ELF file cut short (this test executable's first 4 KiB), and a path
/// that does not exist.
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
            path: dir.join("absent.so"),
            what: "a path that does not exist",
            says: "cannot open shared object file: No such file or directory",
        },
    ])
}
