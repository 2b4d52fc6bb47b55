//! A channel's samples in place for C: `hal_publisher_loan` lends the publisher the
//! next slot (its address where the memory is host-visible), which it
//! fills and publishes with `hal_loan_publish`; `hal_receive_sample` gives
//! a subscriber the next sample where it lies, held until
//! `hal_sample_release`. A loan keeps its publisher, and a sample its
//! subscriber, alive (and so the slots' memory mapped) until it is
//! published or released, whatever was released meanwhile.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use hal_facade::channel::{LoanTicket, Subscriber};
use hal_facade::kit::lock::lock;
use hal_facade::objects::{SampleObj, SubscriberObj};
use hal_facade::Error;

use crate::channel::{hal_publisher, hal_subscriber, PublisherObj, PUBLISHERS, SUBSCRIBERS};
use crate::device::{need, put};
use crate::group::bytes_arg;
use crate::last_error::call;
use crate::memory::timeout;
use crate::sample::{hand_out, read_out};
use crate::status::{hal_status, Failure};
use crate::table::{Kind, Table};

/// A slot loaned to the publisher (opaque): `hal_publisher_loan`; ends with
/// `hal_loan_publish` or `hal_loan_release`.
#[allow(non_camel_case_types)]
pub struct hal_loan {
    _private: [u8; 0],
}

/// A sample received in place (opaque): `hal_receive_sample`; ends with
/// `hal_sample_release`.
#[allow(non_camel_case_types)]
pub struct hal_sample {
    _private: [u8; 0],
}

struct LoanObj {
    publisher: Arc<PublisherObj>,
    ticket: Mutex<Option<LoanTicket>>,
    offset: u64,
    capacity: u64,
}

/// A sample of a channel's subscriber, in place.
type Sample = SampleObj<SubscriberObj<Subscriber>>;

static LOANS: Table<LoanObj> = Table::new(Kind::Loan);
static SAMPLES: Table<Sample> = Table::new(Kind::Sample);

/// The range `offset .. offset + len` of a slot of `size` bytes.
fn inside(offset: u64, len: usize, size: u64, what: &str) -> Result<(), Failure> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Failure::invalid(format!(
            "{len} bytes at {offset} of a {what} of {size}"
        ))),
    }
}

/// Loan the next slot: `out` receives the loan, `out_ptr` (may be NULL)
/// the slot's address where the channel's memory is host-visible (NULL
/// otherwise: fill it with `hal_loan_write`), `out_capacity` (may be NULL)
/// its size. With `wait`, wait (up to the channel's timeout) while the
/// subscribers still hold the slot; without, `HAL_ERR_BUSY` at once. The
/// address is valid until the loan is published or released.
///
/// # Safety
///
/// `out` NULL or valid for a write of a pointer; `out_ptr` and
/// `out_capacity` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_publisher_loan(
    publisher: *mut hal_publisher,
    wait: bool,
    out: *mut *mut hal_loan,
    out_ptr: *mut *mut c_void,
    out_capacity: *mut u64,
) -> hal_status {
    call("hal_publisher_loan", || {
        need(out, "out")?;
        let p = PUBLISHERS.get(publisher as usize, "publisher")?;
        let (ticket, host) = {
            let mut held = lock(&p.publisher);
            let loan = if wait { held.loan()? } else { held.try_loan()? };
            let ticket = loan.detach();
            let host = held
                .memory()
                .host_ptr()
                .map(|base| base.wrapping_add(ticket.offset() as usize));
            (ticket, host)
        };
        let (offset, capacity) = (ticket.offset(), ticket.capacity());
        let token = LOANS.insert(Arc::new(LoanObj {
            publisher: p,
            ticket: Mutex::new(Some(ticket)),
            offset,
            capacity,
        }));
        if !out_ptr.is_null() {
            // SAFETY: not NULL, and valid per the contract.
            unsafe { out_ptr.write(host.map_or(std::ptr::null_mut(), |h| h.cast::<c_void>())) };
        }
        if !out_capacity.is_null() {
            // SAFETY: not NULL, and valid per the contract.
            unsafe { out_capacity.write(capacity) };
        }
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_loan, "out") }
    })
}

/// Copy `len` bytes of `data` into the loaned slot at `offset` (any
/// memory, device memory included).
///
/// # Safety
///
/// `data` is valid for `len` bytes (or `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn hal_loan_write(
    loan: *mut hal_loan,
    offset: u64,
    data: *const c_void,
    len: usize,
) -> hal_status {
    call("hal_loan_write", || {
        let l = LOANS.get(loan as usize, "loan")?;
        // SAFETY: per the contract.
        let data = unsafe { bytes_arg(data, len, "data") }?;
        inside(offset, len, l.capacity, "slot")?;
        let held = lock(&l.publisher.publisher);
        held.memory().write(l.offset + offset, data)?;
        Ok(())
    })
}

/// Publish the loaned slot's first `len` bytes and end the loan; `out_seq`
/// (may be NULL) receives the sample's sequence number. A loan taken
/// before another loan of the channel was published is stale
/// (`HAL_ERR_INVALID_ARGUMENT`, and it ends); publishing a loan again is
/// `HAL_ERR_DOUBLE_RELEASE`.
///
/// # Safety
///
/// `out_seq` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_loan_publish(
    loan: *mut hal_loan,
    len: u64,
    out_seq: *mut u64,
) -> hal_status {
    call("hal_loan_publish", || {
        let l = LOANS.remove(loan as usize, "loan")?;
        let ticket = lock(&l.ticket)
            .take()
            .ok_or_else(|| Failure::invalid("the loan was published already"))?;
        let seq = lock(&l.publisher.publisher).publish_ticket(ticket, len)?;
        if !out_seq.is_null() {
            // SAFETY: not NULL, and valid per the contract.
            unsafe { out_seq.write(seq) };
        }
        Ok(())
    })
}

/// End a loan without publishing it: the slot is loaned again next. A
/// second release is `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_loan_release(loan: *mut hal_loan) -> hal_status {
    call("hal_loan_release", || {
        LOANS.remove(loan as usize, "loan").map(drop)
    })
}

/// Receive the next sample in place: `out` receives the sample, `out_ptr`
/// (may be NULL) its address where the channel's memory is host-visible
/// (NULL otherwise: copy it out with `hal_sample_read`), valid until the
/// sample is released, `out_len` its length, `out_seq` (may be NULL) its
/// sequence number. Waits up to `timeout_ns` (negative: no limit; 0: looks
/// once): `HAL_ERR_TIMEOUT` when none came; `HAL_ERR_CLOSED` once the
/// publisher closed or died and every sample was received. The sample
/// holds its slot until `hal_sample_release`.
///
/// # Safety
///
/// `out` NULL or valid for a write of a pointer; `out_ptr`, `out_len` and
/// `out_seq` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_receive_sample(
    subscriber: *mut hal_subscriber,
    timeout_ns: i64,
    out: *mut *mut hal_sample,
    out_ptr: *mut *const c_void,
    out_len: *mut u64,
    out_seq: *mut u64,
) -> hal_status {
    call("hal_receive_sample", || {
        need(out, "out")?;
        need(out_len, "out_len")?;
        let s = SUBSCRIBERS.get(subscriber as usize, "subscriber")?;
        let sub = &s.subscriber;
        let sample = match timeout(timeout_ns) {
            Some(t) if t.is_zero() => sub.try_receive()?.ok_or_else(|| Error::Timeout {
                after: t,
                what: "a sample (none is there now)".into(),
            })?,
            t => sub.receive_timeout(t)?,
        };
        let ticket = sample.detach();
        let sample = Sample::new(s, ticket)?;
        // SAFETY: `out` and `out_len` checked not NULL above; the others
        // per the contract.
        unsafe { hand_out(&SAMPLES, sample, out, out_ptr, out_len, out_seq) }
    })
}

/// Copy `len` bytes of the sample from `offset` into `dst` (any memory,
/// device memory included).
///
/// # Safety
///
/// `dst` is valid for a write of `len` bytes (or `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn hal_sample_read(
    sample: *mut hal_sample,
    offset: u64,
    dst: *mut c_void,
    len: usize,
) -> hal_status {
    call("hal_sample_read", || {
        // SAFETY: per the contract.
        unsafe { read_out(&SAMPLES, sample as usize, offset, dst, len) }
    })
}

/// Release the sample's slot to the publisher. A second release is
/// `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_sample_release(sample: *mut hal_sample) -> hal_status {
    call("hal_sample_release", || {
        SAMPLES.remove(sample as usize, "sample").map(drop)
    })
}
