//! A group's name and its board: the user's private file
//! `/dev/shm/.hal-UID/group.NAME` ([`PrivateFile`]), which lists the
//! members that hold the board open (`record.rs`), and the board itself, a
//! sealed memfd ([`peer_region::new_sealed_region`]). The first joiner of a name
//! founds both; later joiners reach the board through any live member;
//! a name nobody alive holds a board for is replaced, and the last member
//! to leave removes it.
//!
//! Whoever judges or changes who is in a group holds its name's lock, and
//! checks under it that the name still leads to that file: a joiner never
//! takes a slot in a group whose name another process is removing.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::layout::{self, Board, Shape, SlotState};
use super::record::{self, Holder, Names};
use crate::kit::os::peer_region;
use crate::kit::os::{self, PrivateFile};
use crate::{Error, Result};

/// The kind of private file a group's name is.
/// The kind of private file a group's name is.
pub(super) const KIND: &str = "group";

/// The path of the group `name` of the calling user (the name checked).
pub(super) fn path(name: &str) -> Result<PathBuf> {
    os::private_path(KIND, name)
}

/// A member's hold on its group: the name, the board, its slot, and its
/// descriptor of the board, open while it is a member (later joiners may
/// reach the board through it).
#[derive(Debug)]
pub(super) struct Joined {
    pub(super) name: PrivateFile,
    pub(super) board: Board,
    pub(super) slot: usize,
    /// Held, not read: while it is open, joiners reach the board through it.
    _region: OwnedFd,
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

/// Join the group `name` of `shape`: found it where it has no name or its
/// name leads to no live member's board, or else take a free slot on the
/// board its name leads to.
pub(super) fn join(name: &str, shape: Shape, deadline: Instant) -> Result<Joined> {
    let path = path(name)?;
    let (pid, start) = os::self_identity();
    loop {
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                after: Duration::ZERO,
                what: format!("a slot in group {name:?} ({})", path.display()),
            });
        }
        let Some(pf) = PrivateFile::open(&path)? else {
            match found(&path, shape, (pid, start))? {
                Some(joined) => return Ok(joined),
                // Another process linked its name first: join that group.
                None => continue,
            }
        };
        let locked = pf.lock(deadline, "joining")?;
        if !pf.named() {
            // Removed or replaced since it was opened.
            continue;
        }
        let names = read_names(&pf)?.ok_or_else(|| {
            Error::invalid(format!(
                "{} is not a group's name of this version of hal (magic, version or length \
                 differ): remove it if no older program uses it",
                path.display()
            ))
        })?;
        let Some((region, board)) = reach(&names)? else {
            // Nobody alive holds its board: what is left of a group whose
            // members all left or died.
            pf.unlink();
            continue;
        };
        if abandoned(&board)? {
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
                let holder = Holder {
                    pid,
                    fd: region.as_raw_fd() as u32,
                    start,
                };
                if let Err(e) =
                    pf.write_at(record::entry_at(i), &record::encode_entry(Some(holder)))
                {
                    let _ = board.leave(i);
                    return Err(e);
                }
                drop(locked);
                return Ok(Joined {
                    name: pf,
                    board,
                    slot: i,
                    _region: region,
                });
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

/// Found the group of `shape` at `path`: its board, with this process
/// (`pid`, `start`) in slot 0, then its name. `None` when another process linked a name there
/// first (the board made here is dropped unseen).
fn found(path: &std::path::Path, shape: Shape, (pid, start): (u32, u64)) -> Result<Option<Joined>> {
    let (region, map, id) = peer_region::new_sealed_region("hal-group", shape.board_len())?;
    map.write(0, &layout::new_header(shape))?;
    let board = Board::new(map, shape)?;
    // Nobody else can see the board yet: the slot is this process's.
    board.claim(0, pid, start)?;
    let founder = Holder {
        pid,
        fd: region.as_raw_fd() as u32,
        start,
    };
    let names = record::encode(shape, id, founder);
    Ok(
        PrivateFile::create(path, names.len() as u64, &names)?.map(|name| Joined {
            name,
            board,
            slot: 0,
            _region: region,
        }),
    )
}

/// What the name `pf` holds: `None` when it holds no group's name of this
/// version.
pub(super) fn read_names(pf: &PrivateFile) -> Result<Option<Names>> {
    let len = pf.size()?;
    if len > record::MAX_LEN {
        return Ok(None);
    }
    let mut bytes = vec![0u8; len as usize];
    let read = pf.read_head(&mut bytes)?;
    Ok(record::decode(&bytes[..read]))
}

/// The board `names` leads to, through the first live member that holds it
/// (a descriptor of it and its mapping, its header checked); `None` when
/// no live process holds it. A live member's descriptor that is not the
/// board, or that the kernel will not open, is an error when no other
/// member's leads to the board.
fn reach(names: &Names) -> Result<Option<(OwnedFd, Board)>> {
    let mut refused = None;
    for holder in names.holders.iter().flatten() {
        if !os::process_alive(holder.pid, holder.start) {
            continue;
        }
        let at = names.region(*holder);
        let reached = peer_region::map_peer_region(&at, names.shape.board_len(), "a group's name")
            .and_then(|(fd, map)| {
                let mut head = [0u8; 16];
                map.read(0, &mut head)?;
                if layout::read_shape(&head) != Some(names.shape) {
                    return Err(Error::invalid(
                        "a group's name leads to a board whose header states another shape: \
                         the name or the board was written by another process"
                            .to_string(),
                    ));
                }
                Ok((fd, Board::new(map, names.shape)?))
            });
        match reached {
            Ok(found) => return Ok(Some(found)),
            // It left or died since.
            Err(Error::Closed { .. }) => {}
            Err(e) => {
                refused.get_or_insert(e);
            }
        }
    }
    match refused {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

/// Leave `joined`'s slot: mark it left, take this process's entry out of
/// the name, and remove the name when no live process is a member any more.
/// A leave never waits long for the lock: without it the slot is still
/// marked, and the next joiner of the name replaces what is left.
pub(super) fn leave(joined: &Joined) {
    let Joined {
        name, board, slot, ..
    } = joined;
    let locked = name.lock(Instant::now() + Duration::from_secs(2), "leaving");
    let _ = board.leave(*slot);
    // Only into a name of the group's length: a write past the end of a
    // name someone truncated would only make it longer.
    if name.size().ok() == Some(record::len(board.shape())) {
        let _ = name.write_at(record::entry_at(*slot), &record::encode_entry(None));
    }
    if locked.is_ok() && abandoned(board).unwrap_or(false) {
        name.unlink();
    }
}
