//! Remote memory: an export of another host's, read and written here.
//! Each read and write is a message the exporter serves from, or into, the
//! exported memory itself (UCX active messages: eager for small ones,
//! rendezvous, zero-copy on both ends, for large ones). Every range is
//! checked here before anything is sent, and again by the exporter.

use std::ffi::c_void;
use std::sync::Arc;

use hal_core::device::check_bounds;
use hal_core::handle::remote::{RemoteHandle, RemoteKind};
use hal_core::{Error, Memory, Result};

use crate::completion::{Completion, Done};
use crate::dial::Connection;
use crate::ffi::bindings::*;
use crate::owner::Owner;
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
}

impl std::fmt::Debug for RemoteMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteMemory")
            .field("handle", &self.conn.handle)
            .finish()
    }
}

/// An operation started: its request, its answer, and a write's send.
struct Started {
    req: u64,
    done: Arc<Completion>,
    sent: Option<Arc<Completion>>,
}

impl RemoteMemory {
    pub(crate) fn connect(owner: Arc<Owner>, handle: RemoteHandle) -> Result<RemoteMemory> {
        if handle.kind != RemoteKind::Memory {
            return Err(Error::InvalidHandle(hal_core::HandleError::WrongKind {
                expected: "remote memory",
                found: "remote notify",
            }));
        }
        Ok(RemoteMemory {
            conn: Connection::open(owner, handle)?,
        })
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

    /// Start a read of `len` bytes at `offset` into `target` (checked).
    fn start_read(
        &self,
        offset: u64,
        target: *mut c_void,
        len: usize,
        mem: ucs_memory_type_t,
        done: Arc<Completion>,
    ) -> Result<Started> {
        let req = self
            .conn
            .start_read(offset, target as usize, len, mem, Arc::clone(&done))?;
        Ok(Started {
            req,
            done,
            sent: None,
        })
    }

    /// Start a write of `len` bytes at `data` to `offset` (checked).
    fn start_write(
        &self,
        offset: u64,
        data: *const c_void,
        len: usize,
        mem: ucs_memory_type_t,
        done: Arc<Completion>,
    ) -> Result<Started> {
        let (req, sent) = self
            .conn
            .start_write(offset, data, len, mem, Arc::clone(&done))?;
        Ok(Started {
            req,
            done,
            sent: Some(sent),
        })
    }

    fn finish(&self, s: &Started, what: &str) -> Result<()> {
        self.conn.finish(s.req, &s.done, s.sent.as_deref(), what)
    }

    /// Read `buf.len()` bytes at `offset` into `buf`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check(offset, buf.len() as u64, false)?;
        if buf.is_empty() {
            return Ok(());
        }
        let s = self.start_read(
            offset,
            buf.as_mut_ptr().cast(),
            buf.len(),
            UCS_MEMORY_TYPE_HOST,
            Arc::default(),
        )?;
        self.finish(&s, "a remote read")
    }

    /// Write `data` at `offset`. Returns once the exporter has written the
    /// bytes into its memory.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check(offset, data.len() as u64, true)?;
        if data.is_empty() {
            return Ok(());
        }
        let s = self.start_write(
            offset,
            data.as_ptr().cast(),
            data.len(),
            UCS_MEMORY_TYPE_HOST,
            Arc::default(),
        )?;
        self.finish(&s, "a remote write")
    }

    /// Read as a hostile or broken importer would: without this side's
    /// check of the range, so that only the exporter's own check stands.
    /// For tests of the exporter, only with the `testing` feature; a program
    /// uses [`read`](Self::read).
    #[cfg(feature = "testing")]
    pub fn read_unchecked(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let s = self.start_read(
            offset,
            buf.as_mut_ptr().cast(),
            buf.len(),
            UCS_MEMORY_TYPE_HOST,
            Arc::default(),
        )?;
        self.finish(&s, "a remote read")
    }

    /// Write as a hostile or broken importer would: without this side's
    /// checks of the range and of read-only. For tests of the exporter, only
    /// with the `testing` feature; a program uses [`write`](Self::write).
    #[cfg(feature = "testing")]
    pub fn write_unchecked(&self, offset: u64, data: &[u8]) -> Result<()> {
        let s = self.start_write(
            offset,
            data.as_ptr().cast(),
            data.len(),
            UCS_MEMORY_TYPE_HOST,
            Arc::default(),
        )?;
        self.finish(&s, "a remote write")
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
        let s = self.start_read(offset, ptr, len as usize, mem, Arc::default())?;
        self.finish(&s, "a remote read")
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
        let s = self.start_write(offset, ptr, len as usize, mem, Arc::default())?;
        self.finish(&s, "a remote write")
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
        let mut started = Vec::with_capacity(ops.len());
        let mut first = None;
        for op in ops.iter_mut() {
            let r = match op {
                Op::Read { buf: [], .. } | Op::Write { data: [], .. } => continue,
                Op::Read { offset, buf } => self.start_read(
                    *offset,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    UCS_MEMORY_TYPE_HOST,
                    Arc::default(),
                ),
                Op::Write { offset, data } => self.start_write(
                    *offset,
                    data.as_ptr().cast(),
                    data.len(),
                    UCS_MEMORY_TYPE_HOST,
                    Arc::default(),
                ),
            };
            match r {
                Ok(s) => started.push(s),
                Err(e) => {
                    first = Some(e);
                    break;
                }
            }
        }
        for s in &started {
            if let Err(e) = self.finish(s, "a remote batch") {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Check that the connection is still there. Every write this import
    /// made has been written by the time it returned, so there is nothing
    /// else to wait for.
    pub fn flush(&self) -> Result<()> {
        match self.conn.gone() {
            Some(why) => Err(self.conn.closed(&why)),
            None => Ok(()),
        }
    }

    /// Write `data` at `offset`, then tell the exporter the data is there,
    /// in that order, in one call: the exporter's
    /// [`RemoteExported::wait_signal`](crate::RemoteExported::wait_signal)
    /// returns once the bytes are in its memory.
    pub fn write_signal(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.write(offset, data)?;
        self.conn.send(&Message::Signal)
    }

    /// Read `len` bytes at `offset` without blocking the executor: the
    /// bytes come back in a buffer of their own, which stays alive until
    /// the read ends even if the future is dropped.
    pub async fn read_async(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.check(offset, len as u64, false)?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; len];
        let ptr = buf.as_mut_ptr().cast();
        let done = Completion::keeping(buf);
        let s = self.start_read(offset, ptr, len, UCS_MEMORY_TYPE_HOST, done)?;
        let st = Done(Arc::clone(&s.done)).await;
        self.conn.forget(s.req);
        self.conn.answer(st, s.done.refused(), "a remote read")?;
        Ok(s.done.take_kept().unwrap_or_default())
    }

    /// Write `data` at `offset` without blocking the executor.
    pub async fn write_async(&self, offset: u64, data: Vec<u8>) -> Result<()> {
        self.check(offset, data.len() as u64, true)?;
        if data.is_empty() {
            return Ok(());
        }
        let (ptr, len) = (data.as_ptr() as *const c_void, data.len());
        // The bytes stay with the answer's completion until it is dropped,
        // which is after the send: the exporter answers only once it has them.
        let done = Completion::keeping(data);
        let s = self.start_write(offset, ptr, len, UCS_MEMORY_TYPE_HOST, done)?;
        let st = Done(Arc::clone(&s.done)).await;
        if let Some(sent) = &s.sent {
            Done(Arc::clone(sent)).await;
        }
        self.conn.forget(s.req);
        self.conn.answer(st, s.done.refused(), "a remote write")
    }
}

impl Drop for RemoteMemory {
    fn drop(&mut self) {
        self.conn.close();
    }
}
