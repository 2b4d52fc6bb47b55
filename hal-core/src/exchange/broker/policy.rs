//! Who a broker serves: the export's importer policy (pids pinned to their
//! processes) and the user check (the overflow uid never matches).

use std::sync::OnceLock;

use crate::handle::{Handle, PidKind};
use crate::kit::os;

/// Who may fetch an export's descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Any process on the machine, of any user
    /// ([`HandleFlags::ANY_IMPORTER`](crate::handle::HandleFlags::ANY_IMPORTER)):
    /// the broker serves other users' processes too (all but the overflow
    /// uid, which stands for every user another user namespace does not
    /// map).
    Anyone,
    /// Any process of this user or root: what an allow-list of vendor
    /// process ids leaves to the broker (the vendor checks the list).
    OwnUsers,
    /// Any process whose uid is this one (the exporter's effective uid
    /// when the export was registered): not root, unless this is root.
    SameUser(u32),
    /// Only these processes (pids as this process's pid namespace numbers
    /// them).
    Pids(Vec<Allowed>),
}

/// One allowed importer: a pid, pinned to the process that had it when it
/// was allowed, so that a recycled pid inherits nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Allowed {
    pub(crate) pid: u32,
    /// The start time of the allowed process; 0 when no process had the pid
    /// when it was allowed: the first process served under it pins it.
    pub(crate) start: u64,
}

impl Policy {
    /// The policy a handle states. Each pid is pinned to the process that
    /// has it now; `old` keeps the pins of pids it already held, so that
    /// allowing more importers never re-pins a pid to a newer process.
    ///
    /// An allow-list of vendor process ids ([`PidKind::Vendor`]: Ascend's
    /// bare tgids) is the vendor's to check, not the broker's: such an
    /// export's descriptors (a lease token) go to any process of this user
    /// or root ([`Policy::OwnUsers`]), and the vendor refuses the import
    /// itself.
    pub(crate) fn of(handle: &Handle, old: Option<&Policy>) -> Policy {
        if handle
            .flags
            .contains(crate::handle::HandleFlags::ANY_IMPORTER)
        {
            return Policy::Anyone;
        }
        if handle.pid_kind == PidKind::Vendor {
            return Policy::OwnUsers;
        }
        if handle.flags.contains(crate::handle::HandleFlags::SAME_USER) {
            return Policy::SameUser(nix::unistd::geteuid().as_raw());
        }
        let kept = |pid: u32| match old {
            Some(Policy::Pids(list)) => list.iter().find(|a| a.pid == pid).copied(),
            _ => None,
        };
        Policy::Pids(
            handle
                .allowed_pids
                .iter()
                .map(|&pid| {
                    kept(pid).unwrap_or(Allowed {
                        pid,
                        start: os::current_start_time(pid).unwrap_or(0),
                    })
                })
                .collect(),
        )
    }

    /// True when a listed pid is not pinned to a process yet.
    pub(crate) fn unpinned(&self) -> bool {
        matches!(self, Policy::Pids(list) if list.iter().any(|a| a.start == 0))
    }

    /// Whether the process `pid` of user `uid` that started at `start()`
    /// may import; pins an unpinned pid to it. `start` is asked only for a
    /// listed pid (it reads `/proc`).
    pub(super) fn admit(
        &mut self,
        pid: u32,
        uid: u32,
        start: impl FnOnce() -> Option<u64>,
    ) -> bool {
        match self {
            Policy::Anyone => !unmapped(uid, pid),
            Policy::OwnUsers => uid_allowed(uid, pid),
            Policy::SameUser(mine) => uid == *mine && !unmapped(uid, pid),
            Policy::Pids(list) => {
                let Some(a) = list.iter_mut().find(|a| pid != 0 && a.pid == pid) else {
                    return false;
                };
                match (a.start, start()) {
                    (0, Some(now)) => {
                        a.start = now;
                        true
                    }
                    (pinned, Some(now)) => pinned == now,
                    // The process vanished while being served.
                    (_, None) => false,
                }
            }
        }
    }
}

/// The overflow uid of this machine (`/proc/sys/kernel/overflowuid`): the
/// uid the kernel reports for a user that is not mapped into the reader's
/// user namespace.
pub(crate) fn overflow_uid() -> u32 {
    static UID: OnceLock<u32> = OnceLock::new();
    *UID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/overflowuid")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(65534)
    })
}

/// Whether a peer that shows up as `uid`, with pid `pid` (0 when its pid
/// namespace is out of this process's sight), stands for the users that
/// another user namespace does not map: it shows up as the overflow uid
/// and does not run in a user namespace mapped as this process's is (its
/// `/proc/PID/uid_map` differs from this process's, or cannot be read). A
/// real process of that uid beside this one (`nobody`, uid 65534 on most
/// machines) is a user like any other.
pub(crate) fn unmapped(uid: u32, pid: u32) -> bool {
    if uid != overflow_uid() {
        return false;
    }
    let map = |who: &str| std::fs::read_to_string(format!("/proc/{who}/uid_map")).ok();
    pid == 0 || map(&pid.to_string()).is_none() || map(&pid.to_string()) != map("self")
}

/// True when a process of `uid` (pid `pid`) may talk to a broker of this
/// user as one of its own (and a broker of `uid` may serve us): the same
/// effective uid, or root. A peer that stands for unmapped users
/// ([`unmapped`]) never matches: it would otherwise be served (or trusted)
/// as every such user.
pub(crate) fn uid_allowed(uid: u32, pid: u32) -> bool {
    uid_matches(uid, nix::unistd::geteuid().as_raw(), unmapped(uid, pid))
}

fn uid_matches(peer: u32, me: u32, unmapped: bool) -> bool {
    !unmapped && (peer == 0 || peer == me)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_pins_pids_to_processes() {
        let (me, start) = os::self_identity();
        assert!(Policy::Anyone.admit(7, 1000, || None));
        let mut p = Policy::Pids(vec![
            Allowed { pid: me, start },
            Allowed { pid: 5, start: 0 },
        ]);
        assert!(p.admit(me, 1000, || Some(start)));
        assert!(!p.admit(me, 1000, || Some(start + 1)), "a recycled pid");
        assert!(!p.admit(me, 1000, || None), "a vanished process");
        assert!(!p.admit(6, 1000, || Some(1)) && !p.admit(0, 1000, || Some(1)));
        assert!(
            p.admit(5, 1000, || Some(99)),
            "an unpinned pid is pinned at first use"
        );
        assert!(p.admit(5, 1000, || Some(99)));
        assert!(!p.admit(5, 1000, || Some(100)));
        assert!(!Policy::Pids(Vec::new()).admit(1, 1000, || Some(1)));
    }

    #[test]
    fn same_user_admits_that_uid_alone() {
        let mut p = Policy::SameUser(1000);
        assert!(p.admit(7, 1000, || None), "no start time is needed");
        assert!(!p.admit(7, 1001, || Some(1)), "another user");
        assert!(!p.admit(7, 0, || Some(1)), "root is another user");
        assert!(!Policy::SameUser(overflow_uid()).admit(0, overflow_uid(), || None));
        let mut h = test_handle();
        h.flags.insert(crate::handle::HandleFlags::SAME_USER);
        assert_eq!(
            Policy::of(&h, None),
            Policy::SameUser(nix::unistd::geteuid().as_raw())
        );
    }

    fn test_handle() -> Handle {
        crate::handle::sample()
    }

    #[test]
    fn policy_of_a_handle_keeps_old_pins() {
        let (me, start) = os::self_identity();
        let mut h = test_handle();
        h.allowed_pids = vec![me];
        let first = Policy::of(&h, None);
        assert_eq!(first, Policy::Pids(vec![Allowed { pid: me, start }]));
        let old = Policy::Pids(vec![Allowed { pid: me, start: 1 }]);
        h.allowed_pids = vec![me, 0x7fff_fff0];
        assert_eq!(
            Policy::of(&h, Some(&old)),
            Policy::Pids(vec![
                Allowed { pid: me, start: 1 },
                Allowed {
                    pid: 0x7fff_fff0,
                    start: 0
                }
            ])
        );
        h.flags.insert(crate::handle::HandleFlags::ANY_IMPORTER);
        assert_eq!(Policy::of(&h, Some(&old)), Policy::Anyone);
    }

    #[test]
    fn uids_never_match_the_overflow_uid() {
        assert!(uid_matches(0, 1000, false));
        assert!(uid_matches(1000, 1000, false));
        assert!(!uid_matches(1001, 1000, false));
        assert!(!uid_matches(65534, 65534, true), "unmapped users as both");
        assert!(!uid_matches(0, 0, true));
        assert!(uid_allowed(0, 1));
        assert!(!uid_allowed(overflow_uid(), 0), "no pid: unmapped");
        // This process's own user namespace: the overflow uid of a process
        // beside this one is a real user.
        assert!(!unmapped(overflow_uid(), std::process::id()));
        assert!(unmapped(overflow_uid(), 0));
        assert!(!unmapped(1000, 0), "another uid is never unmapped");
        let configured = std::fs::read_to_string("/proc/sys/kernel/overflowuid")
            .map(|s| s.trim().parse::<u32>().unwrap())
            .unwrap_or(65534);
        assert_eq!(overflow_uid(), configured);
    }
}
