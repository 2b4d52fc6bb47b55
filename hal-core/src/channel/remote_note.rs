//! Which of a channel's subscribers forward its samples to a subscriber on
//! another host, and that host's address: [`RemoteNote`], read back by
//! [`list`](fn@super::list).

use std::time::{Duration, Instant};

use super::layout::MAX_SUBSCRIBERS;
use super::Subscriber;
use crate::kit::os::{self, PrivateFile};
use crate::{Error, Result};

/// The kind of the notes' files (`remote.NAME`).
const KIND: &str = "remote";

/// The bytes of an entry.
const ENTRY: usize = 64;

/// The longest address an entry holds, in bytes.
const HOST: usize = ENTRY - 16;

/// The file's length.
const LEN: u64 = (MAX_SUBSCRIBERS * ENTRY) as u64;

/// How long a note waits for its file's lock.
const PATIENCE: Duration = Duration::from_secs(5);

/// The record that a subscriber forwards the channel's samples to a
/// subscriber on another host, for listings ([`list`](fn@super::list),
/// `halctl channel ls`); its entry is cleared when it drops.
///
/// A subscriber on another host is served by a local subscriber in the
/// process that offers the channel on the network (`hal::remote`). That
/// process records, for each such subscriber, its entry in the channel's
/// control region, its own identity (pid and start time) and the remote's
/// address, in one private file of the user next to the channel's name:
/// `/dev/shm/.hal-UID/remote.NAME`, [`MAX_SUBSCRIBERS`] entries of 64
/// bytes (pid `u32`, 4 bytes unused, start time `u64`, the address as
/// text of at most 48 bytes, padded with zeros). An entry counts only
/// while the control region's entry of the same index is an active
/// subscriber of the same pid and start time: one left behind by a
/// process that died is not read as another's. The file is removed with
/// its last entry, under its lock.
///
/// The channel's control region is left as it is: what is on the network
/// is the concern of the layer above, which writes the note; this layer
/// only reads it back.
#[derive(Debug)]
pub struct RemoteNote {
    file: PrivateFile,
    index: usize,
}

/// One entry read back: the pid and start time that wrote it, and the
/// remote's address.
pub(crate) struct NoteEntry {
    pub(crate) pid: u32,
    pub(crate) start: u64,
    pub(crate) host: String,
}

impl RemoteNote {
    /// Record that `subscriber`, of this process, forwards its samples to a
    /// subscriber at `host` (an address, as text, of at most 48 bytes;
    /// longer text is cut).
    pub fn record(subscriber: &Subscriber, host: &str) -> Result<RemoteNote> {
        let path = os::private_path(KIND, subscriber.name())?;
        let (pid, start) = os::self_identity();
        let mut entry = [0u8; ENTRY];
        entry[0..4].copy_from_slice(&pid.to_le_bytes());
        entry[8..16].copy_from_slice(&start.to_le_bytes());
        let mut cut = host.len().min(HOST);
        while !host.is_char_boundary(cut) {
            cut -= 1;
        }
        entry[16..16 + cut].copy_from_slice(&host.as_bytes()[..cut]);
        let index = subscriber.index();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let file = match PrivateFile::open(&path)? {
                Some(f) => Some(f),
                // `None`: another process made it first; that one is opened.
                None => PrivateFile::create(&path, LEN, &[])?,
            };
            if let Some(file) = file {
                let guard = file.lock(deadline, "recording a remote subscriber")?;
                // Its last entry's owner may have removed it meanwhile.
                if file.named() {
                    if file.size()? < LEN {
                        return Err(Error::invalid(format!(
                            "{} is shorter than {LEN} bytes: it is not a note of remote \
                             subscribers; remove it",
                            path.display()
                        )));
                    }
                    file.write_at((index * ENTRY) as u64, &entry)?;
                    drop(guard);
                    return Ok(RemoteNote { file, index });
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    after: PATIENCE,
                    what: format!("recording a remote subscriber in {}", path.display()),
                });
            }
        }
    }
}

impl Drop for RemoteNote {
    fn drop(&mut self) {
        let Ok(_guard) = self
            .file
            .lock(Instant::now() + PATIENCE, "clearing a remote subscriber")
        else {
            return;
        };
        if self
            .file
            .write_at((self.index * ENTRY) as u64, &[0u8; ENTRY])
            .is_err()
        {
            return;
        }
        let mut all = vec![0u8; LEN as usize];
        if self.file.read_head(&mut all).is_ok() && all.iter().all(|b| *b == 0) {
            self.file.unlink();
        }
    }
}

/// The entries of channel `name`'s note, by subscriber index; empty
/// where there is none.
pub(crate) fn read(name: &str) -> Vec<Option<NoteEntry>> {
    let Ok(Some(file)) = os::private_path(KIND, name).and_then(|p| PrivateFile::open(&p)) else {
        return Vec::new();
    };
    entries(&file)
}

/// The entries of the note `file`, by subscriber index.
fn entries(file: &PrivateFile) -> Vec<Option<NoteEntry>> {
    let mut all = vec![0u8; LEN as usize];
    let Ok(n) = file.read_head(&mut all) else {
        return Vec::new();
    };
    all[..n]
        .chunks_exact(ENTRY)
        .map(|e| {
            let pid = u32::from_le_bytes(e[0..4].try_into().ok()?);
            let start = u64::from_le_bytes(e[8..16].try_into().ok()?);
            let text = &e[16..];
            let end = text.iter().position(|b| *b == 0).unwrap_or(text.len());
            let host = String::from_utf8_lossy(&text[..end]).into_owned();
            (pid != 0).then_some(NoteEntry { pid, start, host })
        })
        .collect()
}

/// Remove the notes, of channels whose name starts with `prefix`, whose
/// every entry's process is gone (what an offering process killed before
/// it cleared its entries leaves); with `dry_run`, only say which. Judged
/// and removed as [`os::collect_dead_names`] does names: the channel names
/// of the notes removed, with the pids their entries named.
pub(crate) fn collect_dead(prefix: &str, dry_run: bool) -> Result<Vec<os::DeadName<Vec<u32>>>> {
    os::collect_dead_names(
        KIND,
        prefix,
        dry_run,
        "collecting a note of remote subscribers",
        |pf| {
            if pf.size().ok()? != LEN {
                return None;
            }
            let live: Vec<NoteEntry> = entries(pf).into_iter().flatten().collect();
            (!live.iter().any(|e| os::process_alive(e.pid, e.start)))
                .then(|| live.iter().map(|e| e.pid).collect())
        },
    )
}
