//! `hal.remote.RemoteMemory`: another host's memory export, read and
//! written (each operation served and checked by the exporter, the bytes
//! moved zero-copy by UCX), into and from Python buffers or hal memory.
#![allow(unsafe_code)]

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use hal::device::check_bounds;
use hal::remote::RemoteMemory as Remote;

use crate::errors::OrRaise;
use crate::memory::Memory;
use crate::raw_buffer::RawBuffer;

/// Another host's memory (`Node.connect`). `len(r)` is its size in bytes.
/// The exporter counts this process among its importers until this object
/// goes (or `close()`). Transfers release the GIL.
#[pyclass(module = "hal.remote", frozen)]
pub struct RemoteMemory {
    /// None once closed.
    inner: std::sync::Mutex<Option<std::sync::Arc<Remote>>>,
}

impl RemoteMemory {
    pub(crate) fn new(remote: Remote) -> RemoteMemory {
        RemoteMemory {
            inner: std::sync::Mutex::new(Some(std::sync::Arc::new(remote))),
        }
    }

    /// The live connection, or `hal.ClosedError` once closed.
    fn remote(&self) -> PyResult<std::sync::Arc<Remote>> {
        let held = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        held.clone().ok_or_else(|| {
            crate::errors::to_py(hal::Error::Closed {
                what: "this RemoteMemory was closed".into(),
            })
        })
    }
}

impl Drop for RemoteMemory {
    fn drop(&mut self) {
        // Letting go flushes what was written and closes the connection.
        let held = self
            .inner
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        crate::remote_wait::drop_released(held);
    }
}

#[pymethods]
impl RemoteMemory {
    /// The size of the remote memory in bytes.
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.remote()?.len() as usize)
    }

    /// True when the export refuses writes.
    #[getter]
    fn read_only(&self) -> PyResult<bool> {
        Ok(self.remote()?.is_read_only())
    }

    /// `size` bytes at `offset`, copied out. Out of range is
    /// `hal.InvalidArgumentError` (nothing is sent); an exporter that went
    /// away `hal.ClosedError`.
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        size: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let r = self.remote()?;
        // Checked before the bytes are allocated: a size past the memory
        // is refused, not attempted.
        check_bounds(offset, size as u64, r.len()).or_raise()?;
        let mut out = vec![0u8; size];
        py.allow_threads(|| r.read(offset, &mut out)).or_raise()?;
        Ok(PyBytes::new(py, &out))
    }

    /// Fill `obj` with its length of bytes from remote `offset`: any
    /// writable, C-contiguous buffer (a NumPy array of any dtype, a
    /// `bytearray`), or a `hal.Memory` (`len(m)` bytes, device memory too
    /// where the loaded UCX was built with CUDA). The number of bytes read.
    #[pyo3(signature = (obj, offset=0))]
    fn read_into(&self, py: Python<'_>, obj: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        let r = self.remote()?;
        if let Ok(memory) = obj.downcast::<Memory>() {
            let local = std::sync::Arc::clone(&memory.get().inner);
            let len = local.size();
            py.allow_threads(|| r.read_into(offset, &*local, 0, len))
                .or_raise()?;
            return Ok(len as usize);
        }
        let buffer = RawBuffer::get(obj, true)?;
        let (addr, len) = (buffer.addr(), buffer.len());
        py.allow_threads(|| {
            if len == 0 {
                return r.read(offset, &mut []);
            }
            // SAFETY: `buffer` (held until after this call) exports `len`
            // writable bytes at `addr`, which stay there while it is held.
            let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
            r.read(offset, dst)
        })
        .or_raise()?;
        drop(buffer);
        Ok(len)
    }

    /// Write `data` at `offset`: any C-contiguous buffer (`bytes`, a NumPy
    /// array, a `memoryview`), or a `hal.Memory` (`len(m)` bytes, device
    /// memory too where the loaded UCX was built with CUDA). Done when
    /// `data` may be reused; `flush()` (or `write_signal`) for the bytes to
    /// be in the remote memory. A read-only export refuses
    /// (`hal.PermissionDeniedError`, nothing is sent).
    fn write(&self, py: Python<'_>, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = self.remote()?;
        if let Ok(memory) = data.downcast::<Memory>() {
            let local = std::sync::Arc::clone(&memory.get().inner);
            let len = local.size();
            return py
                .allow_threads(|| r.write_from(offset, &*local, 0, len))
                .or_raise();
        }
        with_bytes(py, data, |bytes| r.write(offset, bytes))
    }

    /// Write `data` (any C-contiguous buffer) at `offset`, then tell the
    /// exporter it is there, in that order: its
    /// `RemoteExport.wait_signal()` returns once the bytes are in its
    /// memory.
    fn write_signal(&self, py: Python<'_>, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = self.remote()?;
        with_bytes(py, data, |bytes| r.write_signal(offset, bytes))
    }

    /// Wait until every write issued so far is in the remote memory.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let r = self.remote()?;
        py.allow_threads(|| r.flush()).or_raise()
    }

    /// Let go of the remote memory now (as when this object goes): what
    /// was written is flushed, and the exporter stops counting this
    /// process among its importers.
    fn close(&self, py: Python<'_>) {
        let held = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
        py.allow_threads(|| drop(held));
    }

    fn __repr__(&self) -> String {
        match self.remote() {
            Ok(r) => format!(
                "<hal.remote.RemoteMemory of {} bytes at {}>",
                r.len(),
                r.handle().listener
            ),
            Err(_) => "<hal.remote.RemoteMemory (closed)>".into(),
        }
    }
}

/// Run `f` on the bytes of `data` (any C-contiguous buffer, not copied)
/// with the GIL released.
fn with_bytes(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    f: impl FnOnce(&[u8]) -> hal::Result<()> + Send,
) -> PyResult<()> {
    let buffer = RawBuffer::get(data, false)?;
    let (addr, len) = (buffer.addr(), buffer.len());
    py.allow_threads(|| {
        if len == 0 {
            return f(&[]);
        }
        // SAFETY: `buffer` (held until after this call) exports `len`
        // readable bytes at `addr`, which stay there while it is held.
        f(unsafe { std::slice::from_raw_parts(addr as *const u8, len) })
    })
    .or_raise()?;
    drop(buffer);
    Ok(())
}
