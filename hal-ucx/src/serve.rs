//! The exporter's side of a connection: accept it, answer the hello with
//! a challenge, check the proof, grant access, count the importer, take
//! its signals, and forget it when it goes. Runs on the progress thread.
//!
//! Nothing an importer sends is trusted before its proof: a connection
//! that sends anything out of order, or does not prove the secret within
//! the node's timeout, is refused and closed; at most
//! [`MAX_CONNECTIONS`] are served at once.

use std::net::SocketAddr;
use std::time::Instant;

use hal_core::kit::os::random_id;

use crate::auth::{self, Role};
use crate::ffi::bindings::*;
use crate::hub::{lock, Hub};
use crate::protocol::{Denial, Message, AM_ID};

/// Most connections a node serves at once (handshakes included).
pub(crate) const MAX_CONNECTIONS: usize = 4096;

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

/// Accept a connection request.
pub(crate) fn accept(hub: &Hub, req: ucp_conn_request_h) {
    let peer = hub.engine.client_of(req);
    let full = lock(&hub.tables).serving.len() >= MAX_CONNECTIONS;
    if full {
        let listener = *lock(&hub.listener);
        log::warn!("hal-ucx: refused a connection from {peer:?}: {MAX_CONNECTIONS} connections are served already");
        if listener != 0 {
            hub.engine.reject(listener as ucp_listener_h, req);
        }
        return;
    }
    match hub.engine.endpoint(Some(req), None, &hub.callbacks()) {
        Ok(ep) => {
            lock(&hub.tables).serving.insert(
                ep as usize,
                Serving {
                    stage: Stage::Hello,
                    peer,
                    deadline: Some(Instant::now() + hub.timeout),
                },
            );
        }
        Err(e) => log::warn!("hal-ucx: could not accept a connection from {peer:?}: {e}"),
    }
}

/// Send `m` on `ep` without waiting (the progress thread never waits).
fn send(hub: &Hub, ep: usize, m: &Message) {
    if let Err(e) = hub.engine.send(ep as ucp_ep_h, AM_ID, m.encode()) {
        log::warn!("hal-ucx: could not answer an importer: {e}");
    }
}

/// Refuse the connection: say why, forget it (an importer leaves the
/// count) and close it once the answer is sent.
fn refuse(hub: &Hub, ep: usize, why: Denial) {
    send(hub, ep, &Message::Denied(why));
    drop_conn(hub, ep);
    hub.engine.close(ep as ucp_ep_h, false);
}

/// Forget a connection; an importer leaves its export's count.
fn drop_conn(hub: &Hub, ep: usize) -> Option<Serving> {
    let mut t = lock(&hub.tables);
    let s = t.serving.remove(&ep)?;
    if let Stage::Granted { export_id } = s.stage {
        if let Some(e) = t.exports.get_mut(&export_id) {
            e.importers = e.importers.saturating_sub(1);
        }
        drop(t);
        hub.changed.notify_all();
    }
    Some(s)
}

/// A message on a served connection.
pub(crate) fn message(hub: &Hub, ep: usize, bytes: &[u8]) {
    let Some(stage) = lock(&hub.tables).serving.get(&ep).map(|s| s.stage) else {
        return; // a connection already refused or closed
    };
    let m = match crate::protocol::decode(bytes) {
        Ok(m) => m,
        Err(why) => {
            log::warn!(
                "hal-ucx: an importer sent a malformed message ({}); refused",
                why.0
            );
            return refuse(hub, ep, Denial::Protocol);
        }
    };
    match (stage, m) {
        (
            Stage::Hello,
            Message::Hello {
                export_id,
                kind,
                nonce,
            },
        ) => {
            let secret = {
                let t = lock(&hub.tables);
                t.exports
                    .get(&export_id)
                    .filter(|e| e.kind == kind)
                    .map(|e| e.secret)
            };
            let Some(secret) = secret else {
                return refuse(hub, ep, Denial::Gone);
            };
            let mine = random_id();
            let proof = auth::prove(&secret, Role::Exporter, export_id, &nonce, &mine);
            if let Some(s) = lock(&hub.tables).serving.get_mut(&ep) {
                s.stage = Stage::Proof {
                    export_id,
                    importer: nonce,
                    exporter: mine,
                };
            }
            send(hub, ep, &Message::Challenge { nonce: mine, proof });
        }
        (
            Stage::Proof {
                export_id,
                importer,
                exporter,
            },
            Message::Proof { proof },
        ) => {
            let mut t = lock(&hub.tables);
            let Some(e) = t.exports.get_mut(&export_id) else {
                drop(t);
                return refuse(hub, ep, Denial::Gone);
            };
            if !auth::verify(
                &e.secret,
                Role::Importer,
                export_id,
                &exporter,
                &importer,
                &proof,
            ) {
                drop(t);
                let peer = lock(&hub.tables).serving.get(&ep).and_then(|s| s.peer);
                log::warn!("hal-ucx: an importer at {peer:?} did not prove export {export_id}'s secret; refused");
                return refuse(hub, ep, Denial::Secret);
            }
            e.importers += 1;
            let rkey = e.rkey.clone();
            if let Some(s) = t.serving.get_mut(&ep) {
                s.stage = Stage::Granted { export_id };
                s.deadline = None;
            }
            drop(t);
            hub.changed.notify_all();
            send(hub, ep, &Message::Grant { rkey });
        }
        (Stage::Granted { export_id }, Message::Signal) => {
            let notify = {
                let mut t = lock(&hub.tables);
                t.exports.get_mut(&export_id).and_then(|e| {
                    e.signals += 1;
                    e.notify.clone()
                })
            };
            hub.changed.notify_all();
            if let Some(n) = notify {
                if let Err(e) = n.signal() {
                    log::warn!("hal-ucx: signalling export {export_id}'s notify: {e}");
                }
            }
        }
        (_, m) => {
            log::warn!("hal-ucx: an importer sent {m:?} out of order; refused");
            refuse(hub, ep, Denial::Protocol);
        }
    }
}

/// A served connection's peer failed or closed.
pub(crate) fn failed(hub: &Hub, ep: usize, status: ucs_status_t) {
    if let Some(s) = drop_conn(hub, ep) {
        log::debug!(
            "hal-ucx: importer {:?} gone ({})",
            s.peer,
            crate::ffi::status::name(status)
        );
        hub.engine.close(ep as ucp_ep_h, true);
    }
}

/// Close handshakes past their deadline; the next deadline.
pub(crate) fn expire(hub: &Hub) -> Option<Instant> {
    let now = Instant::now();
    let (late, next) = {
        let t = lock(&hub.tables);
        let late: Vec<usize> = t
            .serving
            .iter()
            .filter(|(_, s)| s.deadline.is_some_and(|d| d <= now))
            .map(|(ep, _)| *ep)
            .collect();
        let next = t
            .serving
            .values()
            .filter_map(|s| s.deadline)
            .filter(|d| *d > now)
            .min();
        (late, next)
    };
    for ep in late {
        log::warn!("hal-ucx: an importer did not finish its handshake in time; closed");
        refuse(hub, ep, Denial::Protocol);
    }
    next
}

/// Close every connection to `export_id` (the export is dropped): their
/// importers' operations fail with `Closed`.
pub(crate) fn close_export(
    hub: &Hub,
    export_id: u64,
) -> Vec<std::sync::Arc<crate::completion::Completion>> {
    let eps: Vec<usize> = {
        let mut t = lock(&hub.tables);
        let eps: Vec<usize> = t
            .serving
            .iter()
            .filter(|(_, s)| s.export() == Some(export_id))
            .map(|(ep, _)| *ep)
            .collect();
        for ep in &eps {
            t.serving.remove(ep);
        }
        eps
    };
    eps.into_iter()
        .map(|ep| hub.engine.close(ep as ucp_ep_h, true))
        .collect()
}
