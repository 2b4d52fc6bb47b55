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
    /// The process ids of the members the name lists, all gone (none where
    /// it lists none).
    pub members: Vec<u32>,
}

/// Remove the names of the calling user's groups whose every member listed
/// in the name is gone (by pid and start time); with `dry_run`, only say
/// which. A name with a live member, a name another process holds locked
/// (a member joining or leaving), a file that is no group's name of this
/// version, and a file that is not this user's private file are left alone.
pub fn collect_garbage(dry_run: bool) -> Result<Vec<DeadGroup>> {
    collect_garbage_prefix("", dry_run)
}

/// [`collect_garbage`] restricted to the groups whose name starts with
/// `prefix` (an application's own namespace).
pub fn collect_garbage_prefix(prefix: &str, dry_run: bool) -> Result<Vec<DeadGroup>> {
    let mut removed = Vec::new();
    for name in os::private_names("group")?
        .into_iter()
        .filter(|n| n.starts_with(prefix))
    {
        if let Some(dead) = collect(&name, dry_run) {
            removed.push(dead);
        }
    }
    Ok(removed)
}

/// Judge and remove group `name`'s name: `Some` when every member it lists
/// is gone (and, unless `dry_run`, the name was removed).
fn collect(name: &str, dry_run: bool) -> Option<DeadGroup> {
    let pf = PrivateFile::open(&file::path(name).ok()?).ok()??;
    // Not waited for: whoever holds it is joining or leaving.
    let _locked = pf
        .lock(Instant::now(), "collecting a dead group's name")
        .ok()?;
    if !pf.named() {
        return None;
    }
    let names = file::read_names(&pf).ok()??;
    let holders: Vec<_> = names.holders.iter().flatten().collect();
    if holders.iter().any(|h| os::process_alive(h.pid, h.start)) {
        return None;
    }
    if !dry_run {
        pf.unlink();
    }
    Some(DeadGroup {
        name: name.to_string(),
        path: pf.path().to_path_buf(),
        members: holders.iter().map(|h| h.pid).collect(),
    })
}
