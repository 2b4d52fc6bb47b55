//! Which process made an object: a child that `fork()` made keeps its
//! parent's objects in memory, but not their vendor contexts nor the
//! helper threads behind them.
//!
//! An [`Origin`] is taken when a backend, a device or what a device makes
//! is created, and every entry point that would call into the vendor or
//! rely on the process's helper threads asks it first: in a forked child
//! it answers [`Error::Forked`], which says to open the backend again in
//! the child.
//!
//! It counts forks rather than comparing pids: a fork handler
//! (`pthread_atfork`, installed once, when the first pid is read) adds one
//! to a generation in each child, so [`Origin::check`] is one atomic load
//! where `getpid` would be a system call on every call, and a pid that the
//! kernel recycles can never make a stranger's object look like our own.
//! Where the handler could not be installed, the pid is compared instead.
//! Nothing happens at a fork in a process that never made an object: a
//! postmaster that forks before touching hal pays nothing.
//!
//! ```
//! let origin = hal_core::kit::os::Origin::here();
//! assert!(origin.check("an example object").is_ok());
//! assert!(!origin.forked());
//! ```

use crate::error::{Error, Result};

use crate::process::{fork_generation, pid};

/// The process an object was made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pid: u32,
    generation: Option<u64>,
}

impl Origin {
    /// The calling process.
    pub fn here() -> Origin {
        Origin {
            pid: pid(),
            generation: fork_generation(),
        }
    }

    /// The pid of the process the object was made in.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// True in a child forked after the object was made: the object is its
    /// parent's. A `Drop` asks this to leave the parent's resources alone
    /// (no vendor call into a context that did not survive the fork, no
    /// removal of names the parent still uses).
    #[inline]
    pub fn forked(&self) -> bool {
        match (self.generation, fork_generation()) {
            (Some(made), Some(now)) => made != now,
            _ => self.pid != pid(),
        }
    }

    /// `Ok` in the process that made the object; in a forked child,
    /// [`Error::Forked`] naming `what`. `what` is written out only then: a
    /// caller on a hot path passes `format_args!(...)`, which costs nothing
    /// while the object is its process's own.
    #[inline]
    pub fn check(&self, what: impl std::fmt::Display) -> Result<()> {
        if self.forked() {
            return Err(self.forked_error(what.to_string()));
        }
        Ok(())
    }

    /// The error of [`Origin::check`] in a forked child (out of line: the
    /// check is on every call, the error on none in the process that made
    /// the object).
    #[cold]
    #[inline(never)]
    fn forked_error(&self, what: String) -> Error {
        Error::Forked {
            what,
            made_in: self.pid,
            now: pid(),
        }
    }
}

impl Default for Origin {
    fn default() -> Self {
        Origin::here()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_is_its_own_process() {
        let o = Origin::here();
        assert!(!o.forked());
        assert_eq!(o.pid(), std::process::id());
        o.check("x").unwrap();
    }

    #[test]
    fn a_made_up_other_process_is_refused_with_what_to_do() {
        let o = Origin {
            pid: 1,
            generation: fork_generation().map(|g| g + 1),
        };
        let e = o.check("CUDA device 0").unwrap_err();
        assert!(e.is_forked(), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("CUDA device 0") && text.contains("open the backend again"),
            "{text}"
        );
    }
}
