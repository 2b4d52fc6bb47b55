//! Remote memory: an export of another host's, read and written here
//! with UCX's RMA (`ucp_get_nbx`, `ucp_put_nbx`), zero-copy on both ends
//! where the transport allows. Every range is checked against the export
//! before anything is sent; a read-only export refuses writes here.

use std::ffi::c_void;
use std::sync::Arc;

use hal_core::device::check_bounds;
use hal_core::handle::remote::{RemoteHandle, RemoteKind};
use hal_core::{Error, Memory, Result};

use crate::completion::{self, Completion, Done};
use crate::dial::Connection;
use crate::ffi::bindings::*;
use crate::node::Owner;
use crate::protocol::Message;

/// One operation of a [`RemoteMemory::batch`].
#[derive(Debug)]
pub enum Op<'a> {
    /// Read `buf.len()` bytes at `offset` of the remote memory into `buf`.
    Read {
        /// Where in the remote memory.
        offset: u64,
        /// Where to.
        buf: &'a mut [u8],
    },
    /// Write `data` at `offset` of the remote memory.
    Write {
        /// Where in the remote memory.
        offset: u64,
        /// What.
        data: &'a [u8],
    },
}

/// Another host's memory, imported ([`crate::Node::connect`]). The
/// exporter counts this process among its importers until it is dropped.
pub struct RemoteMemory {
    conn: Connection,
    rkey: usize,
}

// SAFETY: the endpoint and the rkey are used through a worker made for
// many threads (`UCS_THREAD_MODE_MULTI`), which serialises UCX's calls.
unsafe impl Send for RemoteMemory {}
// SAFETY: as above; every method takes `&self` and UCX's calls are safe
// from several threads at once on such a worker.
unsafe impl Sync for RemoteMemory {}

impl std::fmt::Debug for RemoteMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteMemory")
            .field("handle", &self.conn.handle)
            .finish()
    }
}

impl RemoteMemory {
    pub(crate) fn connect(owner: Arc<Owner>, handle: RemoteHandle) -> Result<RemoteMemory> {
        if handle.kind != RemoteKind::Memory {
            return Err(Error::InvalidHandle(hal_core::HandleError::WrongKind {
                expected: "remote memory",
                found: "remote notify",
            }));
        }
        let (conn, packed) = Connection::open(owner, handle)?;
        match conn.hub().engine.unpack(conn.ep as ucp_ep_h, &packed) {
            Ok(rkey) => Ok(RemoteMemory {
                conn,
                rkey: rkey as usize,
            }),
            Err(e) => {
                conn.close();
                Err(e)
            }
        }
    }

    /// The size of the remote memory in bytes.
    pub fn len(&self) -> u64 {
        self.conn.handle.size
    }

    /// True when the remote memory is empty (an export never is).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the export refuses writes.
    pub fn is_read_only(&self) -> bool {
        self.conn.handle.read_only
    }

    /// The handle this was imported from.
    pub fn handle(&self) -> &RemoteHandle {
        &self.conn.handle
    }

    fn check(&self, offset: u64, len: u64, write: bool) -> Result<()> {
        if write && self.is_read_only() {
            return Err(Error::PermissionDenied {
                pid: None,
                reason: format!(
                    "the remote export at {} is read-only: it refuses writes (export it \
                     without read_only to write it)",
                    self.conn.handle.listener
                ),
            });
        }
        check_bounds(offset, len, self.len())?;
        if let Some(why) = self.conn.gone() {
            return Err(self.conn.closed(&why));
        }
        Ok(())
    }

    /// Issue one get or put of `len` bytes between local `ptr` and remote
    /// `offset` (checked), of local memory type `mem`.
    fn issue(
        &self,
        write: bool,
        offset: u64,
        ptr: *mut c_void,
        len: usize,
        mem: ucs_memory_type_t,
        kept: Option<Vec<u8>>,
    ) -> Result<Arc<Completion>> {
        let engine = &self.conn.hub().engine;
        let remote = self.conn.handle.base + offset;
        let ep = self.conn.ep as ucp_ep_h;
        let rkey = self.rkey as ucp_rkey_h;
        let extra = |p: &mut ucp_request_param_t| {
            p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
            p.memory_type = mem;
        };
        Ok(if write {
            let f = engine.ucx.ucp_put_nbx()?;
            // SAFETY: the endpoint and the rkey are live; `ptr..ptr+len` is
            // readable until the completion finishes (the caller's borrow,
            // waited on, or the kept buffer); the remote range was checked.
            completion::issue(kept, extra, |p| unsafe { f(ep, ptr, len, remote, rkey, p) })
        } else {
            let f = engine.ucx.ucp_get_nbx()?;
            // SAFETY: as above, and the local range is writable.
            completion::issue(kept, extra, |p| unsafe { f(ep, ptr, len, remote, rkey, p) })
        })
    }

    /// Read `buf.len()` bytes at `offset` into `buf`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check(offset, buf.len() as u64, false)?;
        if buf.is_empty() {
            return Ok(());
        }
        let c = self.issue(
            false,
            offset,
            buf.as_mut_ptr().cast(),
            buf.len(),
            UCS_MEMORY_TYPE_HOST,
            None,
        )?;
        self.conn.wait(&c, "a remote read")
    }

    /// Write `data` at `offset`. Done when UCX is done with `data`; call
    /// [`flush`](Self::flush) (or use [`write_signal`](Self::write_signal))
    /// for the bytes to be in the remote memory.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check(offset, data.len() as u64, true)?;
        if data.is_empty() {
            return Ok(());
        }
        let c = self.issue(
            true,
            offset,
            data.as_ptr() as *mut c_void,
            data.len(),
            UCS_MEMORY_TYPE_HOST,
            None,
        )?;
        self.conn.wait(&c, "a remote write")
    }

    /// The address and UCX memory type of `len` bytes at `offset` of
    /// local hal memory (checked).
    fn local(
        memory: &dyn Memory,
        offset: u64,
        len: u64,
        write: bool,
    ) -> Result<(*mut c_void, ucs_memory_type_t)> {
        check_bounds(offset, len, memory.len())?;
        if write && memory.is_read_only() {
            return Err(Error::InvalidArgument {
                what: "the local memory is read-only: it cannot receive a remote read".into(),
            });
        }
        match memory.host_ptr() {
            // SAFETY: `offset` is within the memory (checked).
            Some(p) => Ok((
                unsafe { p.add(offset as usize) }.cast(),
                UCS_MEMORY_TYPE_HOST,
            )),
            None => Ok((
                (memory.addr() + offset) as *mut c_void,
                UCS_MEMORY_TYPE_CUDA,
            )),
        }
    }

    /// Read `len` bytes at remote `offset` into local hal memory at
    /// `local_offset`: host memory of any backend, or CUDA device memory
    /// where the loaded UCX has CUDA support.
    pub fn read_into(
        &self,
        offset: u64,
        local: &dyn Memory,
        local_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.check(offset, len, false)?;
        let (ptr, mem) = Self::local(local, local_offset, len, true)?;
        if len == 0 {
            return Ok(());
        }
        let c = self.issue(false, offset, ptr, len as usize, mem, None)?;
        self.conn.wait(&c, "a remote read")
    }

    /// Write `len` bytes of local hal memory at `local_offset` to remote
    /// `offset`.
    pub fn write_from(
        &self,
        offset: u64,
        local: &dyn Memory,
        local_offset: u64,
        len: u64,
    ) -> Result<()> {
        self.check(offset, len, true)?;
        let (ptr, mem) = Self::local(local, local_offset, len, false)?;
        if len == 0 {
            return Ok(());
        }
        let c = self.issue(true, offset, ptr, len as usize, mem, None)?;
        self.conn.wait(&c, "a remote write")
    }

    /// Run every operation of `ops` at once, and wait for all of them: one
    /// completion for the batch. Every range is checked before any is
    /// sent. The first error is returned after every operation ended.
    pub fn batch(&self, ops: &mut [Op<'_>]) -> Result<()> {
        for op in ops.iter() {
            match op {
                Op::Read { offset, buf } => self.check(*offset, buf.len() as u64, false)?,
                Op::Write { offset, data } => self.check(*offset, data.len() as u64, true)?,
            }
        }
        let mut issued = Vec::with_capacity(ops.len());
        let mut first = None;
        for op in ops.iter_mut() {
            let r = match op {
                Op::Read { buf: [], .. } => continue,
                Op::Write { data: [], .. } => continue,
                Op::Read { offset, buf } => self.issue(
                    false,
                    *offset,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    UCS_MEMORY_TYPE_HOST,
                    None,
                ),
                Op::Write { offset, data } => self.issue(
                    true,
                    *offset,
                    data.as_ptr() as *mut c_void,
                    data.len(),
                    UCS_MEMORY_TYPE_HOST,
                    None,
                ),
            };
            match r {
                Ok(c) => issued.push(c),
                Err(e) => {
                    first = Some(e);
                    break;
                }
            }
        }
        for c in &issued {
            if let Err(e) = self.conn.wait(c, "a remote batch") {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Wait until every write issued so far is in the remote memory.
    pub fn flush(&self) -> Result<()> {
        if let Some(why) = self.conn.gone() {
            return Err(self.conn.closed(&why));
        }
        let c = self.conn.hub().engine.flush(self.conn.ep as ucp_ep_h)?;
        self.conn.wait(&c, "a flush")
    }

    /// Write `data` at `offset`, then tell the exporter the data is there,
    /// in that order, in one call: the exporter's
    /// [`RemoteExported::wait_signal`](crate::RemoteExported::wait_signal)
    /// returns once the bytes are in its memory.
    pub fn write_signal(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.write(offset, data)?;
        self.flush()?;
        self.conn.send(&Message::Signal)
    }

    /// Read `len` bytes at `offset` without blocking the executor: the
    /// bytes come back in a buffer of their own, which UCX keeps until the
    /// read ends even if the future is dropped.
    pub async fn read_async(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.check(offset, len as u64, false)?;
        let mut buf = vec![0u8; len];
        if len == 0 {
            return Ok(buf);
        }
        let ptr = buf.as_mut_ptr().cast();
        let c = self.issue(false, offset, ptr, len, UCS_MEMORY_TYPE_HOST, Some(buf))?;
        self.conn.hub().engine.signal();
        let st = Done(Arc::clone(&c)).await;
        self.finish(st, "a remote read")?;
        Ok(c.take_kept().unwrap_or_default())
    }

    /// Write `data` at `offset` without blocking the executor.
    pub async fn write_async(&self, offset: u64, data: Vec<u8>) -> Result<()> {
        self.check(offset, data.len() as u64, true)?;
        if data.is_empty() {
            return Ok(());
        }
        let (ptr, len) = (data.as_ptr() as *mut c_void, data.len());
        let c = self.issue(true, offset, ptr, len, UCS_MEMORY_TYPE_HOST, Some(data))?;
        self.conn.hub().engine.signal();
        let st = Done(c).await;
        self.finish(st, "a remote write")
    }

    fn finish(&self, st: ucs_status_t, what: &str) -> Result<()> {
        if st == UCS_OK {
            return Ok(());
        }
        if let Some(why) = self.conn.gone() {
            return Err(self.conn.closed(&why));
        }
        Err(crate::ffi::status::error(
            self.conn.hub().engine.ucx,
            st,
            what,
            "a remote export",
        ))
    }
}

impl Drop for RemoteMemory {
    fn drop(&mut self) {
        // What was written reaches the exporter before the connection goes.
        if self.conn.gone().is_none() {
            if let Ok(c) = self.conn.hub().engine.flush(self.conn.ep as ucp_ep_h) {
                let _ = self.conn.wait(&c, "the last flush");
            }
        }
        self.conn.hub().engine.destroy_rkey(self.rkey as ucp_rkey_h);
        self.conn.close();
    }
}
