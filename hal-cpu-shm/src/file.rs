//! File-backed regions: a regular file mapped shared, for data that should
//! outlive the processes (and survive a reboot once synced).
//!
//! A regular file cannot be sealed, so another process with write access can
//! truncate it under the mapping. As for named regions, the library's own
//! [`Memory::read`](hal_core::Memory::read) and
//! [`Memory::write`](hal_core::Memory::write) go through the descriptor and
//! never fault (they return [`Error::Closed`] after a truncation); direct
//! accesses through [`Memory::host_ptr`](hal_core::Memory::host_ptr) are the
//! caller's and would fault. For the same reason a file-backed region is not
//! exported as a handle: `export_memory` answers [`Error::Unsupported`];
//! share the path and open it with [`open_file_backed`] in the other process.
//! [`CpuAllocation::sync`] flushes the changes to the file.

use std::fs::OpenOptions;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use hal_core::kit::os::{self, Prot};
use hal_core::{Error, Result};

use crate::memory::CpuAllocation;
use crate::view::View;

fn io_error(action: &str, path: &Path, e: std::io::Error) -> Error {
    let what = format!("file {}", path.display());
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::NotFound { what },
        std::io::ErrorKind::AlreadyExists => Error::AlreadyExists { what },
        std::io::ErrorKind::PermissionDenied => Error::PermissionDenied {
            pid: None,
            reason: format!("{action} {what}: {e}"),
        },
        _ => Error::io(format!("{action} {what}"), e),
    }
}

fn map_file(fd: OwnedFd, path: &Path, read_only: bool) -> Result<CpuAllocation> {
    let st = os::fstat(fd.as_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(Error::invalid(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    let size = st.st_size as u64;
    if size == 0 {
        return Err(Error::invalid(format!(
            "{} is empty; create it with create_file_backed or give it a size first",
            path.display()
        )));
    }
    let prot = if read_only {
        Prot::Read
    } else {
        Prot::ReadWrite
    };
    let view = View::map(fd.as_fd(), size, 0, prot, 0, View::page(), None)?;
    Ok(CpuAllocation::from_file(
        view,
        size,
        read_only,
        fd,
        path.to_path_buf(),
    ))
}

/// Create the file `path` (it must not exist; mode 0600 whatever the umask)
/// with `size` zero bytes, and map it shared.
pub fn create_file_backed(path: impl AsRef<Path>, size: u64) -> Result<CpuAllocation> {
    let path = path.as_ref();
    if size == 0 {
        return Err(Error::invalid(
            "a file-backed region needs at least one byte",
        ));
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io_error("creating", path, e))?;
    let result = (|| {
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io_error("chmod 0600 of", path, e))?;
        f.set_len(size).map_err(|e| io_error("sizing", path, e))?;
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    map_file(f.into(), path, false).inspect_err(|_| {
        let _ = std::fs::remove_file(path);
    })
}

/// Map the existing file `path` shared, read-write, at its current size.
/// Symbolic links are not followed.
pub fn open_file_backed(path: impl AsRef<Path>) -> Result<CpuAllocation> {
    open(path.as_ref(), false)
}

/// Map the existing file `path` shared and read-only.
pub fn open_file_backed_read_only(path: impl AsRef<Path>) -> Result<CpuAllocation> {
    open(path.as_ref(), true)
}

fn open(path: &Path, read_only: bool) -> Result<CpuAllocation> {
    let f = OpenOptions::new()
        .read(true)
        .write(!read_only)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| io_error("opening", path, e))?;
    map_file(f.into(), path, read_only)
}
