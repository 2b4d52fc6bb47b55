//! `halctl shm ls` and `halctl shm gc`: the named regions this library
//! created on this machine (those with its metadata beside them), their
//! owners, and the removal of those whose owner died, with the names of
//! this user's channels and groups whose members all died (every user's,
//! run as root).

use std::time::{SystemTime, UNIX_EPOCH};

use clap::Subcommand;
use hal::channel::{self, DeadChannel};
use hal::cpu_shm::named::{self, Collected, RegionInfo};
use hal::group::{self, DeadGroup};
use serde::Serialize;

use crate::fail::{CmdResult, Context, Fail};
use crate::out;

/// `halctl shm ...`.
#[derive(Debug, Subcommand)]
pub enum ShmCommand {
    /// List the named regions this library created (this user's; all with
    /// root), with their owner pid and whether it is alive.
    Ls {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Remove the regions whose creator has died, and (without NAMEs) this
    /// user's channel names whose publisher died and group names whose
    /// members all died (every user's, as root, each removed as its owner).
    /// Regions and names of live processes, and regions
    /// this library did not create, are never touched.
    /// Metadata whose region is gone, or whose name now leads to another
    /// object (perhaps another user's), is removed alone and reported as
    /// stale metadata: the object is left as it is.
    Gc {
        /// Only these regions (by name); default: every region of a dead
        /// owner. A name with nothing to remove (no such region, or one whose
        /// creator lives or that hal did not create) is an error (exit 1).
        #[arg(value_name = "NAME")]
        names: Vec<String>,
        /// Only say what would be removed.
        #[arg(long)]
        dry_run: bool,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Serialize)]
struct RegionOut {
    name: String,
    path: String,
    id: String,
    size: u64,
    uid: u32,
    owner_pid: u32,
    owner_start: u64,
    alive: bool,
    present: bool,
    created_unix: u64,
}

fn region_out(r: &RegionInfo) -> RegionOut {
    RegionOut {
        name: r.name.clone(),
        path: format!("{}/{}", named::SHM_DIR, r.name),
        id: format!("{:#018x}", r.id),
        size: r.size,
        uid: r.uid,
        owner_pid: r.owner_pid,
        owner_start: r.owner_start,
        alive: r.alive,
        present: r.present,
        created_unix: unix(r.created),
    }
}

#[derive(Debug, Serialize)]
struct LsOut {
    regions: Vec<RegionOut>,
}

/// One entry of `shm gc`: the region and what went (or would go).
#[derive(Debug, Serialize)]
struct GcEntry {
    #[serde(flatten)]
    region: RegionOut,
    /// `region` (the object and its metadata) or `stale-metadata` (the
    /// metadata alone; the object under that name, if any, was left alone).
    removes: &'static str,
    /// The metadata file removed with it.
    metadata: String,
}

/// A channel's or group's name that `shm gc` removed (or would remove).
#[derive(Debug, Serialize)]
struct NameEntry {
    /// `channel` or `group`.
    kind: &'static str,
    name: String,
    path: String,
    /// The owner's uid (another user's only where root collected it).
    uid: u32,
    /// The dead processes: a channel's publisher, a group's members.
    pids: Vec<u32>,
}

#[derive(Debug, Serialize)]
struct GcOut {
    dry_run: bool,
    removed: Vec<GcEntry>,
    /// The channel and group names removed.
    names: Vec<NameEntry>,
}

fn channel_entry(c: &DeadChannel) -> NameEntry {
    NameEntry {
        kind: "channel",
        name: c.name.clone(),
        path: c.path.display().to_string(),
        uid: c.uid,
        pids: vec![c.publisher],
    }
}

fn group_entry(g: &DeadGroup) -> NameEntry {
    NameEntry {
        kind: "group",
        name: g.name.clone(),
        path: g.path.display().to_string(),
        uid: g.uid,
        pids: g.members.clone(),
    }
}

/// The names of this user's channels whose publisher died and groups whose
/// members all died (every user's, run as root), removed (or, with
/// `dry_run`, that would be).
fn gc_names(dry_run: bool) -> CmdResult<Vec<NameEntry>> {
    let channels = channel::collect_garbage(dry_run).ctx("collecting dead channels' names")?;
    let groups = group::collect_garbage(dry_run).ctx("collecting dead groups' names")?;
    Ok(channels
        .iter()
        .map(channel_entry)
        .chain(groups.iter().map(group_entry))
        .collect())
}

fn gc_entry(r: &RegionInfo) -> GcEntry {
    GcEntry {
        region: region_out(r),
        removes: match r.collected() {
            Collected::RegionAndMetadata => "region",
            Collected::StaleMetadataOnly => "stale-metadata",
        },
        metadata: format!("{}/{}{}", named::SHM_DIR, named::META_PREFIX, r.name),
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `YYYY-MM-DD HH:MM:SS` UTC for seconds since the epoch.
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Days to a civil date (proleptic Gregorian), after Howard Hinnant.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn state(r: &RegionOut) -> String {
    let mut s = if r.alive { "alive" } else { "dead" }.to_string();
    if !r.present {
        s.push_str(" (region missing: stale metadata)");
    }
    s
}

/// The owner's pid, or `unknown` where the metadata records none (0).
fn owner(pid: u32) -> String {
    if pid == 0 {
        "unknown".to_string()
    } else {
        pid.to_string()
    }
}

/// The creation date, or `unknown` where the metadata records none (0).
fn created(secs: u64) -> String {
    if secs == 0 {
        "unknown".to_string()
    } else {
        utc(secs)
    }
}

fn table(regions: &[RegionOut]) -> CmdResult {
    out::line(format!(
        "{:<32} {:>10} {:>9}  {:<20} STATE",
        "NAME", "SIZE", "OWNER", "CREATED (UTC)"
    ))?;
    for r in regions {
        out::line(format!(
            "{:<32} {:>10} {:>9}  {:<20} {}",
            r.name,
            out::bytes(r.size),
            owner(r.owner_pid),
            created(r.created_unix),
            state(r)
        ))?;
    }
    Ok(())
}

/// Collect the regions of dead owners, all of them or only those named,
/// with the library's checks (see [`named::collect_garbage`]): the region
/// with its metadata when the region is the one the metadata describes, the
/// stale metadata alone otherwise (a region re-created under the same name
/// by someone else is left alone).
fn gc(names: &[String], dry_run: bool) -> CmdResult<Vec<RegionInfo>> {
    if names.is_empty() {
        return named::collect_garbage(dry_run).ctx("collecting regions of dead owners");
    }
    named::collect_garbage_named(names, dry_run).ctx("shm gc")
}

/// Run `halctl shm ...`.
pub fn run(cmd: &ShmCommand) -> CmdResult {
    match *cmd {
        ShmCommand::Ls { json } => {
            let regions: Vec<RegionOut> = named::list_regions()
                .ctx("listing named regions")?
                .iter()
                .map(region_out)
                .collect();
            if json {
                return out::json(&LsOut { regions });
            }
            if regions.is_empty() {
                return out::line(format!(
                    "no named regions created by hal in {}",
                    named::SHM_DIR
                ));
            }
            table(&regions)
        }
        ShmCommand::Gc {
            ref names,
            dry_run,
            json,
        } => {
            let done = gc(names, dry_run)?;
            let missed = not_collected(names, &done);
            let removed: Vec<GcEntry> = done.iter().map(gc_entry).collect();
            // NAMEs name regions: the channels and groups are collected
            // only in a run over everything.
            let dead_names = if names.is_empty() {
                gc_names(dry_run)?
            } else {
                Vec::new()
            };
            if json {
                out::json(&GcOut {
                    dry_run,
                    removed,
                    names: dead_names,
                })?;
            } else {
                print_gc(&removed, dry_run, names.is_empty() && dead_names.is_empty())?;
                print_names(&dead_names, dry_run)?;
            }
            match missed {
                Some(m) => Err(Fail::failed(m)),
                None => Ok(()),
            }
        }
    }
}

fn print_gc(removed: &[GcEntry], dry_run: bool, everything: bool) -> CmdResult {
    let verb = if dry_run { "would remove" } else { "removed" };
    if removed.is_empty() {
        if everything {
            return out::line(format!(
                "nothing to remove: no region of a dead owner, nor a channel or group name \
                 of dead members ({verb} 0)"
            ));
        }
        return Ok(());
    }
    for e in removed {
        let r = &e.region;
        let who = match r.owner_pid {
            0 => "its owner is unknown".to_string(),
            pid => format!("owner pid {pid} is dead"),
        };
        out::line(match e.removes {
            "region" => format!(
                "{verb} region {} and its metadata ({}, {who})",
                r.path,
                out::bytes(r.size)
            ),
            _ => format!(
                "{verb} stale metadata {} ({who}); no region removed: {} is not the region \
                 it describes (gone, or another object, left alone)",
                e.metadata, r.path
            ),
        })?;
    }
    Ok(())
}

fn print_names(dead: &[NameEntry], dry_run: bool) -> CmdResult {
    let verb = if dry_run { "would remove" } else { "removed" };
    let me = nix::unistd::geteuid().as_raw();
    for n in dead {
        // Another user's name (root collects every user's): whose it is.
        let owner = if n.uid == me {
            String::new()
        } else {
            format!("owner uid {}, ", n.uid)
        };
        let who = match (n.kind, n.pids.as_slice()) {
            ("channel", [pid]) => format!("publisher pid {pid} is gone"),
            (_, []) => "it lists no member".to_string(),
            (_, [pid]) => format!("member pid {pid} is gone"),
            (_, pids) => format!(
                "member pids {} are gone",
                pids.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        out::line(format!(
            "{verb} {} name {} ({owner}{}, {who})",
            n.kind, n.name, n.path
        ))?;
    }
    Ok(())
}

/// The names given to `shm gc` that it did not collect, with why, as one
/// line; `None` when every name given was collected (or none was given).
fn not_collected(names: &[String], done: &[RegionInfo]) -> Option<String> {
    let listed = named::list_regions().unwrap_or_default();
    let why: Vec<String> = names
        .iter()
        .filter(|n| !done.iter().any(|r| &r.name == *n))
        .map(|n| match listed.iter().find(|r| &r.name == n) {
            Some(r) if r.alive => format!("{n}: its creator (pid {}) is alive", r.owner_pid),
            Some(_) => format!("{n}: it changed during the cleanup; try again"),
            None if std::path::Path::new(&format!("{}/{n}", named::SHM_DIR)).exists() => {
                format!("{n}: hal did not create it (or it belongs to another user); left alone")
            }
            None => format!("{n}: no such region in {}", named::SHM_DIR),
        })
        .collect();
    if why.is_empty() {
        None
    } else {
        Some(format!("nothing removed for {}", why.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20");
    }
}
