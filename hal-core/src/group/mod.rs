//! A rendezvous of N processes: they join a group by name, learn their
//! rank and each other's pids, and exchange small payloads (handles, most
//! often) with [`Group::all_gather`] and [`Group::broadcast`], or wait for
//! each other with [`Group::barrier`].
//!
//! This is what runtimes with one process per GPU or per NUMA node do by
//! hand before they share anything: every worker exports its buffer and
//! all-gathers the handles over a side channel.
//!
//! - **Ranks** are given in the order the members join (0, 1, ...); a join
//!   returns once all `size` members joined.
//! - **Every wait has a timeout** ([`GroupOptions::timeout`], 60 s unless
//!   set). A member that dies before or during an exchange makes the
//!   others' call fail with [`Error::Closed`] naming its rank and pid
//!   within about 10 ms; one that never comes makes them fail with
//!   [`Error::Timeout`] naming it. After such a failure the group is
//!   broken: its members drop their [`Group`] and join again.
//! - **Private to its user**: the group's name is
//!   `/dev/shm/.hal-UID/group.NAME`, mode 0600; a file of that name that
//!   another user owns, or that others may open, is refused
//!   ([`Error::PermissionDenied`]).
//! - **Reusable**: the last member to leave removes the name; a name whose
//!   members all died is replaced by the next join, or removed by
//!   [`collect_garbage`] (`halctl shm gc`).
//! - **Hostile peers**: the members work on a board in a memfd sealed
//!   against shrinking and growing, which the first joiner makes and every
//!   member holds open; the name lists the members, and joiners reach the
//!   board through a live member's descriptor (`/proc/PID/fd/N`: members
//!   are the same user's and dumpable, as processes are unless they changed
//!   credentials or said otherwise). A process that writes the board can
//!   make the others' calls fail or time out, never hang past their
//!   timeout, crash, or read out of bounds (every length is checked against
//!   the group's capacity); one that truncates or rewrites the name can
//!   make new joins fail, and the members go on.
//! - **Fork**: a [`Group`] belongs to the process that joined; in a forked
//!   child its calls answer [`Error::Forked`] and its drop leaves the
//!   parent's membership alone.
//!
//! ```no_run
//! use hal_core::group::{Group, GroupOptions};
//!
//! // In each of 4 processes:
//! let mut group = Group::join("model-shards", 4, &GroupOptions::default())?;
//! let mine = format!("handle of rank {}", group.rank());
//! let all = group.all_gather(mine.as_bytes())?;
//! assert_eq!(all.len(), 4);
//! let root_says = group.broadcast(0, b"weights are ready")?;
//! group.barrier()?;
//! # let _ = root_says;
//! # Ok::<(), hal_core::Error>(())
//! ```

mod file;
mod gc;
pub(crate) mod layout;
pub(crate) mod record;
mod round;

use std::time::{Duration, Instant};

use crate::kit::os::Origin;
use crate::{Error, Result};
use layout::{Shape, SlotState};
use round::{wait_for_members, Ready};

pub use gc::{collect_garbage, collect_garbage_prefix, DeadGroup};
pub use layout::{MAX_MEMBERS, MAX_PAYLOAD};

/// How a process joins a group.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GroupOptions {
    /// How long any call waits for the other members (60 s unless set).
    pub timeout: Duration,
    /// The most bytes a member may post in one round (4096 unless set, at
    /// most [`MAX_PAYLOAD`]); every member passes the same value.
    pub max_payload: usize,
    /// How long a wait spins before it sleeps (20 µs unless set).
    pub spin: Duration,
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            timeout: Duration::from_secs(60),
            max_payload: 4096,
            spin: Duration::from_micros(20),
        }
    }
}

impl GroupOptions {
    /// Set [`GroupOptions::timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Set [`GroupOptions::max_payload`].
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// Set [`GroupOptions::spin`].
    pub fn spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }
}

/// A member of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Its rank: the order in which it joined, from 0.
    pub rank: usize,
    /// Its process id.
    pub pid: u32,
}

/// This process's membership of a group; dropping it leaves the group.
#[derive(Debug)]
#[must_use = "dropping a Group leaves it at once"]
pub struct Group {
    name: String,
    /// The name's file, the board, the slot (the rank) and the board's
    /// descriptor.
    joined: file::Joined,
    members: Vec<Member>,
    /// Rounds this member completed.
    round: u32,
    options: GroupOptions,
    /// The process that joined.
    origin: Origin,
    /// Why the group cannot go on, after a failed wait.
    broken: Option<String>,
}

impl Group {
    /// Join the group `name` of `size` members, and wait until all joined.
    ///
    /// Errors: [`Error::InvalidArgument`] for a bad name or size, or a group
    /// of that name with another size or payload limit whose members are
    /// alive; [`Error::Busy`] when all its slots are taken;
    /// [`Error::Closed`] when a member died before the group formed;
    /// [`Error::Timeout`] when not all came in time.
    pub fn join(name: &str, size: usize, options: &GroupOptions) -> Result<Group> {
        file::path(name)?;
        if size == 0 || size > MAX_MEMBERS {
            return Err(Error::invalid(format!(
                "a group of {size} members: a group has 1 to {MAX_MEMBERS}"
            )));
        }
        if options.max_payload > MAX_PAYLOAD {
            return Err(Error::invalid(format!(
                "a payload limit of {} bytes is over the most, {MAX_PAYLOAD}",
                options.max_payload
            )));
        }
        let shape = Shape {
            members: size as u32,
            capacity: options.max_payload as u32,
        };
        let deadline = Instant::now() + options.timeout;
        let joined = file::join(name, shape, deadline)?;
        let rank = joined.slot;
        let mut group = Group {
            name: name.to_string(),
            joined,
            members: Vec::new(),
            round: 0,
            options: options.clone(),
            origin: Origin::here(),
            broken: None,
        };
        let what = format!("group {name:?} to form");
        let board = &group.joined.board;
        let waited = wait_for_members(
            board,
            rank,
            &what,
            options.spin,
            deadline.saturating_duration_since(Instant::now()),
            |i| {
                Ok(match board.state(i)? {
                    SlotState::Free => Ready::Pending,
                    SlotState::Joined | SlotState::Left => Ready::Yes,
                    SlotState::Bad(v) => return Err(corrupt(name, i, v)),
                })
            },
        );
        // On failure the group drops here and leaves its slot.
        waited?;
        group.members = (0..size)
            .map(|i| {
                let (pid, _) = group.joined.board.member(i)?;
                Ok(Member { rank: i, pid })
            })
            .collect::<Result<_>>()?;
        Ok(group)
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This member's rank.
    pub fn rank(&self) -> usize {
        self.joined.slot
    }

    /// How many members the group has.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Every member, by rank (this one included).
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Post `data` and receive every member's, by rank (this one's
    /// included). Every member calls it; the payloads may differ in length,
    /// up to [`GroupOptions::max_payload`].
    pub fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let round = self.exchange(data)?;
        (0..self.size())
            .map(|i| {
                if i == self.rank() {
                    Ok(data.to_vec())
                } else {
                    self.joined.board.payload(i, round)
                }
            })
            .collect()
    }

    /// Receive what the member of rank `root` posts. Every member calls it;
    /// `data` is posted by `root` and ignored elsewhere (pass `&[]`).
    pub fn broadcast(&mut self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        if root >= self.size() {
            return Err(Error::invalid(format!(
                "a broadcast from rank {root} in a group of {}",
                self.size()
            )));
        }
        let mine = if root == self.rank() { data } else { &[] };
        let round = self.exchange(mine)?;
        if root == self.rank() {
            Ok(data.to_vec())
        } else {
            self.joined.board.payload(root, round)
        }
    }

    /// Wait until every member called `barrier`.
    pub fn barrier(&mut self) -> Result<()> {
        self.exchange(&[]).map(drop)
    }

    /// Post this member's next round and wait until every member posted
    /// it; answers the round's number.
    fn exchange(&mut self, data: &[u8]) -> Result<u32> {
        self.origin
            .check(format_args!("membership of group {:?}", self.name))?;
        if let Some(why) = &self.broken {
            return Err(Error::Closed {
                what: format!(
                    "group {:?} is broken ({why}): leave and join again",
                    self.name
                ),
            });
        }
        let round = self.round.checked_add(1).ok_or_else(|| {
            Error::invalid(format!("group {:?} ran out of round numbers", self.name))
        })?;
        self.joined.board.post(self.rank(), round, data)?;
        let what = format!("round {round} of group {:?}", self.name);
        let board = &self.joined.board;
        let name = &self.name;
        let waited = wait_for_members(
            board,
            self.rank(),
            &what,
            self.options.spin,
            self.options.timeout,
            |i| {
                if board.round(i)? >= round {
                    return Ok(Ready::Yes);
                }
                match board.state(i)? {
                    SlotState::Joined => Ok(Ready::Pending),
                    SlotState::Left => Err(Error::Closed {
                        what: format!(
                            "round {round} of group {name:?}: member {i} left before it posted"
                        ),
                    }),
                    SlotState::Free => Err(corrupt(name, i, 0)),
                    SlotState::Bad(v) => Err(corrupt(name, i, v)),
                }
            },
        );
        match waited {
            Ok(()) => {
                self.round = round;
                Ok(round)
            }
            Err(e) => {
                self.broken = Some(e.to_string());
                Err(e)
            }
        }
    }
}

/// The error of a slot whose state no member writes.
fn corrupt(name: &str, i: usize, state: u32) -> Error {
    Error::invalid(format!(
        "group {name:?}: member {i}'s slot holds state {state}, which no member writes: the \
         group's board was written by something other than its members"
    ))
}

impl Drop for Group {
    fn drop(&mut self) {
        // A forked child's copy leaves nothing: the slot is its parent's.
        if !self.origin.forked() {
            file::leave(&self.joined);
        }
    }
}

#[cfg(test)]
mod tests;
