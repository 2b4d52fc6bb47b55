//! A channel's samples in place: a publisher's `Loan` of a slot, filled
//! through a writable buffer view (or `write`) and published, and a
//! subscriber's `Sample`, read through a read-only view (or `read`) and
//! released. Both keep what their views point into: a loan's views keep
//! the publisher from closing (`channel_end.rs`), and a sample keeps its
//! subscriber (and so the slots' mapping) until it is released.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hal::channel::{LoanTicket, Subscriber as InnerSubscriber};
use hal::objects::SampleObj;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::channel_end::{closed, next_sample, PublisherEnd};
use crate::errors::{invalid, to_py};
use crate::sample;

/// A slot loaned to the publisher: fill it (`memoryview(loan)` where the
/// memory is host-visible, `loan.write(offset, data)` anywhere), then
/// `loan.publish(n)`. Dropped unpublished, the slot is loaned again next.
#[pyclass(module = "hal", frozen)]
pub struct Loan {
    publisher: Arc<PublisherEnd>,
    ticket: Mutex<Option<LoanTicket>>,
    /// The slot's host address, where the memory is host-visible.
    host: Option<usize>,
    offset: u64,
    capacity: u64,
    slot: usize,
    sequence: u64,
    /// This loan's buffer views now.
    views: AtomicUsize,
}

impl Loan {
    /// Loan the publisher's next slot (`now`: without waiting).
    pub(crate) fn take(py: Python<'_>, publisher: &Arc<PublisherEnd>, now: bool) -> PyResult<Loan> {
        let (ticket, host) = publisher.with(py, move |p| {
            let loan = if now { p.try_loan()? } else { p.loan()? };
            let ticket = loan.detach();
            let host = p
                .memory()
                .host_ptr()
                .map(|base| base as usize + ticket.offset() as usize);
            Ok((ticket, host))
        })?;
        Ok(Loan {
            publisher: Arc::clone(publisher),
            host,
            offset: ticket.offset(),
            capacity: ticket.capacity(),
            slot: ticket.slot(),
            sequence: ticket.sequence(),
            ticket: Mutex::new(Some(ticket)),
            views: AtomicUsize::new(0),
        })
    }

    fn unpublished(&self) -> PyResult<()> {
        match &*self.ticket.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(_) => Ok(()),
            None => Err(invalid("this loan was published: loan the next slot")),
        }
    }
}

#[pymethods]
impl Loan {
    /// The slot's size in bytes.
    fn __len__(&self) -> usize {
        self.capacity as usize
    }

    /// The slot's index.
    #[getter]
    fn slot(&self) -> usize {
        self.slot
    }

    /// The sequence number the sample will have.
    #[getter]
    fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Copy `data` into the slot at `offset`.
    #[pyo3(signature = (data, offset=0))]
    fn write(&self, py: Python<'_>, data: &[u8], offset: u64) -> PyResult<()> {
        self.unpublished()?;
        let end = offset.checked_add(data.len() as u64);
        if end.is_none_or(|e| e > self.capacity) {
            return Err(invalid(format!(
                "{} bytes at {offset} of a slot of {}",
                data.len(),
                self.capacity
            )));
        }
        let at = self.offset + offset;
        let data = data.to_vec();
        self.publisher
            .with(py, move |p| p.memory().write(at, &data))
    }

    /// Publish the slot's first `length` bytes (all of it by default); the
    /// sample's sequence number. `BufferError` while a view of the loan is
    /// alive: the subscribers would read what it still writes.
    #[pyo3(signature = (length=None))]
    fn publish(&self, py: Python<'_>, length: Option<u64>) -> PyResult<u64> {
        let ticket = {
            // Views are counted with the ticket locked (`__getbuffer__`).
            let mut held = self.ticket.lock().unwrap_or_else(|e| e.into_inner());
            let views = self.views.load(Ordering::Acquire);
            if views > 0 {
                return Err(PyBufferError::new_err(format!(
                    "{views} view(s) of this loan are alive: release them \
                     (memoryview.release(), del the arrays) before publishing"
                )));
            }
            held.take()
                .ok_or_else(|| invalid("this loan was published already"))?
        };
        let len = length.unwrap_or(self.capacity);
        self.publisher
            .with(py, move |p| p.publish_ticket(ticket, len))
    }

    /// Buffer protocol: the slot, writable, where the memory is
    /// host-visible.
    ///
    /// # Safety
    ///
    /// Called by Python with a valid `view` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let loan = slf.get();
        let Some(host) = loan.host else {
            return Err(PyBufferError::new_err(
                "the channel's memory is not host-visible (device memory): use \
                 loan.write(data, offset)",
            ));
        };
        let publisher = &loan.publisher;
        {
            // Counted with the ticket locked, so that `publish` (which checks
            // the count with it locked) never publishes under a view, and
            // with the publisher locked, so that `close` never frees the
            // memory under one.
            let ticket = loan.ticket.lock().unwrap_or_else(|e| e.into_inner());
            if ticket.is_none() {
                return Err(invalid("this loan was published: loan the next slot"));
            }
            let held = publisher.inner.lock().unwrap_or_else(|e| e.into_inner());
            if held.is_none() {
                return Err(to_py(closed("Publisher")));
            }
            publisher.views.fetch_add(1, Ordering::AcqRel);
            loan.views.fetch_add(1, Ordering::AcqRel);
        }
        let owner = slf.clone().into_any();
        // SAFETY: Python passes a valid `view`; the slot's `capacity` bytes
        // at `host` are host memory of the publisher's allocation, which
        // stays allocated while a view is counted (`close` refuses) and the
        // view's owner (this loan) keeps the publisher object alive.
        let filled = unsafe {
            crate::buffer::fill_bytes(view, flags, owner, host as *mut u8, loan.capacity, false)
        };
        if filled.is_err() {
            publisher.views.fetch_sub(1, Ordering::AcqRel);
            loan.views.fetch_sub(1, Ordering::AcqRel);
        }
        filled
    }

    /// Buffer protocol: one view fewer.
    ///
    /// # Safety
    ///
    /// Called by Python with the view `__getbuffer__` filled.
    unsafe fn __releasebuffer__(&self, view: *mut pyo3::ffi::Py_buffer) {
        let _ = view;
        self.views.fetch_sub(1, Ordering::AcqRel);
        self.publisher.views.fetch_sub(1, Ordering::AcqRel);
    }

    fn __repr__(&self) -> String {
        format!(
            "<hal.Loan slot {} of {} bytes, sample {}>",
            self.slot, self.capacity, self.sequence
        )
    }
}

/// A sample received in place: read it (`memoryview(sample)` where the
/// memory is host-visible, `sample.read()` anywhere); it holds its slot
/// until `release()`, the end of a `with` block, or the object's end.
#[pyclass(module = "hal", frozen)]
pub struct Sample {
    sample: SampleObj<InnerSubscriber>,
}

impl Sample {
    /// The subscriber's next sample (`now`: if one is there), or None when
    /// `timeout` passed.
    pub(crate) fn take(
        py: Python<'_>,
        sub: Arc<InnerSubscriber>,
        timeout: Option<Duration>,
        now: bool,
    ) -> PyResult<Option<Sample>> {
        let got = py
            .allow_threads(|| {
                let Some(sample) = next_sample(&sub, timeout, now)? else {
                    return Ok(None);
                };
                let ticket = sample.detach();
                // Host reads through the view: the bytes must be there
                // (`SampleObj::new` waits for a stream-ordered publisher).
                SampleObj::new(Arc::clone(&sub), ticket).map(Some)
            })
            .map_err(to_py)?;
        Ok(got.map(|sample| Sample { sample }))
    }
}

#[pymethods]
impl Sample {
    /// Its length in bytes.
    fn __len__(&self) -> usize {
        self.sample.len() as usize
    }

    /// Its sequence number (the publisher's count, from 0).
    #[getter]
    fn sequence(&self) -> u64 {
        self.sample.sequence()
    }

    /// `n` bytes from `offset` (all that follow by default), copied.
    #[pyo3(signature = (offset=0, n=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        n: Option<u64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        sample::read(py, &self.sample, offset, n)
    }

    /// Release the sample's slot to the publisher. `BufferError` while a
    /// view of it is alive.
    fn release(&self) -> PyResult<()> {
        sample::release(&self.sample)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.release()
    }

    /// Buffer protocol: the sample's bytes, read-only, where the memory is
    /// host-visible.
    ///
    /// # Safety
    ///
    /// Called by Python with a valid `view` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let owner = slf.clone().into_any();
        let not_host =
            "the channel's memory is not host-visible (device memory): use sample.read()";
        // SAFETY: Python passes a valid `view`; `owner` holds the sample.
        unsafe { sample::lend(owner, &slf.get().sample, view, flags, not_host) }
    }

    /// Buffer protocol: one view fewer.
    ///
    /// # Safety
    ///
    /// Called by Python with the view `__getbuffer__` filled.
    unsafe fn __releasebuffer__(&self, view: *mut pyo3::ffi::Py_buffer) {
        let _ = view;
        self.sample.drop_view();
    }

    fn __repr__(&self) -> String {
        format!(
            "<hal.Sample {} of {} bytes>",
            self.sample.sequence(),
            self.sample.len()
        )
    }
}
