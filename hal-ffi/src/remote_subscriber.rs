//! Subscribers on another host than their channel's publisher: connected
//! with an offer's text (`hal_remote_subscriber_connect`), each sample
//! received into a slot of the subscriber's own and read there, in place
//! (`hal_remote_receive_sample`), held until `hal_remote_sample_release`.
//! A sample keeps its subscriber (and so the slots' memory) alive until
//! it is released, whatever was released meanwhile.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use hal_facade::objects::{SampleObj, SubscriberObj};
use hal_facade::remote::{RemoteSubscribeOptions, RemoteSubscriber};

use crate::device::{hal_device, need, put, DEVICES};
use crate::last_error::call;
use crate::memory::timeout;
use crate::options::read_sized;
use crate::remote_node::{hal_remote_node, NODES};
use crate::sample::{hand_out, read_out};
use crate::status::{hal_status, Failure};
use crate::table::{Kind, Table};
use crate::text::str_arg;

/// A subscriber to a channel of another host (opaque):
/// `hal_remote_subscriber_connect`; `hal_remote_subscriber_release`
/// unsubscribes.
#[allow(non_camel_case_types)]
pub struct hal_remote_subscriber {
    _private: [u8; 0],
}

/// A sample received from another host, in place (opaque):
/// `hal_remote_receive_sample`; ends with `hal_remote_sample_release`.
#[allow(non_camel_case_types)]
pub struct hal_remote_sample {
    _private: [u8; 0],
}

/// A sample received from another host, in place.
type Sample = SampleObj<SubscriberObj<RemoteSubscriber>>;

static SUBSCRIBERS: Table<SubscriberObj<RemoteSubscriber>> = Table::new(Kind::RemoteSubscriber);
static SAMPLES: Table<Sample> = Table::new(Kind::RemoteSample);

/// Options of `hal_remote_subscriber_connect`. NULL options, and zero
/// fields, mean the defaults.
///
/// ```c
/// hal_remote_subscribe_options opts = {sizeof opts, 4};
/// hal_remote_subscriber_connect(node, dev, text, &opts, &sub);
/// ```
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct hal_remote_subscribe_options {
    /// `sizeof(hal_remote_subscribe_options)`: fields past it are taken as
    /// zero.
    pub size: u32,
    /// The most samples the subscriber holds at once: the slots of its own
    /// it allocates (0: as many as the channel has).
    pub slots: u32,
}

/// The options of `opts` (NULL: the defaults).
///
/// # Safety
///
/// `opts` is NULL or points to a `hal_remote_subscribe_options` of at
/// least its `size` bytes.
unsafe fn subscribe_options(
    opts: *const hal_remote_subscribe_options,
) -> Result<RemoteSubscribeOptions, Failure> {
    let options = RemoteSubscribeOptions::default();
    if opts.is_null() {
        return Ok(options);
    }
    // SAFETY: per this function's contract; the structure holds only
    // integers.
    let raw: hal_remote_subscribe_options =
        unsafe { read_sized(opts.cast(), "hal_remote_subscribe_options") }?;
    Ok(options.slots(raw.slots as usize))
}

/// Subscribe from `node` to the channel offer `text` names (the text of
/// `hal_remote_offer_text` on the publisher's host); the subscriber's
/// slots are allocated on `device` (host memory). In broadcast mode it
/// receives the samples published from now on.
///
/// Statuses: `HAL_ERR_INVALID_HANDLE` (not a handle text),
/// `HAL_ERR_INVALID_ARGUMENT` (a handle of something else than a channel
/// offer, too many slots), `HAL_ERR_PERMISSION_DENIED` (the text's secret
/// is not the offer's), `HAL_ERR_NOT_FOUND` (the offer is gone),
/// `HAL_ERR_CLOSED` (the publisher is gone, or its node cannot be
/// reached), `HAL_ERR_BUSY` (the channel has all the subscribers it can
/// take), `HAL_ERR_TIMEOUT`, `HAL_ERR_UNAVAILABLE` (no UCX).
///
/// # Safety
///
/// `text` is NULL or a NUL-terminated string; `opts` is NULL or a valid
/// `hal_remote_subscribe_options`; `out` is NULL or valid for a write of a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_subscriber_connect(
    node: *const hal_remote_node,
    device: *const hal_device,
    text: *const c_char,
    opts: *const hal_remote_subscribe_options,
    out: *mut *mut hal_remote_subscriber,
) -> hal_status {
    call("hal_remote_subscriber_connect", || {
        need(out, "out")?;
        let node = NODES.get(node as usize, "node")?;
        let dev = DEVICES.get(device as usize, "device")?;
        // SAFETY: per the contract.
        let text = unsafe { str_arg(text, "text") }?;
        // SAFETY: per the contract.
        let options = unsafe { subscribe_options(opts) }?;
        let subscriber = RemoteSubscriber::connect(&node, &*dev.device, text.trim(), &options)?;
        let token = SUBSCRIBERS.insert(Arc::new(SubscriberObj::new(subscriber, dev)));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_remote_subscriber, "out") }
    })
}

/// Receive the next sample in place: `out` receives the sample, `out_ptr`
/// (may be NULL) its address in the subscriber's slots (NULL where they
/// are not host-visible: copy it out with `hal_remote_sample_read`),
/// valid until the sample is released, `out_len` its length, `out_seq`
/// (may be NULL) its sequence number. Waits up to `timeout_ns` (negative:
/// no limit; 0: looks once): `HAL_ERR_TIMEOUT` when none came;
/// `HAL_ERR_CLOSED` once the channel ended (its publisher closed or died,
/// its offer was withdrawn, or the connection failed) and every sample
/// that reached this subscriber was received. The sample holds its slot,
/// and the publisher's, until `hal_remote_sample_release`.
///
/// # Safety
///
/// `out` NULL or valid for a write of a pointer; `out_ptr`, `out_len` and
/// `out_seq` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_receive_sample(
    subscriber: *mut hal_remote_subscriber,
    timeout_ns: i64,
    out: *mut *mut hal_remote_sample,
    out_ptr: *mut *const c_void,
    out_len: *mut u64,
    out_seq: *mut u64,
) -> hal_status {
    call("hal_remote_receive_sample", || {
        need(out, "out")?;
        need(out_len, "out_len")?;
        let s = SUBSCRIBERS.get(subscriber as usize, "subscriber")?;
        let ticket = s.subscriber.receive_timeout(timeout(timeout_ns))?.detach();
        let sample = Sample::new(s, ticket)?;
        // SAFETY: `out` and `out_len` checked not NULL above; the others
        // per the contract.
        unsafe { hand_out(&SAMPLES, sample, out, out_ptr, out_len, out_seq) }
    })
}

/// Copy `len` bytes of the sample from `offset` into `dst`.
///
/// # Safety
///
/// `dst` is valid for a write of `len` bytes (or `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn hal_remote_sample_read(
    sample: *mut hal_remote_sample,
    offset: u64,
    dst: *mut c_void,
    len: usize,
) -> hal_status {
    call("hal_remote_sample_read", || {
        // SAFETY: per the contract.
        unsafe { read_out(&SAMPLES, sample as usize, offset, dst, len) }
    })
}

/// Release the sample: its slot is free again, and the publisher's side
/// frees the channel's slot. A second release is
/// `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_remote_sample_release(sample: *mut hal_remote_sample) -> hal_status {
    call("hal_remote_sample_release", || {
        SAMPLES.remove(sample as usize, "sample").map(drop)
    })
}

/// Unsubscribe: the connection closes, and the publisher's side releases
/// every sample it forwarded here. A sample still held keeps the
/// subscription until it is released too. A second release is
/// `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_remote_subscriber_release(
    subscriber: *mut hal_remote_subscriber,
) -> hal_status {
    call("hal_remote_subscriber_release", || {
        SUBSCRIBERS
            .remove(subscriber as usize, "subscriber")
            .map(drop)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_name_the_slots() {
        // SAFETY: NULL options.
        let plain = unsafe { subscribe_options(std::ptr::null()) }.unwrap();
        assert_eq!(plain.slots, 0);
        let opts = hal_remote_subscribe_options {
            size: std::mem::size_of::<hal_remote_subscribe_options>() as u32,
            slots: 3,
        };
        // SAFETY: valid options.
        assert_eq!(unsafe { subscribe_options(&opts) }.unwrap().slots, 3);
        // A size that is not the structure's.
        let short = hal_remote_subscribe_options { size: 4, ..opts };
        // SAFETY: as above.
        let e = unsafe { subscribe_options(&short) }.unwrap_err();
        assert_eq!(e.status, hal_status::HAL_ERR_INVALID_ARGUMENT);
        assert!(e.message.contains("sizeof"), "{}", e.message);
    }
}
