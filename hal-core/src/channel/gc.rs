//! Removing the names of channels whose publisher is gone: what a crashed
//! publisher leaves in `/dev/shm` (`halctl shm gc`). Each name is judged
//! and removed under its lock, by name only while the name still leads to
//! the file judged: a publisher that replaces the name meanwhile keeps its
//! own.

use std::path::PathBuf;
use std::time::Instant;

use super::file;
use crate::kit::os::PrivateFile;
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
/// (its process, by pid and start time, or its channel closed); with
/// `dry_run`, only say which. A live publisher's name, a name another
/// process holds locked (a publisher replacing it), a file that is no
/// channel's name of this version, and a file that is not the private file
/// of the user whose name it carries are left alone.
///
/// Run as root, it collects every user's names, each judged as above and
/// removed as its owner: a name counts only where its file is a regular
/// file of mode 0600 owned by the uid the name carries
/// (`/dev/shm/.hal-UID/channel.NAME`), opened without following a link, locked
/// and read again; and the unlink runs with the file-system uid set to that
/// uid ([`kit::os::unlink_as`](crate::kit::os::unlink_as)), only while the
/// name still leads to the file judged, so the sticky bit of `/dev/shm`
/// refuses any other user's object. A file one user plants under another's
/// name (root's included) is neither judged as that user's nor removed.
pub fn collect_garbage(dry_run: bool) -> Result<Vec<DeadChannel>> {
    collect_garbage_prefix("", dry_run)
}

/// [`collect_garbage`] restricted to the channels whose name starts with
/// `prefix` (an application's own namespace).
pub fn collect_garbage_prefix(prefix: &str, dry_run: bool) -> Result<Vec<DeadChannel>> {
    let mut removed = Vec::new();
    for (uid, name) in file::collectable_names()?
        .into_iter()
        .filter(|(_, n)| n.starts_with(prefix))
    {
        if let Some(dead) = collect(uid, &name, dry_run)? {
            removed.push(dead);
        }
    }
    Ok(removed)
}

/// Judge and remove user `uid`'s channel `name`: `Some` when its
/// publisher is gone (and, unless `dry_run`, the name was removed). The
/// name counts only where its file is a private file of `uid` (a regular
/// file of mode 0600 that `uid` owns, a link not followed): a file another
/// user planted under `uid`'s name is left alone.
fn collect(uid: u32, name: &str, dry_run: bool) -> Result<Option<DeadChannel>> {
    let Some(pf) = file::path_of(uid, name)
        .and_then(|path| PrivateFile::open_owned_by(&path, uid))
        .ok()
        .flatten()
    else {
        return Ok(None);
    };
    // Not waited for: whoever holds it is changing the name.
    let Ok(_locked) = pf.lock(Instant::now(), "collecting a dead channel's name") else {
        return Ok(None);
    };
    if !pf.named() {
        return Ok(None);
    }
    // Read and judged again under the lock, from the file the name leads to.
    let Ok(Some(record)) = file::read_record(&pf) else {
        return Ok(None);
    };
    if !file::gone(&record).unwrap_or(false) {
        return Ok(None);
    }
    // As the name's owner, and only while the name still leads to the file
    // judged: root's run cannot remove another user's object.
    if !dry_run && !pf.remove_name()? {
        return Ok(None);
    }
    Ok(Some(DeadChannel {
        name: name.to_string(),
        path: pf.path().to_path_buf(),
        uid,
        publisher: record.pid,
    }))
}
