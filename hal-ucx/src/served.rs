//! A connection as the exporter keeps it: where its handshake stands,
//! and the export it was granted.

use std::net::SocketAddr;
use std::time::Instant;

/// Where a served connection stands.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stage {
    /// Waiting for the hello.
    Hello,
    /// Challenged: waiting for the proof.
    Proof {
        export_id: u64,
        importer: [u8; 16],
        exporter: [u8; 16],
    },
    /// Proved: an importer of the export.
    Granted { export_id: u64 },
}

/// A served connection.
pub(crate) struct Serving {
    pub(crate) stage: Stage,
    /// The importer's address, for messages.
    pub(crate) peer: Option<SocketAddr>,
    /// When the handshake must be over (none once granted).
    pub(crate) deadline: Option<Instant>,
}

impl Serving {
    /// The export this connection is an importer of, once granted or challenged.
    pub(crate) fn export(&self) -> Option<u64> {
        match self.stage {
            Stage::Hello => None,
            Stage::Proof { export_id, .. } | Stage::Granted { export_id } => Some(export_id),
        }
    }
}
