//! Removing the names of channels whose publisher is gone: what a crashed
//! publisher leaves in `/dev/shm` (`halctl shm gc`). Each name is judged
//! and removed under its lock, by name only while the name still leads to
//! the file judged: a publisher that replaces the name meanwhile keeps its
//! own.

use std::path::PathBuf;
use std::time::Instant;

use super::file;
use crate::kit::os::{self, PrivateFile};
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
    /// The process id of its publisher, which is gone.
    pub publisher: u32,
}

/// Remove the names of the calling user's channels whose publisher is gone
/// (its process, by pid and start time, or its channel closed); with
/// `dry_run`, only say which. A live publisher's name, a name another
/// process holds locked (a publisher replacing it), a file that is no
/// channel's name of this version, and a file that is not this user's
/// private file are left alone.
pub fn collect_garbage(dry_run: bool) -> Result<Vec<DeadChannel>> {
    collect_garbage_prefix("", dry_run)
}

/// [`collect_garbage`] restricted to the channels whose name starts with
/// `prefix` (an application's own namespace).
pub fn collect_garbage_prefix(prefix: &str, dry_run: bool) -> Result<Vec<DeadChannel>> {
    let mut removed = Vec::new();
    for name in os::private_names("channel")?
        .into_iter()
        .filter(|n| n.starts_with(prefix))
    {
        if let Some(dead) = collect(&name, dry_run) {
            removed.push(dead);
        }
    }
    Ok(removed)
}

/// Judge and remove channel `name`'s name: `Some` when its publisher is
/// gone (and, unless `dry_run`, the name was removed).
fn collect(name: &str, dry_run: bool) -> Option<DeadChannel> {
    let pf = PrivateFile::open(&file::path(name).ok()?).ok()??;
    // Not waited for: whoever holds it is changing the name.
    let _locked = pf
        .lock(Instant::now(), "collecting a dead channel's name")
        .ok()?;
    if !pf.named() {
        return None;
    }
    let record = file::read_record(&pf).ok()??;
    if !file::gone(&record).ok()? {
        return None;
    }
    if !dry_run {
        pf.unlink();
    }
    Some(DeadChannel {
        name: name.to_string(),
        path: pf.path().to_path_buf(),
        publisher: record.pid,
    })
}
