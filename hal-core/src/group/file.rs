//! The file a group's name stands for: the user's private file
//! `/dev/shm/.hal-group.UID.NAME` ([`PrivateFile`]), found by its name,
//! replaced when nobody alive is a member of it, and removed by the last
//! member to leave.
//!
//! Whoever judges or changes who is in a file holds its lock, and checks
//! under it that the name still leads to that file: a joiner never takes a
//! slot in a file that another process is removing.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::layout::{self, Board, Shape, SlotState, MAGIC, VERSION};
use crate::kit::os::{self, PrivateFile};
use crate::{Error, Result};

/// The kind of private file a group is.
const KIND: &str = "group";

/// The path of the group `name` of the calling user (the name checked).
pub(super) fn path(name: &str) -> Result<PathBuf> {
    os::private_path(KIND, name)
}

/// True when no live process is a member of `board`'s group.
fn abandoned(board: &Board) -> Result<bool> {
    for i in 0..board.members() {
        if board.state(i)? == SlotState::Joined {
            let (pid, start) = board.member(i)?;
            if os::process_alive(pid, start) {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// True when no slot was ever taken.
fn untouched(board: &Board) -> Result<bool> {
    for i in 0..board.members() {
        if board.state(i)? != SlotState::Free {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Join the group `name` of `shape`: open its file, or make it where there
/// is none or where nobody alive is a member of the one there, and take a
/// free slot. Answers the file, its mapping and the slot taken.
pub(super) fn join(
    name: &str,
    shape: Shape,
    deadline: Instant,
) -> Result<(PrivateFile, Board, usize)> {
    let path = path(name)?;
    let (pid, start) = os::self_identity();
    loop {
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                after: Duration::ZERO,
                what: format!("a slot in group {name:?} ({})", path.display()),
            });
        }
        let pf = match PrivateFile::open(&path)? {
            Some(pf) => pf,
            None => match PrivateFile::create(&path, shape.file_len(), &layout::new_header(shape))?
            {
                Some(pf) => pf,
                // Another process linked its file first: open that one.
                None => continue,
            },
        };
        let locked = pf.lock(deadline, "joining")?;
        if !pf.named() {
            // Removed or replaced since it was opened.
            continue;
        }
        let Some(board) = map(&pf, name)? else {
            return Err(Error::invalid(format!(
                "{} is not a group's file of this version of hal (magic, version or length \
                 differ): remove it if no older program uses it",
                path.display()
            )));
        };
        if abandoned(&board)? && (board.shape() != shape || !untouched(&board)?) {
            // What is left of a group whose members all left or died (a
            // file nobody took a slot in yet is a group being formed).
            pf.unlink();
            continue;
        }
        if board.shape() != shape {
            return Err(Error::invalid(format!(
                "group {name:?} has {} members posting up to {} bytes a round; this join asks \
                 for {} members and {} bytes (every member passes the same size and \
                 GroupOptions::max_payload)",
                board.shape().members,
                board.shape().capacity,
                shape.members,
                shape.capacity
            )));
        }
        for i in 0..board.members() {
            if board.state(i)? == SlotState::Free && board.claim(i, pid, start)? {
                drop(locked);
                return Ok((pf, board, i));
            }
        }
        let pids = (0..board.members())
            .map(|i| board.member(i).map(|(p, _)| p.to_string()))
            .collect::<Result<Vec<_>>>()?;
        return Err(Error::Busy {
            what: format!(
                "group {name:?}: its {} members (pids {}) joined already; wait until they all \
                 leave, or choose another name",
                board.members(),
                pids.join(", ")
            ),
            holders: board.members(),
        });
    }
}

/// Map `pf` after checking its header: `None` when the file is no group's
/// file of this version (wrong magic or version, or a length that differs
/// from what its header says).
fn map(pf: &PrivateFile, name: &str) -> Result<Option<Board>> {
    let mut head = [0u8; 64];
    let len = pf.size()?;
    let read = pf
        .read_head(&mut head)
        .map_err(|e| Error::invalid(format!("reading group {name:?}'s header: {e}")))?;
    let Some(header) = layout::read_header(&head[..read]) else {
        return Ok(None);
    };
    let shape = header.shape;
    if header.magic != MAGIC
        || header.version != VERSION
        || shape.members == 0
        || shape.members > layout::MAX_MEMBERS as u32
        || shape.capacity as usize > layout::MAX_PAYLOAD
        || shape.file_len() != len
    {
        return Ok(None);
    }
    Board::new(pf.map(len)?, shape).map(Some)
}

/// Leave slot `slot` of `board`: mark it left, and remove the file when no
/// live process is a member any more. A leave never waits long for the
/// lock: without it the slot is still marked, and the next joiner of the
/// name replaces the file.
pub(super) fn leave(pf: &PrivateFile, board: &Board, slot: usize) {
    let locked = pf.lock(Instant::now() + Duration::from_secs(2), "leaving");
    let _ = board.leave(slot);
    if locked.is_ok() && abandoned(board).unwrap_or(false) {
        pf.unlink();
    }
}
