//! Removing the names of groups whose every member is gone: what crashed
//! members leave in `/dev/shm` (`halctl shm gc`). Each name is judged and
//! removed under its lock, by name only while the name still leads to the
//! file judged: a joiner that founds the group again meanwhile keeps its
//! name.

use std::path::PathBuf;

use super::file;
use crate::kit::os;
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
/// (a member joining or leaving), and a file that is no group's name of
/// this version are left alone.
///
/// Run as root, it collects every user's names, each judged as above and
/// removed as its owner ([`kit::os::collect_dead_names`](crate::kit::os::collect_dead_names)):
/// a name counts only where its directory (`/dev/shm/.hal-UID`) and its
/// file (`group.NAME`, a regular file of mode 0600, opened without
/// following a link) are that uid's, and the unlink runs with the
/// file-system uid set to that uid, only while the name still leads to the
/// file judged.
pub fn collect_garbage(dry_run: bool) -> Result<Vec<DeadGroup>> {
    collect_garbage_prefix("", dry_run)
}

/// [`collect_garbage`] restricted to the groups whose name starts with
/// `prefix` (an application's own namespace).
pub fn collect_garbage_prefix(prefix: &str, dry_run: bool) -> Result<Vec<DeadGroup>> {
    // Read and judged under the lock, from the file the name leads to.
    let dead = os::collect_dead_names(
        file::KIND,
        prefix,
        dry_run,
        "collecting a dead group's name",
        |pf| {
            let names = file::read_names(pf).ok().flatten()?;
            let holders: Vec<_> = names.holders.iter().flatten().collect();
            (!holders.iter().any(|h| os::process_alive(h.pid, h.start)))
                .then(|| holders.iter().map(|h| h.pid).collect())
        },
    )?;
    Ok(dead
        .into_iter()
        .map(|d| DeadGroup {
            name: d.name,
            path: d.path,
            uid: d.uid,
            members: d.found,
        })
        .collect())
}
