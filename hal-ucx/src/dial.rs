//! The importer's side of a connection: connect to the exporter's
//! listener, say which export, check the exporter's proof, prove the
//! secret, and take the grant. Runs on the caller's thread; the progress
//! thread delivers the exporter's answers into the connection's inbox.

use std::sync::Arc;
use std::time::Instant;

use hal_core::handle::remote::RemoteHandle;
use hal_core::kit::os::random_id;
use hal_core::{Error, Result};

use crate::auth::{self, Role};
use crate::completion::Completion;
use crate::ffi::bindings::*;
use crate::ffi::status;
use crate::hub::{lock, Client, Hub};
use crate::node::Owner;
use crate::protocol::{Denial, Message, AM_ID};

/// An importer's connection: its endpoint, and what reaches it.
pub(crate) struct Connection {
    pub(crate) owner: Arc<Owner>,
    pub(crate) ep: usize,
    pub(crate) client: Arc<Client>,
    /// The exporter, for messages.
    pub(crate) handle: RemoteHandle,
}

impl Connection {
    pub(crate) fn hub(&self) -> &Hub {
        &self.owner.hub
    }

    /// Why the connection is gone, if it is.
    pub(crate) fn gone(&self) -> Option<String> {
        lock(&self.client.inbox).gone.clone()
    }

    /// The error of a connection that is gone.
    pub(crate) fn closed(&self, why: &str) -> Error {
        Error::Closed {
            what: format!(
                "the remote export {} at {}: {why}",
                self.handle.export_id, self.handle.listener
            ),
        }
    }

    /// Wait for `c` until the node's timeout; its status. At the timeout
    /// the connection is closed at once (so that UCX lets go of the
    /// caller's buffers) and the answer is [`Error::Timeout`].
    pub(crate) fn wait(&self, c: &Completion, what: &str) -> Result<()> {
        let hub = self.hub();
        hub.engine.signal();
        let st = match c.wait_until(Some(Instant::now() + hub.timeout)) {
            Some(st) => st,
            None => {
                lock(&self.client.inbox).gone = Some(format!("{what} timed out"));
                let closing = hub.engine.close(self.ep as ucp_ep_h, true);
                hub.engine.signal();
                // A forced close fails every outstanding operation: `c` ends.
                c.wait_until(None);
                closing.wait_until(Some(Instant::now() + hub.timeout));
                return Err(Error::Timeout {
                    after: hub.timeout,
                    what: format!("{what} on the remote export at {}", self.handle.listener),
                });
            }
        };
        if st == UCS_OK {
            return Ok(());
        }
        if let Some(why) = self.gone() {
            return Err(self.closed(&why));
        }
        Err(status::error(
            hub.engine.ucx,
            st,
            what,
            &format!("the remote export at {}", self.handle.listener),
        ))
    }

    /// The next message from the exporter, until the node's timeout.
    fn receive(&self, deadline: Instant) -> Result<Message> {
        let mut inbox = lock(&self.client.inbox);
        loop {
            if let Some(m) = inbox.messages.pop_front() {
                return Ok(m);
            }
            if let Some(why) = &inbox.gone {
                return Err(self.closed(why));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    after: self.hub().timeout,
                    what: format!("the exporter at {} to answer", self.handle.listener),
                });
            }
            inbox = self
                .client
                .cv
                .wait_timeout(inbox, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Send `m` and wait until it is sent.
    pub(crate) fn send(&self, m: &Message) -> Result<()> {
        let c = self
            .hub()
            .engine
            .send(self.ep as ucp_ep_h, AM_ID, m.encode())?;
        self.wait(&c, "sending to the exporter")
    }

    /// Connect to `handle`'s exporter and run the handshake; the grant's
    /// packed rkey.
    pub(crate) fn open(owner: Arc<Owner>, handle: RemoteHandle) -> Result<(Connection, Vec<u8>)> {
        let hub = &owner.hub;
        let ep = hub
            .engine
            .endpoint(None, Some(handle.listener), &hub.callbacks())? as usize;
        let client = Arc::new(Client::default());
        lock(&hub.tables).clients.insert(ep, Arc::clone(&client));
        let conn = Connection {
            owner: Arc::clone(&owner),
            ep,
            client,
            handle,
        };
        match conn.handshake() {
            Ok(rkey) => Ok((conn, rkey)),
            Err(e) => {
                conn.close();
                Err(e)
            }
        }
    }

    fn handshake(&self) -> Result<Vec<u8>> {
        let h = &self.handle;
        let deadline = Instant::now() + self.hub().timeout;
        let mine = random_id();
        self.send(&Message::Hello {
            export_id: h.export_id,
            kind: h.kind,
            nonce: mine,
        })
        .map_err(|e| self.unreachable(e))?;
        let theirs = match self.receive(deadline).map_err(|e| self.unreachable(e))? {
            Message::Challenge { nonce, proof } => {
                if !auth::verify(
                    &h.secret,
                    Role::Exporter,
                    h.export_id,
                    &mine,
                    &nonce,
                    &proof,
                ) {
                    return Err(Error::PermissionDenied {
                        pid: None,
                        reason: format!(
                            "the exporter at {} could not prove it holds this handle's secret: \
                             the handle is not the one it gave out (check the text), or another \
                             process now listens at that address",
                            h.listener
                        ),
                    });
                }
                nonce
            }
            other => return Err(self.refusal(other)),
        };
        let proof = auth::prove(&h.secret, Role::Importer, h.export_id, &theirs, &mine);
        self.send(&Message::Proof { proof })?;
        match self.receive(deadline)? {
            Message::Grant { rkey } => Ok(rkey),
            other => Err(self.refusal(other)),
        }
    }

    /// A connection that never got an answer: say where it tried.
    fn unreachable(&self, e: Error) -> Error {
        match e {
            Error::Closed { what } => Error::Closed {
                what: format!(
                    "{what}; is a node listening at {}, and can this host reach it?",
                    self.handle.listener
                ),
            },
            other => other,
        }
    }

    /// The error of an answer other than the one expected.
    fn refusal(&self, m: Message) -> Error {
        let h = &self.handle;
        match m {
            Message::Denied(Denial::Gone) => Error::NotFound {
                what: format!(
                    "remote export {} at {} (it was dropped, or its node was restarted: ask \
                     the exporter for a new handle)",
                    h.export_id, h.listener
                ),
            },
            Message::Denied(Denial::Secret) => Error::PermissionDenied {
                pid: None,
                reason: format!(
                    "the exporter at {} refused this handle's secret: use the text it gave out",
                    h.listener
                ),
            },
            other => Error::Closed {
                what: format!(
                    "the exporter at {} answered {other:?} out of order",
                    h.listener
                ),
            },
        }
    }

    /// Forget and close the connection (outstanding operations fail).
    pub(crate) fn close(&self) {
        let hub = self.hub();
        lock(&hub.tables).clients.remove(&self.ep);
        let c = hub.engine.close(self.ep as ucp_ep_h, true);
        hub.engine.signal();
        c.wait_until(Some(Instant::now() + hub.timeout));
    }
}
