//! Removing the names of channels whose publisher is gone: what a crashed
//! publisher leaves in `/dev/shm` (`halctl shm gc`). Each name is judged
//! and removed under its lock, by name only while the name still leads to
//! the file judged: a publisher that replaces the name meanwhile keeps its
//! own.

use std::path::PathBuf;

use super::file;
use crate::kit::os;
use crate::Result;

/// A channel's name that [`collect_garbage`] removed (or, with `dry_run`,
/// would remove): its publisher is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadChannel {
    /// The channel's name.
    pub name: String,
    /// The name's file.
    pub path: PathBuf,
    /// The uid of the name's owner: the uid its file name carries, and its
    /// file's owner (another user's only where root collected it).
    pub uid: u32,
    /// The process id of its publisher, which is gone.
    pub publisher: u32,
}

/// Remove the names of the calling user's channels whose publisher is gone
/// (its process, by pid and start time, or its channel closed), and the
/// notes of remote subscribers whose every recording process is gone; with
/// `dry_run`, only say which (names only). A live publisher's name, a name another
/// process holds locked (a publisher replacing it), and a file that is no
/// channel's name of this version are left alone.
///
/// Run as root, it collects every user's names, each judged as above and
/// removed as its owner ([`kit::os::collect_dead_names`](crate::kit::os::collect_dead_names)):
/// a name counts only where its directory (`/dev/shm/.hal-UID`) and its
/// file (`channel.NAME`, a regular file of mode 0600, opened without
/// following a link) are that uid's, and the unlink runs with the
/// file-system uid set to that uid, only while the name still leads to the
/// file judged.
pub fn collect_garbage(dry_run: bool) -> Result<Vec<DeadChannel>> {
    collect_garbage_prefix("", dry_run)
}

/// [`collect_garbage`] restricted to the channels whose name starts with
/// `prefix` (an application's own namespace).
pub fn collect_garbage_prefix(prefix: &str, dry_run: bool) -> Result<Vec<DeadChannel>> {
    // The notes of remote subscribers whose offering process is gone go
    // with them (`remote.NAME`, [`RemoteNote`](super::RemoteNote)); they
    // hold no publisher and are not listed.
    super::remote_note::collect_dead(prefix, dry_run)?;
    // Read and judged under the lock, from the file the name leads to.
    let dead = os::collect_dead_names(
        file::KIND,
        prefix,
        dry_run,
        "collecting a dead channel's name",
        |pf| {
            let record = file::read_record(pf).ok().flatten()?;
            file::gone(&record).unwrap_or(false).then_some(record.pid)
        },
    )?;
    Ok(dead
        .into_iter()
        .map(|d| DeadChannel {
            name: d.name,
            path: d.path,
            uid: d.uid,
            publisher: d.found,
        })
        .collect())
}
