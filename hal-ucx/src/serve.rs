//! The exporter's side of a connection: accept it, answer the hello with
//! a challenge, check the proof, grant access, count the importer, serve
//! its reads and writes, take its signals, and forget it when it goes.
//! Runs on the progress thread.
//!
//! Nothing an importer sends is trusted before its proof: a connection
//! that sends anything out of order, or does not prove the secret within
//! the node's timeout, is refused and closed; at most
//! [`MAX_CONNECTIONS`] are served at once. Every read and write is checked
//! here, by the exporter, against the export it was granted: its range,
//! and whether it is read-only.

use std::time::Instant;

use hal_core::kit::os::random_id;

use crate::auth::{self, Role};
use crate::ffi::bindings::*;
use crate::hub::{lock, Hub};
use crate::payload::Payload;
use crate::protocol::{Denial, Message, AM_ID};
use crate::served::{Serving, Stage};

/// Most connections a node serves at once (handshakes included).
pub(crate) const MAX_CONNECTIONS: usize = 4096;

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
    match hub
        .engine
        .send(ep as ucp_ep_h, AM_ID, m.encode(), None, false)
    {
        Ok(c) => hub.unwaited(c),
        Err(e) => log::warn!("hal-ucx: could not answer an importer: {e}"),
    }
}

/// Refuse the connection: say why, forget it (an importer leaves the
/// count) and close it once the answer is sent.
fn refuse(hub: &Hub, ep: usize, why: Denial) {
    send(hub, ep, &Message::Denied(why));
    drop_conn(hub, ep);
    hub.unwaited(hub.engine.close(ep as ucp_ep_h, false));
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
        hub.tell_changed();
    }
    Some(s)
}

/// A message on a served connection, with its data.
pub(crate) fn message(hub: &Hub, ep: usize, head: &[u8], payload: Payload) {
    let Some(stage) = lock(&hub.tables).serving.get(&ep).map(|s| s.stage) else {
        payload.release(&hub.engine);
        return; // a connection already refused or closed
    };
    let m = match crate::protocol::decode(head) {
        Ok(m) => m,
        Err(why) => {
            payload.release(&hub.engine);
            log::warn!(
                "hal-ucx: an importer sent a malformed message ({}); refused",
                why.0
            );
            return refuse(hub, ep, Denial::Protocol);
        }
    };
    match (stage, m) {
        (
            Stage::Granted { export_id },
            Message::Read {
                req,
                offset,
                len,
                rndv,
            },
        ) => {
            payload.release(&hub.engine);
            read(hub, ep, export_id, req, offset, len, rndv);
        }
        (Stage::Granted { export_id }, Message::Write { req, offset }) => {
            write(hub, ep, export_id, req, offset, payload);
        }
        (stage, m) => {
            payload.release(&hub.engine);
            handshake(hub, ep, stage, m);
        }
    }
}

/// The export `export_id`'s range: address, size, read-only, memory type.
fn range(hub: &Hub, export_id: u64) -> Option<(u64, u64, bool, ucs_memory_type_t)> {
    let t = lock(&hub.tables);
    t.exports
        .get(&export_id)
        .map(|e| (e.base, e.size, e.read_only, e.mem))
}

/// The refusal of an operation outside `size`, or `None`.
fn outside(offset: u64, len: u64, size: u64) -> Option<Denial> {
    match offset.checked_add(len) {
        Some(end) if end <= size => None,
        _ => Some(Denial::Bounds),
    }
}

/// Serve a read: send the bytes from the exported memory itself.
fn read(hub: &Hub, ep: usize, export_id: u64, req: u64, offset: u64, len: u64, rndv: bool) {
    let Some((base, size, _, mem)) = range(hub, export_id) else {
        return refuse(hub, ep, Denial::Gone);
    };
    if let Some(why) = outside(offset, len, size) {
        return send(hub, ep, &Message::Failed { req, why });
    }
    let data = (
        (base + offset) as *const std::ffi::c_void,
        len as usize,
        mem,
    );
    // The export's memory stays until its drop, which closes this
    // connection (ending the send) before it unregisters the memory.
    let sent = hub.engine.send(
        ep as ucp_ep_h,
        AM_ID,
        Message::Data { req }.encode(),
        Some(data),
        rndv,
    );
    match sent {
        Ok(c) => hub.unwaited(c),
        Err(e) => log::warn!("hal-ucx: could not answer a read: {e}"),
    }
}

/// Serve a write: the bytes into the exported memory, then `done`.
fn write(hub: &Hub, ep: usize, export_id: u64, req: u64, offset: u64, payload: Payload) {
    let Some((base, size, read_only, mem)) = range(hub, export_id) else {
        payload.release(&hub.engine);
        return refuse(hub, ep, Denial::Gone);
    };
    let len = payload.len() as u64;
    let why = if read_only {
        Some(Denial::ReadOnly)
    } else {
        outside(offset, len, size)
    };
    if let Some(why) = why {
        payload.release(&hub.engine);
        return send(hub, ep, &Message::Failed { req, why });
    }
    let target = (base + offset) as *mut u8;
    match payload {
        Payload::Rndv(desc, n) => {
            let c = std::sync::Arc::new(crate::completion::Completion::default());
            let issued = hub.engine.receive(
                desc as *mut std::ffi::c_void,
                target.cast(),
                n,
                mem,
                std::sync::Arc::clone(&c),
            );
            match issued {
                Ok(()) => lock(&hub.tables).receiving.push((ep, req, c)),
                Err(e) => {
                    log::warn!("hal-ucx: could not receive a write: {e}");
                    send(
                        hub,
                        ep,
                        &Message::Failed {
                            req,
                            why: Denial::Protocol,
                        },
                    );
                }
            }
        }
        other => {
            if mem != UCS_MEMORY_TYPE_HOST && len > 0 {
                // Device memory is written by rendezvous only (the importer
                // asks for it); bytes in host memory cannot be copied here.
                other.release(&hub.engine);
                return send(
                    hub,
                    ep,
                    &Message::Failed {
                        req,
                        why: Denial::Protocol,
                    },
                );
            }
            if let Some(bytes) = other.bytes() {
                // SAFETY: `target..target+len` lies inside the export (checked
                // against its size), which is writable host memory that stays
                // mapped until the export's drop; `bytes` is the message's
                // data, which does not overlap it.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), target, bytes.len()) };
            }
            other.release(&hub.engine);
            send(hub, ep, &Message::Done { req });
        }
    }
}

/// Answer the writes whose data was received by rendezvous.
pub(crate) fn received(hub: &Hub) {
    let done: Vec<(usize, u64, ucs_status_t)> = {
        let mut t = lock(&hub.tables);
        let mut done = Vec::new();
        t.receiving.retain(|(ep, req, c)| match c.status() {
            Some(st) => {
                done.push((*ep, *req, st));
                false
            }
            None => true,
        });
        done
    };
    for (ep, req, st) in done {
        if !lock(&hub.tables).serving.contains_key(&ep) {
            continue;
        }
        if st == UCS_OK {
            send(hub, ep, &Message::Done { req });
        } else {
            send(
                hub,
                ep,
                &Message::Failed {
                    req,
                    why: Denial::Protocol,
                },
            );
        }
    }
}

/// A message of the handshake, or a signal.
fn handshake(hub: &Hub, ep: usize, stage: Stage, m: Message) {
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
            if let Some(s) = t.serving.get_mut(&ep) {
                s.stage = Stage::Granted { export_id };
                s.deadline = None;
            }
            drop(t);
            hub.tell_changed();
            send(hub, ep, &Message::Grant);
        }
        (Stage::Granted { export_id }, Message::Signal) => {
            let notify = {
                let mut t = lock(&hub.tables);
                t.exports.get_mut(&export_id).and_then(|e| {
                    e.signals += 1;
                    e.notify.clone()
                })
            };
            hub.tell_changed();
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
        hub.unwaited(hub.engine.close(ep as ucp_ep_h, true));
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
