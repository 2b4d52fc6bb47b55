//! Waiting for the other members: until each is ready for what the caller
//! waits for, one of them is gone (it died, or it left), or the group's
//! timeout passes. A wait spins briefly, then sleeps on the board's post
//! word, and looks at the pending members' processes every
//! [`LIVENESS_EVERY`]: a member that dies is named within that time, never
//! waited for until the timeout.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::layout::{Board, SlotState};
use crate::kit::os;
use crate::{Error, Result};

/// How often a waiter looks whether the members it waits for are alive.
pub(super) const LIVENESS_EVERY: Duration = Duration::from_millis(10);

/// What a member is, for a waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ready {
    /// It did what the waiter waits for.
    Yes,
    /// Not yet.
    Pending,
}

/// Wait until `ready` answers [`Ready::Yes`] for every member but `me`.
/// `ready` may answer an error (a member that left), which ends the wait.
/// `what` names the wait in errors ("round 3 of group \"g\"").
pub(super) fn wait_for_members(
    board: &Board,
    me: usize,
    what: &str,
    spin: Duration,
    timeout: Duration,
    mut ready: impl FnMut(usize) -> Result<Ready>,
) -> Result<()> {
    let start = Instant::now();
    let mut looked = start;
    let posts = board.posts()?;
    loop {
        let seen = posts.load(Ordering::Acquire);
        let mut pending = Vec::new();
        for i in (0..board.members()).filter(|&i| i != me) {
            if ready(i)? == Ready::Pending {
                pending.push(i);
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        let elapsed = start.elapsed();
        if elapsed >= spin && looked.elapsed() >= LIVENESS_EVERY {
            looked = Instant::now();
            for &i in &pending {
                check_alive(board, i, what)?;
            }
        }
        if elapsed >= timeout {
            return Err(Error::Timeout {
                after: timeout,
                what: format!("{what}: {}", describe(board, &pending)),
            });
        }
        if elapsed < spin {
            std::hint::spin_loop();
            continue;
        }
        let nap = (timeout - elapsed).min(LIVENESS_EVERY);
        os::futex_wait(posts, seen, Some(nap));
    }
}

/// An error when member `i` took its slot and its process is gone.
fn check_alive(board: &Board, i: usize, what: &str) -> Result<()> {
    if board.state(i)? != SlotState::Joined {
        return Ok(());
    }
    let (pid, start) = board.member(i)?;
    if os::process_alive(pid, start) {
        return Ok(());
    }
    Err(Error::Closed {
        what: format!(
            "{what}: member {i} (pid {pid}) died; the group cannot go on: every member leaves \
             (drops its Group) and joins again"
        ),
    })
}

/// "members 2 (pid 41), 3 (not joined) have not" for an error.
fn describe(board: &Board, pending: &[usize]) -> String {
    let names: Vec<String> = pending
        .iter()
        .map(|&i| match board.member(i) {
            Ok((0, _)) => format!("{i} (not joined)"),
            Ok((pid, _)) => format!("{i} (pid {pid})"),
            Err(_) => format!("{i}"),
        })
        .collect();
    format!(
        "member{} {} of {} did not come",
        if pending.len() == 1 { "" } else { "s" },
        names.join(", "),
        board.members()
    )
}
