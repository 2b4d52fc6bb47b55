//! The channels of this user on this machine, as their names and control
//! regions describe them: for `halctl channel ls` and for a program that looks
//! before it subscribes.

use std::sync::atomic::Ordering;

use super::file;
use super::layout::{self, Mode, PubState, SubState, MAX_SUBSCRIBERS};
use super::remote_note;
use crate::kit::os::{self, PrivateFile};
use crate::{Error, Result};

/// A channel, as its name and control region describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelInfo {
    /// The channel's name.
    pub name: String,
    /// Its publisher's process id.
    pub publisher: u32,
    /// Whether the publisher is alive and has not closed the channel.
    pub open: bool,
    /// Broadcast or queue.
    pub mode: Mode,
    /// How many slots, and their size.
    pub slots: usize,
    /// The size of a slot in bytes.
    pub slot_size: u64,
    /// How many samples were published.
    pub published: u64,
    /// The slots whose sample a subscriber still holds or is still to receive.
    pub slots_in_use: usize,
    /// The process ids of the subscribers (live ones), remote ones' proxies
    /// included.
    pub subscribers: Vec<u32>,
    /// The subscribers among them that forward the samples to a subscriber
    /// on another host, with that host's address, as the process that
    /// offers the channel on the network recorded them ([`RemoteNote`](super::RemoteNote)).
    pub remote_subscribers: Vec<RemoteSubscriberInfo>,
}

/// A subscriber of a channel that forwards its samples to a subscriber on
/// another host ([`RemoteNote`](super::RemoteNote)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemoteSubscriberInfo {
    /// The process id of the local subscriber that forwards the samples
    /// (the process that offers the channel).
    pub pid: u32,
    /// The remote subscriber's address (`IP:PORT`), as its connection
    /// came from.
    pub host: String,
}

/// The channels of the calling user: every channel name in the user's
/// directory (`/dev/shm/.hal-UID`), in name order (one whose publisher is gone with what its name says:
/// not open, nothing published or held). A file that cannot be read as a
/// channel's name is left out.
pub fn list() -> Result<Vec<ChannelInfo>> {
    let mut out = Vec::new();
    for name in os::private_names(file::KIND)? {
        if let Ok(Some(info)) = describe(&name) {
            out.push(info);
        }
    }
    Ok(out)
}

fn describe(name: &str) -> Result<Option<ChannelInfo>> {
    let Some(pf) = PrivateFile::open(&file::path(name)?)? else {
        return Ok(None);
    };
    let Some(record) = file::read_record(&pf)? else {
        return Ok(None);
    };
    let shape = record.shape;
    let mut info = ChannelInfo {
        name: name.to_string(),
        publisher: record.pid,
        open: false,
        mode: shape.mode,
        slots: shape.slots as usize,
        slot_size: shape.slot_size,
        published: 0,
        slots_in_use: 0,
        subscribers: Vec::new(),
        remote_subscribers: Vec::new(),
    };
    // A publisher that is gone took its control region along: what its
    // name says is all there is.
    let control = match file::map_region(&record) {
        Ok(control) => control,
        Err(Error::Closed { .. }) => return Ok(Some(info)),
        Err(e) => return Err(e),
    };
    let (_, start, state) = control.publisher()?;
    for i in 0..control.slots() {
        let (_, pending) = layout::split(control.sample_word(i)?.load(Ordering::Acquire));
        if pending != 0 {
            info.slots_in_use += 1;
        }
    }
    let notes = remote_note::read(name);
    for i in 0..MAX_SUBSCRIBERS {
        let (pid, start, state) = control.subscriber(i)?;
        if state == SubState::Active && os::process_alive(pid, start) {
            info.subscribers.push(pid);
            // A note counts only for the subscriber that wrote it.
            if let Some(Some(n)) = notes.get(i) {
                if n.pid == pid && n.start == start {
                    info.remote_subscribers.push(RemoteSubscriberInfo {
                        pid,
                        host: n.host.clone(),
                    });
                }
            }
        }
    }
    info.open = state == PubState::Open && os::process_alive(record.pid, start);
    info.published = control.published()?;
    Ok(Some(info))
}
