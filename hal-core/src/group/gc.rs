//! Removing the names of groups whose every member is gone: what crashed
//! members leave in `/dev/shm` (`halctl shm gc`). Each name is judged and
//! removed under its lock, by name only while the name still leads to the
//! file judged: a joiner that founds the group again meanwhile keeps its
//! name.

use std::path::PathBuf;
use std::time::Instant;

use super::file;
use crate::kit::os::{self, PrivateFile};
use crate::Result;

/// A group's name that [`collect_garbage`] removed (or, with `dry_run`,
/// would remove): every member it lists is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadGroup {
    /// The group's name.
    pub name: String,
    /// The name's file.
    pub path: PathBuf,
    /// The uid of the name's owner: the uid its file name carries, and its
    /// file's owner (another user's only where root collected it).
    pub uid: u32,
    /// The process ids of the members the name lists, all gone (none where
    /// it lists none).
    pub members: Vec<u32>,
}

/// Remove the names of the calling user's groups whose every member listed
/// in the name is gone (by pid and start time); with `dry_run`, only say
/// which. A name with a live member, a name another process holds locked
/// (a member joining or leaving), a file that is no group's name of this
/// version, and a file that is not the private file of the user whose name
/// it carries are left alone.
///
/// Run as root, it collects every user's names, each judged as above and
/// removed as its owner: a name counts only where its file is a regular
/// file of mode 0600 owned by the uid the name carries
/// (`/dev/shm/.hal-UID/group.NAME`), opened without following a link, locked
/// and read again; and the unlink runs with the file-system uid set to that
/// uid ([`kit::os::unlink_as`](crate::kit::os::unlink_as)), only while the
/// name still leads to the file judged, so the sticky bit of `/dev/shm`
/// refuses any other user's object. A file one user plants under another's
/// name (root's included) is neither judged as that user's nor removed.
pub fn collect_garbage(dry_run: bool) -> Result<Vec<DeadGroup>> {
    collect_garbage_prefix("", dry_run)
}

/// [`collect_garbage`] restricted to the groups whose name starts with
/// `prefix` (an application's own namespace).
pub fn collect_garbage_prefix(prefix: &str, dry_run: bool) -> Result<Vec<DeadGroup>> {
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

/// Judge and remove user `uid`'s group `name`: `Some` when every member
/// it lists is gone (and, unless `dry_run`, the name was removed). The name
/// counts only where its file is a private file of `uid` (a regular file of
/// mode 0600 that `uid` owns, a link not followed): a file another user
/// planted under `uid`'s name is left alone.
fn collect(uid: u32, name: &str, dry_run: bool) -> Result<Option<DeadGroup>> {
    let Some(pf) = file::path_of(uid, name)
        .and_then(|path| PrivateFile::open_owned_by(&path, uid))
        .ok()
        .flatten()
    else {
        return Ok(None);
    };
    // Not waited for: whoever holds it is joining or leaving.
    let Ok(_locked) = pf.lock(Instant::now(), "collecting a dead group's name") else {
        return Ok(None);
    };
    if !pf.named() {
        return Ok(None);
    }
    // Read and judged again under the lock, from the file the name leads to.
    let Ok(Some(names)) = file::read_names(&pf) else {
        return Ok(None);
    };
    let holders: Vec<_> = names.holders.iter().flatten().collect();
    if holders.iter().any(|h| os::process_alive(h.pid, h.start)) {
        return Ok(None);
    }
    // As the name's owner, and only while the name still leads to the file
    // judged: root's run cannot remove another user's object.
    if !dry_run && !pf.remove_name()? {
        return Ok(None);
    }
    Ok(Some(DeadGroup {
        name: name.to_string(),
        path: pf.path().to_path_buf(),
        uid,
        members: holders.iter().map(|h| h.pid).collect(),
    }))
}
