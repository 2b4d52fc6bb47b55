//! The control file a channel's name stands for: the user's private file
//! `/dev/shm/.hal-channel.UID.NAME` ([`PrivateFile`]). The publisher makes
//! it (replacing one whose publisher is gone) and removes its name when it
//! closes; subscribers open it by name; the last subscriber of a channel
//! whose publisher died removes it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::layout::{self, Control, PubState, Shape, SubState, MAX_SUBSCRIBERS};
use crate::kit::os::{self, PrivateFile};
use crate::{Error, Result};

const KIND: &str = "channel";

/// The path of the channel `name` of the calling user (the name checked).
pub(super) fn path(name: &str) -> Result<PathBuf> {
    os::private_path(KIND, name)
}

/// Map `pf` after checking its first bytes: `None` when it is no channel's
/// control file of this version.
pub(super) fn map_checked(pf: &PrivateFile) -> Result<Option<Control>> {
    let mut head = [0u8; layout::HEAD_READ];
    let len = pf.size()?;
    let read = pf.read_head(&mut head)?;
    let Some(shape) = layout::read_shape(&head[..read], len) else {
        return Ok(None);
    };
    Control::new(pf.map(len)?, shape).map(Some)
}

fn not_a_channel(pf: &PrivateFile) -> Error {
    Error::invalid(format!(
        "{} is not a channel's control file of this version of hal: remove it if no older \
         program uses it",
        pf.path().display()
    ))
}

/// True when the publisher of `control` closed or its process is gone.
pub(super) fn publisher_gone(control: &Control) -> Result<bool> {
    let (pid, start, state) = control.publisher()?;
    Ok(state == PubState::Closed || !os::process_alive(pid, start))
}

/// Make the control file of channel `name` with `head` as its first bytes.
pub(super) fn create(
    name: &str,
    shape: Shape,
    head: &[u8],
    deadline: Instant,
) -> Result<(PrivateFile, Control)> {
    let path = path(name)?;
    loop {
        if let Some(pf) = PrivateFile::create(&path, shape.file_len(), head)? {
            let control = Control::new(pf.map(shape.file_len())?, shape)?;
            return Ok((pf, control));
        }
        let Some(pf) = PrivateFile::open(&path)? else {
            continue;
        };
        let _locked = pf.lock(deadline, "replacing a channel whose publisher is gone")?;
        if !pf.named() {
            continue;
        }
        let control = map_checked(&pf)?.ok_or_else(|| not_a_channel(&pf))?;
        if !publisher_gone(&control)? {
            let (pid, _, _) = control.publisher()?;
            return Err(Error::AlreadyExists {
                what: format!("channel {name:?}, published by pid {pid}"),
            });
        }
        pf.unlink();
    }
}

/// Open the control file of channel `name`.
pub(super) fn open(name: &str) -> Result<(PrivateFile, Control)> {
    let path = path(name)?;
    let pf = PrivateFile::open(&path)?.ok_or_else(|| Error::NotFound {
        what: format!(
            "channel {name:?} ({}): start its publisher first",
            path.display()
        ),
    })?;
    let control = map_checked(&pf)?.ok_or_else(|| not_a_channel(&pf))?;
    Ok((pf, control))
}

/// Remove the name when the publisher is gone and no live subscriber but
/// `except` remains (a subscriber leaving, or finding the channel dead).
pub(super) fn remove_if_unused(pf: &PrivateFile, control: &Control, except: Option<usize>) {
    let Ok(_locked) = pf.lock(Instant::now() + Duration::from_secs(2), "removing") else {
        return;
    };
    if !publisher_gone(control).unwrap_or(false) {
        return;
    }
    for i in (0..MAX_SUBSCRIBERS).filter(|&i| Some(i) != except) {
        if let Ok((pid, start, state)) = control.subscriber(i) {
            if matches!(state, SubState::Active | SubState::Joining)
                && os::process_alive(pid, start)
            {
                return;
            }
        }
    }
    pf.unlink();
}

/// Remove the name (the publisher, closing).
pub(super) fn remove(pf: &PrivateFile) {
    if let Ok(_locked) = pf.lock(Instant::now() + Duration::from_secs(2), "closing") {
        pf.unlink();
    }
}
