//! Groups as a door holds them: a membership of a group on one host
//! ([`Group`]) or across hosts (feature `ucx`), with what it told at the
//! join, until it is left.

use std::sync::Mutex;

use hal_core::group::{Group, Member};
use hal_core::{Error, Result};

/// The calls every group answers, on one host or across hosts.
pub trait Collective: Send {
    /// A member, as the join tells it.
    type Member: Clone + Send + Sync;

    /// Every member, by rank.
    fn members(&self) -> &[Self::Member];

    /// This member's rank.
    fn rank(&self) -> usize;

    /// Post `data` and receive every member's, by rank.
    fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>>;

    /// Receive what the member of rank `root` posts (`data`, at `root`).
    fn broadcast(&mut self, root: usize, data: &[u8]) -> Result<Vec<u8>>;

    /// Wait until every member called it.
    fn barrier(&mut self) -> Result<()>;
}

impl Collective for Group {
    type Member = Member;

    fn members(&self) -> &[Member] {
        Group::members(self)
    }
    fn rank(&self) -> usize {
        Group::rank(self)
    }
    fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        Group::all_gather(self, data)
    }
    fn broadcast(&mut self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        Group::broadcast(self, root, data)
    }
    fn barrier(&mut self) -> Result<()> {
        Group::barrier(self)
    }
}

#[cfg(feature = "ucx")]
impl Collective for hal_ucx::RemoteGroup {
    type Member = hal_ucx::RemoteMember;

    fn members(&self) -> &[hal_ucx::RemoteMember] {
        hal_ucx::RemoteGroup::members(self)
    }
    fn rank(&self) -> usize {
        hal_ucx::RemoteGroup::rank(self)
    }
    fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        hal_ucx::RemoteGroup::all_gather(self, data)
    }
    fn broadcast(&mut self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        hal_ucx::RemoteGroup::broadcast(self, root, data)
    }
    fn barrier(&mut self) -> Result<()> {
        hal_ucx::RemoteGroup::barrier(self)
    }
}

/// A membership, what it told at the join, and how the door names it (for
/// the error once it was left). One call at a time runs on it.
pub struct GroupObj<G: Collective> {
    group: Mutex<Option<G>>,
    members: Vec<G::Member>,
    rank: usize,
    named: String,
}

impl<G: Collective> GroupObj<G> {
    /// The membership `group`, which the door calls `named` ("this
    /// Group").
    pub fn new(group: G, named: impl Into<String>) -> GroupObj<G> {
        GroupObj {
            members: group.members().to_vec(),
            rank: group.rank(),
            group: Mutex::new(Some(group)),
            named: named.into(),
        }
    }

    /// This member's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many members the group has.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Every member, by rank.
    pub fn members(&self) -> &[G::Member] {
        &self.members
    }

    /// The member of rank `rank`.
    pub fn member(&self, rank: usize) -> Result<&G::Member> {
        self.members.get(rank).ok_or_else(|| {
            Error::invalid(format!("rank {rank} in a group of {}", self.members.len()))
        })
    }

    /// Run `f` on the membership; [`Error::Closed`] once it was left.
    pub fn with<T>(&self, f: impl FnOnce(&mut G) -> Result<T>) -> Result<T> {
        let mut held = self.group.lock().unwrap_or_else(|e| e.into_inner());
        match held.as_mut() {
            Some(group) => f(group),
            None => Err(Error::Closed {
                what: format!("{}: it was closed", self.named),
            }),
        }
    }

    /// Post `data` and receive every member's, by rank (this one's too).
    pub fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.with(|g| g.all_gather(data))
    }

    /// Receive what the member of rank `root` posts (`data`, at `root`;
    /// ignored elsewhere).
    pub fn broadcast(&self, root: usize, data: &[u8]) -> Result<Vec<u8>> {
        self.with(|g| g.broadcast(root, data))
    }

    /// Wait until every member called it.
    pub fn barrier(&self) -> Result<()> {
        self.with(|g| g.barrier())
    }

    /// Leave the group: the membership, to drop where the door chooses
    /// (leaving may wait on the network); None when it was left already.
    pub fn leave(&self) -> Option<G> {
        self.group.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group of one, answering from what it was posted.
    struct Alone(Vec<u32>);

    impl Collective for Alone {
        type Member = u32;
        fn members(&self) -> &[u32] {
            &self.0
        }
        fn rank(&self) -> usize {
            0
        }
        fn all_gather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
            Ok(vec![data.to_vec()])
        }
        fn broadcast(&mut self, _root: usize, data: &[u8]) -> Result<Vec<u8>> {
            Ok(data.to_vec())
        }
        fn barrier(&mut self) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_membership_answers_until_it_is_left() {
        let group = GroupObj::new(Alone(vec![42]), "this group");
        assert_eq!(
            (group.rank(), group.size(), *group.member(0).unwrap()),
            (0, 1, 42)
        );
        assert!(group
            .member(1)
            .unwrap_err()
            .to_string()
            .contains("rank 1 in a group of 1"));
        assert_eq!(group.all_gather(b"x").unwrap(), vec![b"x".to_vec()]);
        assert_eq!(group.broadcast(0, b"y").unwrap(), b"y".to_vec());
        group.barrier().unwrap();
        assert!(group.leave().is_some());
        assert!(group.leave().is_none());
        let err = group.barrier().unwrap_err();
        assert!(matches!(err, Error::Closed { .. }), "{err}");
        assert!(
            err.to_string().contains("this group: it was closed"),
            "{err}"
        );
    }
}
