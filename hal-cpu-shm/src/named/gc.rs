//! Listing the regions this library created, and removing those whose
//! creator has died.

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hal_core::kit::os;
use hal_core::{Error, Result};
use nix::errno::Errno;

use super::meta::{lock_meta, meta_trusted, open_meta, pid_namespace, read_meta, Meta};
use super::name::{
    euid, meta_path, region_id, shm_error, shm_path, validate_name, META_PREFIX, SHM_DIR,
};

/// A region this library created, as [`list_regions`] sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionInfo {
    /// The name (`/dev/shm/NAME`).
    pub name: String,
    /// The stable integer id of the name ([`region_id`]).
    pub id: u64,
    /// Size in bytes (the object's current size when it exists).
    pub size: u64,
    /// The owner's uid.
    pub uid: u32,
    /// The creating process.
    pub owner_pid: u32,
    /// The creating process's start time (clock ticks since boot).
    pub owner_start: u64,
    /// True while the creator runs, and when it cannot be judged (it lives
    /// in another pid namespace). Regions with a live owner are never
    /// collected.
    pub alive: bool,
    /// True when the region object exists and is the one the metadata
    /// describes; false for metadata left behind by a removed region.
    pub present: bool,
    /// When the region was created.
    pub created: SystemTime,
}

/// What a cleanup removes for one entry: the region with its metadata, or
/// the metadata alone. [`RegionInfo::collected`] tells which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collected {
    /// The region object and its metadata: the region was the one the
    /// metadata describes.
    RegionAndMetadata,
    /// Only the stale metadata: no region by that name was the one it
    /// describes (it was gone, or the name leads to another object, perhaps
    /// another user's, which the cleanup left alone).
    StaleMetadataOnly,
}

impl RegionInfo {
    /// For an entry that [`collect_garbage`] (or its variants) returned:
    /// what it removed, judged at the removal itself (with `dry_run`: what
    /// it would remove). For an entry of [`list_regions`]: what a cleanup
    /// would remove once the creator is dead. Never report a region as
    /// removed unless this is [`Collected::RegionAndMetadata`].
    pub fn collected(&self) -> Collected {
        if self.present {
            Collected::RegionAndMetadata
        } else {
            Collected::StaleMetadataOnly
        }
    }
}

/// Every region this library created that this user can see, by name.
/// Regions without the library's metadata are not listed, nor are those
/// whose metadata file is not owned by the uid it records (anyone may create
/// files in [`SHM_DIR`]); a process other than root sees only its own user's.
pub fn list_regions() -> Result<Vec<RegionInfo>> {
    Ok(listed()?.into_iter().map(|(info, _)| info).collect())
}

/// [`list_regions`], with the metadata each entry was made from.
fn listed() -> Result<Vec<(RegionInfo, Meta)>> {
    let dir = match std::fs::read_dir(SHM_DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("listing {SHM_DIR}"), e)),
    };
    let me = euid();
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str().and_then(|n| n.strip_prefix(META_PREFIX)) else {
            continue;
        };
        if validate_name(name).is_err() {
            continue;
        }
        let Ok(Some((meta, file_uid))) = read_meta(name) else {
            continue;
        };
        if !meta_trusted(file_uid, meta.uid, me) {
            continue;
        }
        out.push((info_of(name, &meta), meta));
    }
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok(out)
}

pub(super) fn info_of(name: &str, meta: &Meta) -> RegionInfo {
    let region = std::fs::symlink_metadata(format!("{SHM_DIR}/{name}")).ok();
    let present = region.as_ref().is_some_and(|m| {
        m.file_type().is_file() && m.ino() == meta.ino && m.dev() == meta.dev && m.uid() == meta.uid
    });
    let size = match (&region, present) {
        (Some(m), true) => m.len(),
        _ => meta.size,
    };
    let alive = if meta.pidns != 0 && meta.pidns != pid_namespace() {
        true
    } else {
        os::process_alive(meta.pid, meta.start)
    };
    RegionInfo {
        name: name.to_owned(),
        id: region_id(name),
        size,
        uid: meta.uid,
        owner_pid: meta.pid,
        owner_start: meta.start,
        alive,
        present,
        created: UNIX_EPOCH + Duration::from_secs(meta.created),
    }
}

/// Remove the regions (and metadata) this library created whose creator has
/// died; with `dry_run`, only say which. Returns what was (or would be)
/// removed: each entry's [`RegionInfo::collected`] says whether the region
/// went with its metadata or only stale metadata did (its `present` is
/// judged at the removal, under the metadata's lock). Never touches a live creator's region, a region without the
/// library's metadata, or a region that is not the object its metadata
/// describes (only the stale metadata goes then).
///
/// Run as root, it removes the regions of every user, each as that user: a
/// region and its metadata are removed only when both files belong to the
/// uid the metadata records, and the removal runs with the file-system uid
/// set to that uid, so that the kernel (the sticky bit of [`SHM_DIR`])
/// refuses it should the name pass to another user's object in the
/// meantime. Metadata that another user planted beside someone's object
/// therefore never gets that object removed. Metadata that another process
/// holds locked (a creator replacing it, another cleanup) is left for a
/// later run.
pub fn collect_garbage(dry_run: bool) -> Result<Vec<RegionInfo>> {
    collect_garbage_prefix("", dry_run)
}

/// [`collect_garbage`] restricted to the regions whose name starts with
/// `prefix` (an application's own namespace).
pub fn collect_garbage_prefix(prefix: &str, dry_run: bool) -> Result<Vec<RegionInfo>> {
    collect_where(dry_run, |name| name.starts_with(prefix))
}

/// [`collect_garbage`] restricted to the regions named in `names`.
pub fn collect_garbage_named(names: &[String], dry_run: bool) -> Result<Vec<RegionInfo>> {
    for n in names {
        validate_name(n)?;
    }
    collect_where(dry_run, |name| names.iter().any(|n| n == name))
}

fn collect_where(dry_run: bool, chosen: impl Fn(&str) -> bool) -> Result<Vec<RegionInfo>> {
    let me = euid();
    let mut removed = Vec::new();
    for (info, meta) in listed()? {
        if info.alive || !chosen(&info.name) {
            continue;
        }
        if dry_run {
            removed.push(info);
        } else if let Some(done) = remove_stale(&info.name, &meta, me)? {
            removed.push(done);
        }
    }
    Ok(removed)
}

/// Remove region `name` and its metadata, or the metadata alone when the
/// region is not the object it describes, if the metadata still is `listed`
/// and its creator is dead. Returns the entry as judged at the removal, its
/// `present` true only when the region object itself was unlinked. `None`
/// when something changed since the listing (or the kernel refused):
/// nothing was removed then.
fn remove_stale(name: &str, listed: &Meta, me: u32) -> Result<Option<RegionInfo>> {
    let Ok(Some(mf)) = open_meta(name) else {
        return Ok(None);
    };
    match &mf.meta {
        Some(m) if m == listed && meta_trusted(mf.uid, m.uid, me) => {}
        _ => return Ok(None),
    }
    if !lock_meta(name, &mf, Duration::ZERO) {
        return Ok(None);
    }
    // Judged again under the lock, from the file the name leads to.
    let mut now = info_of(name, listed);
    if now.alive {
        return Ok(None);
    }
    os::as_fs_user(listed.uid, "removing a region as its owner", || {
        if now.present {
            match nix::sys::mman::shm_unlink(shm_path(name).as_str()) {
                Ok(()) => {}
                // Someone else removed it first: only the metadata is ours.
                Err(Errno::ENOENT) => now.present = false,
                // The name passed to an object of another user since the
                // check: the kernel refused for us.
                Err(Errno::EPERM | Errno::EACCES) => return Ok(None),
                Err(e) => return Err(shm_error(e, name, "unlinking")),
            }
        }
        match nix::unistd::unlink(meta_path(name).as_str()) {
            Ok(()) | Err(Errno::ENOENT) => Ok(Some(now)),
            Err(e) => Err(Error::errno(format!("removing {}", meta_path(name)), e)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_removed_only_while_the_name_leads_to_it() {
        let name = format!("hal-unit-{}-moved", std::process::id());
        let path = meta_path(&name);
        let meta = Meta {
            uid: euid(),
            pid: 0,
            start: 0,
            size: 4096,
            created: 0,
            ino: 1,
            dev: 1,
            pidns: 0,
        };
        std::fs::write(&path, meta.encode(&name)).unwrap();
        let old = open_meta(&name).unwrap().unwrap();
        assert_eq!(old.meta.as_ref(), Some(&meta));
        // Another file takes the name: the lock on the old one is worth nothing.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, meta.encode(&name)).unwrap();
        assert!(!lock_meta(&name, &old, Duration::ZERO));
        let new = open_meta(&name).unwrap().unwrap();
        assert!(lock_meta(&name, &new, Duration::ZERO));
        // The gc does not remove metadata that differs from what it listed.
        let other = Meta {
            size: 1,
            ..meta.clone()
        };
        drop(new);
        assert!(remove_stale(&name, &other, euid()).unwrap().is_none());
        assert!(std::path::Path::new(&path).exists());
        // Nor metadata whose file is not owned by the uid it records.
        let foreign = Meta {
            uid: euid() ^ 1,
            ..meta.clone()
        };
        std::fs::write(&path, foreign.encode(&name)).unwrap();
        assert!(remove_stale(&name, &foreign, 0).unwrap().is_none());
        assert!(remove_stale(&name, &foreign, euid()).unwrap().is_none());
        assert!(std::path::Path::new(&path).exists());
        std::fs::write(&path, meta.encode(&name)).unwrap();
        // No region object is the one it describes: the metadata alone goes,
        // and the entry says so.
        let done = remove_stale(&name, &meta, euid())
            .unwrap()
            .expect("removed");
        assert!(!done.present);
        assert_eq!(done.collected(), Collected::StaleMetadataOnly);
        assert!(!std::path::Path::new(&path).exists());
    }
}
