//! Handles in files: written atomically, mode `0600`, never through a link.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::text::{decode, encode};
use crate::error::{Error, HandleError, Result};
use crate::handle::Handle;
use crate::kit::os;

/// Largest handle file [`read_handle_file`] reads (a handle's text is under
/// a kilobyte).
pub const MAX_HANDLE_FILE: usize = 4096;

/// Write `handle`'s text (and a newline) to `path`, atomically: readers see
/// the old file or the new one, never a part.
///
/// The text goes to a temporary file in the same directory, created
/// exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC`), set to mode
/// `0600` with `fchmod` (so no umask can widen it), written and `fsync`ed,
/// then renamed over `path`; the temporary file is removed on error. A
/// symbolic link at `path` is refused ([`Error::PermissionDenied`]) rather
/// than replaced; links in the directories above `path` are followed, so
/// choose a directory only trusted users can write. A handle that would not
/// read back (a field over its bound) is refused before anything is written.
pub fn write_handle_file(path: impl AsRef<Path>, handle: &Handle) -> Result<()> {
    let path = path.as_ref();
    let name = path
        .file_name()
        .ok_or_else(|| Error::invalid(format!("`{}` names no file", path.display())))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => return Err(symlink_refused(path)),
        Ok(m) if !m.is_file() => {
            return Err(Error::invalid(format!(
                "`{}` exists and is not a regular file; a handle file replaces only a file",
                path.display()
            )))
        }
        _ => {}
    }
    let mut text = encode(handle);
    decode(&text)?;
    text.push('\n');

    let (tmp, mut file) = create_temp(dir, &name.to_string_lossy())?;
    let written = (|| -> io::Result<()> {
        file.set_permissions(Permissions::from_mode(0o600))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    drop(file);
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(
            format!("writing the handle file `{}`", path.display()),
            e,
        ));
    }
    // Make the rename durable; a directory that cannot be synced is no error.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// A temporary file for `name` in `dir`, named at random.
fn create_temp(dir: &Path, name: &str) -> Result<(PathBuf, File)> {
    create_temp_named(dir, || {
        dir.join(format!(
            ".{name}.{}.{}.tmp",
            os::pid(),
            os::hex(&os::random_id()[..6])
        ))
    })
}

/// A new file at the first of up to 8 paths from `next` that does not
/// exist yet (a name taken meanwhile is passed over; any other error ends
/// the search).
fn create_temp_named(dir: &Path, mut next: impl FnMut() -> PathBuf) -> Result<(PathBuf, File)> {
    let mut last = None;
    for _ in 0..8 {
        let tmp = next();
        let opened = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp);
        match opened {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(Error::io(
                    format!("creating a temporary file in `{}`", dir.display()),
                    e,
                ))
            }
        }
    }
    Err(Error::io(
        format!("creating a temporary file in `{}`", dir.display()),
        last.unwrap_or_else(|| io::ErrorKind::AlreadyExists.into()),
    ))
}

/// Read the handle in the file at `path` (as [`write_handle_file`] writes
/// it; whitespace around the text, such as a trailing newline, is ignored).
///
/// A symbolic link at `path` is not followed ([`Error::PermissionDenied`]),
/// anything but a regular file is refused, a missing file is
/// [`Error::NotFound`], and at most [`MAX_HANDLE_FILE`] bytes are read
/// ([`HandleError::OverBound`] beyond).
pub fn read_handle_file(path: impl AsRef<Path>) -> Result<Handle> {
    let path = path.as_ref();
    let file = OpenOptions::new()
        .read(true)
        // O_NONBLOCK: opening a FIFO planted at the path must not hang.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => symlink_refused(path),
            Some(libc::ENOENT) => Error::NotFound {
                what: format!("handle file `{}`", path.display()),
            },
            _ => Error::io(format!("opening the handle file `{}`", path.display()), e),
        })?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io(format!("inspecting `{}`", path.display()), e))?;
    if !meta.is_file() {
        return Err(Error::invalid(format!(
            "`{}` is not a regular file",
            path.display()
        )));
    }
    let mut buf = Vec::with_capacity(1024);
    file.take(MAX_HANDLE_FILE as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(format!("reading the handle file `{}`", path.display()), e))?;
    if buf.len() > MAX_HANDLE_FILE {
        return Err(HandleError::OverBound {
            field: "handle file",
            len: meta.len().max(buf.len() as u64) as usize,
            max: MAX_HANDLE_FILE,
        }
        .into());
    }
    let text = std::str::from_utf8(&buf).map_err(|e| HandleError::InvalidText {
        position: e.valid_up_to(),
        ch: char::REPLACEMENT_CHARACTER,
    })?;
    decode(text)
}

fn symlink_refused(path: &Path) -> Error {
    Error::PermissionDenied {
        pid: None,
        reason: format!(
            "`{}` is a symbolic link; handle files are never read or replaced through links \
             (use the file's own path)",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::{FdSource, HandleFlags, HandleKind};

    fn sample() -> Handle {
        Handle {
            kind: HandleKind::Event,
            backend: crate::BackendId::CpuShm,
            device: 0,
            device_uuid: [9; 16],
            location: crate::Location::Host,
            size: 0,
            offset: 0,
            address: 0,
            creator_pid: 77,
            creator_start: 5,
            creator_pid_ns: 4026531836,
            object_id: [4; 16],
            flags: HandleFlags::ANY_IMPORTER,
            pid_kind: crate::PidKind::Os,
            allowed_pids: Vec::new(),
            fds: FdSource::Attached { count: 1 },
            payload: b"file".to_vec(),
        }
    }

    #[test]
    fn round_trip_and_whitespace() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h");
        write_handle_file(&path, &sample()).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.ends_with('\n'));
        assert_eq!(read_handle_file(&path).unwrap(), sample());
        // Rewriting replaces; CRLF and spaces around the text are fine.
        fs::write(&path, format!("  {}\r\n", sample().to_text())).unwrap();
        assert_eq!(read_handle_file(&path).unwrap(), sample());
        write_handle_file(&path, &sample()).unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// The temporary file is made beside the target, so the rename is
    /// atomic: a directory on another file system than the working
    /// directory (tmpfs) is written as well as any.
    #[test]
    fn the_temporary_file_is_made_in_the_targets_directory() {
        let dir = tempfile::Builder::new()
            .prefix("hal-test-handle-file-")
            .tempdir_in("/dev/shm")
            .unwrap();
        let path = dir.path().join("h");
        write_handle_file(&path, &sample()).unwrap();
        assert_eq!(read_handle_file(&path).unwrap(), sample());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_file_of_the_largest_size_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h");
        let text = sample().to_text();
        let padded = format!("{text}{}", " ".repeat(MAX_HANDLE_FILE - text.len()));
        assert_eq!(padded.len(), MAX_HANDLE_FILE);
        fs::write(&path, padded).unwrap();
        assert_eq!(read_handle_file(&path).unwrap(), sample());
    }

    #[test]
    fn a_temporary_name_taken_is_passed_over_and_other_errors_end_the_search() {
        let dir = tempfile::tempdir().unwrap();
        let taken = dir.path().join("taken");
        fs::write(&taken, b"").unwrap();
        let fresh = dir.path().join("fresh");
        let mut names = vec![fresh.clone(), taken.clone()];
        let (tmp, _file) = create_temp_named(dir.path(), || names.pop().unwrap()).unwrap();
        assert_eq!(tmp, fresh);
        assert!(names.is_empty(), "both names were tried");

        let mut tries = 0;
        let every_name_taken = create_temp_named(dir.path(), || {
            tries += 1;
            taken.clone()
        });
        assert!(matches!(every_name_taken, Err(Error::Io { .. })));
        assert_eq!(tries, 8);

        let mut tries = 0;
        let missing = create_temp_named(dir.path(), || {
            tries += 1;
            dir.path().join("no/such/tmp")
        });
        assert!(matches!(missing, Err(Error::Io { .. })));
        assert_eq!(tries, 1, "a missing directory is not tried again");
    }

    #[test]
    fn refusals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h");
        fs::write(&path, vec![b'a'; MAX_HANDLE_FILE + 1]).unwrap();
        assert!(matches!(
            read_handle_file(&path),
            Err(Error::InvalidHandle(HandleError::OverBound { .. }))
        ));
        fs::write(&path, b"hal1.\xff\xfe").unwrap();
        assert!(matches!(
            read_handle_file(&path),
            Err(Error::InvalidHandle(HandleError::InvalidText {
                position: 5,
                ..
            }))
        ));
        fs::write(&path, b"not a handle").unwrap();
        assert!(matches!(
            read_handle_file(&path),
            Err(Error::InvalidHandle(_))
        ));
        assert!(matches!(
            read_handle_file(dir.path()),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            write_handle_file(dir.path().join("."), &sample()),
            Err(Error::InvalidArgument { .. })
        ));
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(matches!(
            read_handle_file(&fifo),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            write_handle_file(&fifo, &sample()),
            Err(Error::InvalidArgument { .. })
        ));
        // A handle that would not read back is not written.
        let mut bad = sample();
        bad.allowed_pids = vec![1; crate::handle::wire::MAX_PIDS + 1];
        assert!(write_handle_file(dir.path().join("bad"), &bad).is_err());
        // A missing directory: an error, and nothing left anywhere.
        assert!(matches!(
            write_handle_file(dir.path().join("no/such/h"), &sample()),
            Err(Error::Io { .. })
        ));
        let mut names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, vec!["fifo", "h"]);
    }
}
