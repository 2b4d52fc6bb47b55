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
use crate::client::{Client, Pending};
use crate::completion::Completion;
use crate::ffi::bindings::*;
use crate::ffi::status;
use crate::hub::{lock, Hub};
use crate::owner::Owner;
use crate::payload::Payload;
use crate::protocol::{Denial, Message, AM_ID};

/// A message on an importer's connection (on the progress thread).
pub(crate) fn message(hub: &Hub, client: &Client, head: &[u8], payload: Payload) {
    let m = match crate::protocol::decode(head) {
        Ok(m) => m,
        Err(why) => {
            payload.release(&hub.engine);
            lock(&client.inbox).gone =
                Some(format!("the exporter sent a malformed message ({})", why.0));
            client.cv.notify_all();
            return fail_pending(client, "the exporter sent a malformed message");
        }
    };
    match m {
        Message::Data { req } => data(hub, client, req, payload),
        Message::Done { req } => {
            payload.release(&hub.engine);
            if let Some(p) = lock(&client.pending).get(&req) {
                p.done.finish(UCS_OK);
            }
        }
        Message::Failed { req, why } => {
            payload.release(&hub.engine);
            if let Some(p) = lock(&client.pending).get(&req) {
                p.done.refuse(why);
            }
        }
        other => {
            payload.release(&hub.engine);
            lock(&client.inbox).messages.push_back(other);
            client.cv.notify_all();
        }
    }
}

/// A read's bytes: into its target, then the read is done.
fn data(hub: &Hub, client: &Client, req: u64, payload: Payload) {
    let mut pending = lock(&client.pending);
    let Some(p) = pending.get_mut(&req) else {
        // The read was given up (a timeout): nothing of it is written.
        drop(pending);
        return payload.release(&hub.engine);
    };
    let Some((target, len, mem)) = p.target else {
        drop(pending);
        return payload.release(&hub.engine);
    };
    if payload.len() != len {
        p.done.refuse(Denial::Protocol);
        drop(pending);
        return payload.release(&hub.engine);
    }
    match payload {
        Payload::Rndv(desc, n) => {
            // The read is done when its bytes are in.
            let issued = hub.engine.receive(
                desc as *mut std::ffi::c_void,
                target as *mut std::ffi::c_void,
                n,
                mem,
                Arc::clone(&p.done),
            );
            match issued {
                Ok(()) => p.receiving = true,
                Err(_) => p.done.refuse(Denial::Protocol),
            }
        }
        other => {
            if let Some(bytes) = other.bytes().filter(|_| mem == UCS_MEMORY_TYPE_HOST) {
                // SAFETY: the target is the caller's buffer of `len` bytes,
                // writable until its read's waiter removes this entry, which
                // it does under this lock: the entry being here means the
                // buffer is still the caller's to fill.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), target as *mut u8, len) };
                p.done.finish(UCS_OK);
            } else {
                p.done.refuse(Denial::Protocol);
            }
            drop(pending);
            other.release(&hub.engine);
        }
    }
}

/// Fail every operation in flight on `client`.
fn fail_pending(client: &Client, _why: &str) {
    for p in lock(&client.pending).values() {
        if !p.receiving {
            p.done.finish(UCS_ERR_CONNECTION_RESET);
        }
    }
}

/// An importer's connection failed or closed.
pub(crate) fn failed(client: &Client, status: ucs_status_t) {
    lock(&client.inbox).gone = Some(format!(
        "the connection to the exporter failed ({})",
        status::name(status)
    ));
    client.cv.notify_all();
    fail_pending(client, "the connection failed");
}

/// An importer's connection: its endpoint, and what reaches it.
pub(crate) struct Connection {
    pub(crate) owner: Arc<Owner>,
    pub(crate) ep: usize,
    pub(crate) client: Arc<Client>,
    /// The exporter, for messages.
    pub(crate) handle: RemoteHandle,
    /// The next request's number.
    next: std::sync::atomic::AtomicU64,
}

fn hub_ucx(c: &Connection) -> &'static crate::ffi::sys::Ucx {
    c.hub().engine.ucx
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
        crate::drive::spin_until(hub, || c.status().is_some());
        let st = match c.wait_until(Some(Instant::now() + hub.timeout)) {
            Some(st) => st,
            None => {
                lock(&self.client.inbox).gone = Some(format!("{what} timed out"));
                let closing = self.close_now()?;
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
        // With a spin, this thread drives the worker until the answer is
        // there (the progress thread stays back meanwhile).
        crate::drive::spin_until(self.hub(), || {
            let inbox = lock(&self.client.inbox);
            !inbox.messages.is_empty() || inbox.gone.is_some()
        });
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
        let c = self.send_header(m.encode())?;
        self.wait(&c, "sending to the exporter")
    }

    /// Send `header` (on the progress thread).
    fn send_header(&self, header: Vec<u8>) -> Result<Arc<Completion>> {
        let ep = self.ep;
        self.hub()
            .on_thread(move |h| h.engine.send(ep as ucp_ep_h, AM_ID, header, None, false))?
    }

    /// Close the connection at once (on the progress thread): every
    /// operation still in flight on it fails.
    fn close_now(&self) -> Result<Arc<Completion>> {
        let ep = self.ep;
        self.hub()
            .on_thread(move |h| h.engine.close(ep as ucp_ep_h, true))
    }

    /// Connect to `handle`'s exporter and run the handshake.
    pub(crate) fn open(owner: Arc<Owner>, handle: RemoteHandle) -> Result<Connection> {
        let hub = &owner.hub;
        let to = handle.listener;
        let ep = hub.on_thread(move |h| {
            h.engine
                .endpoint(None, Some(to), &h.callbacks())
                .map(|ep| ep as usize)
        })??;
        let client = Arc::new(Client::default());
        lock(&hub.tables).clients.insert(ep, Arc::clone(&client));
        let conn = Connection {
            owner: Arc::clone(&owner),
            ep,
            client,
            handle,
            next: std::sync::atomic::AtomicU64::new(1),
        };
        match conn.handshake() {
            Ok(()) => Ok(conn),
            Err(e) => {
                conn.close();
                Err(e)
            }
        }
    }

    fn handshake(&self) -> Result<()> {
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
            Message::Grant => Ok(()),
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

    /// Ask for `len` bytes at `offset` of the export, to be put at `target`
    /// (an address of memory type `mem`, writable for `len` bytes until the
    /// operation is over: see [`Connection::finish`]); `done` finishes when
    /// they are there.
    pub(crate) fn start_read(
        &self,
        offset: u64,
        target: usize,
        len: usize,
        mem: ucs_memory_type_t,
        done: Arc<Completion>,
    ) -> Result<u64> {
        let req = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.client.pending).insert(
            req,
            Pending {
                target: Some((target, len, mem)),
                done,
                receiving: false,
            },
        );
        let m = Message::Read {
            req,
            offset,
            len: len as u64,
            rndv: mem != UCS_MEMORY_TYPE_HOST,
        };
        let sent = self.send_header(m.encode());
        if let Err(e) = sent {
            lock(&self.client.pending).remove(&req);
            return Err(e);
        }
        Ok(req)
    }

    /// Send `len` bytes at `data` (of memory type `mem`, readable until
    /// `sent` finishes) to `offset` of the export; `done` finishes when the
    /// exporter wrote them.
    pub(crate) fn start_write(
        &self,
        offset: u64,
        data: *const std::ffi::c_void,
        len: usize,
        mem: ucs_memory_type_t,
        done: Arc<Completion>,
    ) -> Result<(u64, Arc<Completion>)> {
        let req = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.client.pending).insert(
            req,
            Pending {
                target: None,
                done,
                receiving: false,
            },
        );
        // Device memory on either side is moved by rendezvous, which UCX
        // copies with the device's own means.
        let rndv = mem != UCS_MEMORY_TYPE_HOST
            || self.handle.memory_type != hal_core::handle::remote::RemoteMemoryType::Host;
        let (ep, header, data) = (
            self.ep,
            Message::Write { req, offset }.encode(),
            data as usize,
        );
        let sent = self.hub().on_thread(move |h| {
            let data = Some((data as *const std::ffi::c_void, len, mem));
            h.engine.send(ep as ucp_ep_h, AM_ID, header, data, rndv)
        });
        match sent.and_then(|s| s) {
            Ok(sent) => Ok((req, sent)),
            Err(e) => {
                lock(&self.client.pending).remove(&req);
                Err(e)
            }
        }
    }

    /// Wait for operation `req` (`done`, and `sent` for a write) until the
    /// node's timeout. Whatever the answer, when this returns nothing of
    /// UCX's or the progress thread's still reads or writes the
    /// operation's memory: at the timeout the entry is taken back, and
    /// where its bytes are already moving the connection is closed at once
    /// and its end awaited.
    pub(crate) fn finish(
        &self,
        req: u64,
        done: &Completion,
        sent: Option<&Completion>,
        what: &str,
    ) -> Result<()> {
        let hub = self.hub();
        let deadline = Instant::now() + hub.timeout;
        crate::drive::spin_until(hub, || done.status().is_some());
        let st = done.wait_until(Some(deadline));
        let entry = lock(&self.client.pending).remove(&req);
        let st = match st {
            Some(st) => st,
            None => {
                let moving = entry.as_ref().is_some_and(|p| p.receiving)
                    || sent.is_some_and(|s| s.status().is_none());
                if moving {
                    lock(&self.client.inbox).gone = Some(format!("{what} timed out"));
                    let closing = self.close_now()?;
                    if entry.as_ref().is_some_and(|p| p.receiving) {
                        done.wait_until(None);
                    }
                    if let Some(s) = sent {
                        s.wait_until(None);
                    }
                    closing.wait_until(Some(Instant::now() + hub.timeout));
                }
                return Err(Error::Timeout {
                    after: hub.timeout,
                    what: format!("{what} on the remote export at {}", self.handle.listener),
                });
            }
        };
        // A write's data is the caller's until its send is over.
        if let Some(s) = sent {
            if s.wait_until(Some(Instant::now() + hub.timeout)).is_none() {
                let closing = self.close_now()?;
                s.wait_until(None);
                closing.wait_until(Some(Instant::now() + hub.timeout));
            }
        }
        self.answer(st, done.refused(), what)
    }

    /// The result of an operation that ended with `st` (and `refused`).
    pub(crate) fn answer(
        &self,
        st: ucs_status_t,
        refused: Option<Denial>,
        what: &str,
    ) -> Result<()> {
        let at = self.handle.listener;
        match (st, refused) {
            (UCS_OK, _) => Ok(()),
            (_, Some(Denial::ReadOnly)) => Err(Error::PermissionDenied {
                pid: None,
                reason: format!(
                    "the remote export at {at} is read-only: the exporter refused {what}"
                ),
            }),
            (_, Some(Denial::Bounds)) => Err(Error::InvalidArgument {
                what: format!(
                    "{what} is outside the remote export at {at} (refused by the exporter)"
                ),
            }),
            (_, Some(other)) => {
                Err(self.closed(&format!("the exporter refused {what} ({other:?})")))
            }
            (st, None) => match self.gone() {
                Some(why) => Err(self.closed(&why)),
                None => Err(status::error(
                    hub_ucx(self),
                    st,
                    what,
                    &format!("the remote export at {at}"),
                )),
            },
        }
    }

    /// Forget operation `req` (an async one, over).
    pub(crate) fn forget(&self, req: u64) {
        lock(&self.client.pending).remove(&req);
    }

    /// Forget and close the connection (outstanding operations fail).
    pub(crate) fn close(&self) {
        let hub = self.hub();
        lock(&hub.tables).clients.remove(&self.ep);
        if let Ok(c) = self.close_now() {
            crate::drive::spin_until(hub, || c.status().is_some());
            c.wait_until(Some(Instant::now() + hub.timeout));
            hub.unwaited(c);
        }
    }
}
