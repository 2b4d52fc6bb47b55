//! A channel's control region and its name. The region is a memfd of the
//! publisher's, sealed against shrinking and growing; its name is the
//! user's private file `/dev/shm/.hal-UID/channel.NAME` ([`PrivateFile`]),
//! which holds where the region is ([`Record`]). The publisher makes both
//! (replacing a name whose publisher is gone) and removes the name when it
//! closes; subscribers open the region through the name; whoever finds the
//! name of a publisher that is gone removes it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::layout::{self, Control, PubState, Shape};
use super::record::{self, Record};
use crate::kit::os::peer_region;
use crate::kit::os::{self, PrivateFile};
use crate::{Error, Result};

/// The kind of private file a channel's name is.
pub(super) const KIND: &str = "channel";

/// The path of the channel `name` of the calling user (the name checked).
pub(super) fn path(name: &str) -> Result<PathBuf> {
    os::private_path(KIND, name)
}

/// The record a name file holds: `None` when it holds no record of this
/// version.
pub(super) fn read_record(pf: &PrivateFile) -> Result<Option<Record>> {
    if pf.size()? != record::LEN as u64 {
        return Ok(None);
    }
    let mut bytes = [0u8; record::LEN];
    let read = pf.read_head(&mut bytes)?;
    Ok(Record::decode(&bytes[..read]))
}

/// Open and map the control region `record` names, after checking that it
/// is the region the record names (its identity), sealed against
/// shrinking and growing, of the record's shape, and that its head states
/// that shape.
pub(super) fn map_region(record: &Record) -> Result<Control> {
    let len = record.shape.file_len();
    let (_fd, map) = peer_region::map_peer_region(&record.region(), len, "a channel's name")?;
    let mut head = [0u8; layout::HEAD_READ];
    map.read(0, &mut head)?;
    if layout::read_shape(&head, len) != Some(record.shape) {
        return Err(Error::invalid(
            "a channel's name leads to a control region whose head states another shape than \
             the name: the name was written by another process"
                .to_string(),
        ));
    }
    Control::new(map, record.shape)
}

fn not_a_channel(pf: &PrivateFile) -> Error {
    Error::invalid(format!(
        "{} is not a channel's name of this version of hal: remove it if no older program \
         uses it",
        pf.path().display()
    ))
}

/// True when the publisher of `control` closed or its process is gone.
pub(super) fn publisher_gone(control: &Control) -> Result<bool> {
    let (pid, start, state) = control.publisher()?;
    Ok(state == PubState::Closed || !os::process_alive(pid, start))
}

/// A new channel's control region, `shape` with `head` as its first
/// bytes, sealed against shrinking and growing, and mapped; its
/// descriptor and identity.
fn new_region(shape: Shape, head: &[u8]) -> Result<(OwnedFd, Control, (u64, u64))> {
    let (fd, map, id) = peer_region::new_sealed_region("hal-channel", shape.file_len())?;
    map.write(0, head)?;
    Ok((fd, Control::new(map, shape)?, id))
}

/// Make channel `name`: its control region with `head` as its first bytes,
/// and its name. The region's descriptor must stay open while the name
/// stands: subscribers open it through `/proc`.
pub(super) fn create(
    name: &str,
    shape: Shape,
    head: &[u8],
    deadline: Instant,
) -> Result<(PrivateFile, Control, OwnedFd)> {
    let path = path(name)?;
    let (fd, control, (dev, ino)) = new_region(shape, head)?;
    let (pid, start) = os::self_identity();
    let record = Record {
        pid,
        fd: fd.as_raw_fd() as u32,
        start,
        dev,
        ino,
        shape,
    };
    loop {
        if let Some(pf) = PrivateFile::create(&path, record::LEN as u64, &record.encode())? {
            return Ok((pf, control, fd));
        }
        let Some(pf) = PrivateFile::open(&path)? else {
            continue;
        };
        let _locked = pf.lock(deadline, "replacing a channel whose publisher is gone")?;
        if !pf.named() {
            continue;
        }
        let other = read_record(&pf)?.ok_or_else(|| not_a_channel(&pf))?;
        if !gone(&other)? {
            return Err(Error::AlreadyExists {
                what: format!("channel {name:?}, published by pid {}", other.pid),
            });
        }
        pf.unlink();
    }
}

/// True when the publisher `record` names is gone: its process is, or its
/// region says it closed.
pub(super) fn gone(record: &Record) -> Result<bool> {
    if !os::process_alive(record.pid, record.start) {
        return Ok(true);
    }
    match map_region(record) {
        Ok(control) => publisher_gone(&control),
        Err(Error::Closed { .. }) => Ok(true),
        Err(e) => Err(e),
    }
}

/// Open channel `name`: its name and its control region.
/// [`Error::NotFound`] without a name; [`Error::Closed`] when its
/// publisher is gone (whose name is then removed).
pub(super) fn open(name: &str) -> Result<(PrivateFile, Control)> {
    let path = path(name)?;
    let pf = PrivateFile::open(&path)?.ok_or_else(|| Error::NotFound {
        what: format!(
            "channel {name:?} ({}): start its publisher first",
            path.display()
        ),
    })?;
    let record = read_record(&pf)?.ok_or_else(|| not_a_channel(&pf))?;
    let closed = |pid: u32| Error::Closed {
        what: format!("channel {name:?}: its publisher (pid {pid}) is gone"),
    };
    let control = match map_region(&record) {
        Ok(control) => control,
        Err(Error::Closed { .. }) => {
            remove_if_gone(&pf, None);
            return Err(closed(record.pid));
        }
        Err(e) => return Err(e),
    };
    if publisher_gone(&control)? {
        remove_if_gone(&pf, Some(&control));
        return Err(closed(record.pid));
    }
    Ok((pf, control))
}

/// Remove the name when its publisher is gone (`control`: its region, where
/// this process has it): nobody can subscribe any more, and the members
/// that are there keep their mappings.
pub(super) fn remove_if_gone(pf: &PrivateFile, control: Option<&Control>) {
    let Ok(_locked) = pf.lock(Instant::now() + Duration::from_secs(2), "removing") else {
        return;
    };
    let gone = match control {
        Some(c) => publisher_gone(c).unwrap_or(false),
        None => matches!(read_record(pf), Ok(Some(r)) if gone(&r).unwrap_or(false)),
    };
    if gone {
        pf.unlink();
    }
}

/// Remove the name (the publisher, closing).
pub(super) fn remove(pf: &PrivateFile) {
    if let Ok(_locked) = pf.lock(Instant::now() + Duration::from_secs(2), "closing") {
        pf.unlink();
    }
}
