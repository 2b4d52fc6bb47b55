//! A bench process's side of remote-rendezvous: a member of a group across
//! hosts (`hal::remote::RemoteGroup`) that joins from a node of its own,
//! swaps its pid with the others, and leaves.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use hal::remote::group::parse_secret;
use hal::remote::{RemoteGroup, RemoteGroupOptions};

use super::proto::PEER_TIMEOUT;
use crate::fail::{CmdResult, Context, Fail};

/// The system clock in nanoseconds: the members of one host read the same
/// clock, so their instants compare.
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
        .unwrap_or(0)
}

/// Join the group `name` of `size` members at `at` with `secret` (32 hex
/// digits), check the group with one all-gather of the members' pids, and
/// leave: when the join was called and when it returned, on the system
/// clock.
pub fn rendezvous(at: &str, name: &str, size: usize, secret: &str) -> CmdResult<Vec<u64>> {
    let at: SocketAddr = at
        .parse()
        .map_err(|_| Fail::failed(format!("{at:?} is no group address")))?;
    let secret = parse_secret(secret, "the group's secret").ctx("reading the group's secret")?;
    let options = RemoteGroupOptions::default()
        .secret(secret)
        .timeout(PEER_TIMEOUT);
    let called = now_ns();
    let mut group = RemoteGroup::join_at(at, name, size, &options).ctx("joining the group")?;
    let returned = now_ns();
    let pids = group
        .all_gather(&std::process::id().to_le_bytes())
        .ctx("gathering the members' pids")?;
    let mine = pids.get(group.rank()).map(Vec::as_slice);
    if pids.len() != size || mine != Some(&std::process::id().to_le_bytes()[..]) {
        return Err(Fail::failed(
            "the group's all-gather returned the wrong pids",
        ));
    }
    // Every member has its answer before any leaves (rank 0's leaving
    // ends the group).
    group.barrier().ctx("meeting the other members")?;
    drop(group);
    Ok(vec![called, returned])
}
