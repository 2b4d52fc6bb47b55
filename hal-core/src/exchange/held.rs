//! An importer's lease on an exported resource, registered by the
//! exporter's broker (or, on the direct path, recorded by the importer on
//! the exporter's board) and given back on drop.

use std::fmt;

use super::broker::{self, BoardLease};
use crate::kit::os;
use crate::lease::LeaseTicket;

/// An importer's lease: while it lives, the exporter counts this process
/// among the importers of the resource
/// ([`Allocation::importers`](crate::Allocation::importers)) and does not
/// free it ([`Allocation::wait_unleased`](crate::Allocation::wait_unleased)).
///
/// The exporter's broker registered it, under this process's pid as the
/// exporter sees it; dropping it gives it back to that broker, which frees
/// the slot only for the process it registered. A direct import (the
/// `pidfd_getfd` path, see [`exchange`](super)) recorded it itself on the
/// exporter's board, and dropping it frees that slot, with no round trip. A process that dies holding
/// it stops being counted without giving it back. Backends keep one in each
/// mapping they import (see [`take_fds_leased`](super::take_fds_leased)).
#[must_use = "the exporter stops counting this importer when the lease drops: keep it as long as the import"]
pub struct Lease {
    broker: String,
    ticket: LeaseTicket,
    /// A lease recorded on the exporter's board by this process (a direct
    /// import), given back there.
    board: Option<BoardLease>,
    /// The process that holds it: a forked child's copy gives nothing back.
    pid: u32,
}

impl Lease {
    pub(crate) fn new(broker: String, ticket: LeaseTicket) -> Lease {
        Lease {
            broker,
            ticket,
            board: None,
            pid: os::pid(),
        }
    }

    /// A lease this process recorded on the board of the broker `broker`.
    pub(crate) fn on_board(broker: String, lease: BoardLease) -> Lease {
        Lease {
            broker,
            ticket: lease.ticket(),
            board: Some(lease),
            pid: os::pid(),
        }
    }

    /// The registration's ticket.
    pub fn ticket(&self) -> &LeaseTicket {
        &self.ticket
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("broker", &self.broker)
            .field("slot", &self.ticket.slot)
            .finish()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.pid != os::pid() {
            return;
        }
        if self.board.is_some() {
            // Given back as the board lease drops with this value.
            return;
        }
        if let Err(e) = broker::release(&self.broker, &self.ticket) {
            // The exporter exited (nothing counts the lease any more) or
            // refused the ticket; either way there is nothing left to do.
            log::debug!(
                "giving lease slot {} back to `{}`: {e}",
                self.ticket.slot,
                self.broker
            );
        }
    }
}
