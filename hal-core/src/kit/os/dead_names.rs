//! Collecting private names whose owners are gone (`halctl shm gc`'s
//! groups and channels): each name judged and removed under its lock, by
//! name only while the name still leads to the file judged, and as the
//! name's owner.

use std::path::PathBuf;
use std::time::Instant;

use super::private_file::{collectable_names, private_path_of, PrivateFile};
use crate::Result;

/// A name that [`collect_dead_names`] removed (or, in a dry run, would
/// remove), with what its judge found.
#[derive(Debug)]
pub struct DeadName<T> {
    /// The object's name.
    pub name: String,
    /// The name's file.
    pub path: PathBuf,
    /// The uid of the name's owner: its directory's, and its file's.
    pub uid: u32,
    /// What `judge` said of it.
    pub found: T,
}

/// Remove `kind`'s names starting with `prefix` that the calling user may
/// collect ([`collectable_names`]: root's are every user's) and that
/// `judge` finds dead; with `dry_run`, only say which. A name counts only
/// where its file is a private file of the uid of its directory (opened
/// without following a link); it is locked without waiting (whoever holds
/// the lock is changing it: `doing` names the collection in the lock's
/// error), judged again from the file the name still leads to, and removed
/// as its owner ([`PrivateFile::remove_name`]) only while the name leads
/// there: a name made again meanwhile stays, and root's run removes nothing
/// its owner could not.
pub fn collect_dead_names<T>(
    kind: &str,
    prefix: &str,
    dry_run: bool,
    doing: &str,
    mut judge: impl FnMut(&PrivateFile) -> Option<T>,
) -> Result<Vec<DeadName<T>>> {
    let mut removed = Vec::new();
    for (uid, name) in collectable_names(kind)?
        .into_iter()
        .filter(|(_, n)| n.starts_with(prefix))
    {
        let Some(pf) = private_path_of(kind, uid, &name)
            .and_then(|path| PrivateFile::open_owned_by(&path, uid))
            .ok()
            .flatten()
        else {
            continue;
        };
        let Ok(_locked) = pf.lock(Instant::now(), doing) else {
            continue;
        };
        if !pf.named() {
            continue;
        }
        let Some(found) = judge(&pf) else {
            continue;
        };
        if !dry_run && !pf.remove_name()? {
            continue;
        }
        removed.push(DeadName {
            name,
            path: pf.path().to_path_buf(),
            uid,
            found,
        });
    }
    Ok(removed)
}
