//! Channels (`hal::channel`) for C: a publisher and its subscribers, the
//! samples' bytes copied in and out (in place: `channel_view.rs`).

use std::ffi::{c_char, c_void};
use std::mem::size_of;
use std::sync::{Arc, Mutex};

use hal_facade::channel::{ChannelOptions, Mode, Publisher, SubscribeOptions, Subscriber};
use hal_facade::kit::lock::lock;
use hal_facade::Error;

use crate::device::{hal_device, need, put, DEVICES};
use crate::group::bytes_arg;
use crate::last_error::call;
use crate::memory::timeout;
use crate::options::read_sized;
use crate::status::{hal_status, Failure};
use crate::table::{Kind, Table};
use crate::text::str_arg;
use hal_facade::objects::{DeviceObj, SubscriberObj};

/// A channel's samples go to every subscriber.
pub const HAL_CHANNEL_BROADCAST: u32 = 0;
/// A channel's samples go to one subscriber each.
pub const HAL_CHANNEL_QUEUE: u32 = 1;

/// Options of `hal_publisher_create`. NULL options mean the defaults (8
/// slots of 64 KiB, broadcast, a publish waits up to 60 s for a slot).
///
/// ```c
/// hal_channel_options opts = {sizeof opts, 4, 4096, HAL_CHANNEL_QUEUE, -1};
/// ```
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct hal_channel_options {
    /// `sizeof(hal_channel_options)`: fields past it are taken as zero.
    pub size: u32,
    /// How many slots (0: 8).
    pub slots: u32,
    /// The size of a slot in bytes (0: 65536).
    pub slot_size: u64,
    /// `HAL_CHANNEL_BROADCAST` or `HAL_CHANNEL_QUEUE`.
    pub mode: u32,
    /// How long `hal_publish` waits for a free slot, in nanoseconds
    /// (negative: no limit; 0: 60 s).
    pub timeout_ns: i64,
}

/// The publishing end of a channel (opaque): `hal_publisher_create`;
/// `hal_publisher_release` closes the channel.
#[allow(non_camel_case_types)]
pub struct hal_publisher {
    _private: [u8; 0],
}

/// The receiving end of a channel (opaque): `hal_subscriber_open`;
/// `hal_subscriber_release` unsubscribes.
#[allow(non_camel_case_types)]
pub struct hal_subscriber {
    _private: [u8; 0],
}

pub(crate) struct PublisherObj {
    pub(crate) publisher: Mutex<Publisher>,
    _device: Arc<DeviceObj>,
}

pub(crate) static PUBLISHERS: Table<PublisherObj> = Table::new(Kind::Publisher);
pub(crate) static SUBSCRIBERS: Table<SubscriberObj<Subscriber>> = Table::new(Kind::Subscriber);

/// The options of `opts` (NULL: the defaults).
///
/// # Safety
///
/// `opts` is NULL or points to a `hal_channel_options` of at least its
/// `size` bytes.
unsafe fn channel_options(opts: *const hal_channel_options) -> Result<ChannelOptions, Failure> {
    let mut options = ChannelOptions::default();
    if opts.is_null() {
        return Ok(options);
    }
    const _: () = assert!(size_of::<hal_channel_options>() >= 8);
    // SAFETY: per this function's contract; the structure is integers only.
    let raw: hal_channel_options = unsafe { read_sized(opts.cast(), "hal_channel_options") }?;
    if raw.slots > 0 {
        options = options.slots(raw.slots as usize);
    }
    if raw.slot_size > 0 {
        options = options.slot_size(raw.slot_size);
    }
    options = options.mode(match raw.mode {
        HAL_CHANNEL_BROADCAST => Mode::Broadcast,
        HAL_CHANNEL_QUEUE => Mode::Queue,
        other => {
            return Err(Failure::invalid(format!(
                "`mode` is {other}: HAL_CHANNEL_BROADCAST or HAL_CHANNEL_QUEUE"
            )))
        }
    });
    if raw.timeout_ns != 0 {
        options = options.timeout(
            timeout(raw.timeout_ns).unwrap_or(std::time::Duration::from_secs(u64::from(u32::MAX))),
        );
    }
    Ok(options)
}

/// Create the channel `name` of this user with its slots on `device`.
/// `HAL_ERR_ALREADY_EXISTS` while another live publisher has it.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string; `options` NULL or a valid
/// `hal_channel_options`; `out` NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_publisher_create(
    device: *mut hal_device,
    name: *const c_char,
    options: *const hal_channel_options,
    out: *mut *mut hal_publisher,
) -> hal_status {
    call("hal_publisher_create", || {
        need(out, "out")?;
        let device = DEVICES.get(device as usize, "device")?;
        // SAFETY: per the contract.
        let name = unsafe { str_arg(name, "name") }?;
        // SAFETY: per the contract.
        let options = unsafe { channel_options(options) }?;
        let publisher = Publisher::create(&*device.device, name, &options)?;
        let token = PUBLISHERS.insert(Arc::new(PublisherObj {
            publisher: Mutex::new(publisher),
            _device: device,
        }));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_publisher, "out") }
    })
}

/// Publish `len` bytes of `data` as the next sample. With `wait`, wait (up
/// to the channel's timeout) while the subscribers still hold the next
/// slot; without, answer `HAL_ERR_BUSY` at once. `out_seq` (may be NULL)
/// receives the sample's sequence number.
///
/// # Safety
///
/// `data` is valid for `len` bytes (or `len` is 0); `out_seq` NULL or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_publish(
    publisher: *mut hal_publisher,
    data: *const c_void,
    len: usize,
    wait: bool,
    out_seq: *mut u64,
) -> hal_status {
    call("hal_publish", || {
        let p = PUBLISHERS.get(publisher as usize, "publisher")?;
        // SAFETY: per the contract.
        let data = unsafe { bytes_arg(data, len, "data") }?;
        let mut held = lock(&p.publisher);
        let loan = if wait { held.loan()? } else { held.try_loan()? };
        loan.write(0, data)?;
        let seq = loan.publish(len as u64)?;
        if !out_seq.is_null() {
            // SAFETY: not NULL, and valid per the contract.
            unsafe { out_seq.write(seq) };
        }
        Ok(())
    })
}

/// Close the channel: its subscribers receive what was published, then
/// `HAL_ERR_CLOSED` (once the loans still out, `hal_publisher_loan`, are published
/// or released). A second release is `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_publisher_release(publisher: *mut hal_publisher) -> hal_status {
    call("hal_publisher_release", || {
        PUBLISHERS.remove(publisher as usize, "publisher").map(drop)
    })
}

/// Subscribe to the channel `name` of this user, its slots imported onto
/// `device`; `out_slot_size` (may be NULL) receives the channel's slot
/// size, the most bytes a sample has.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string; `out` NULL or valid for a
/// write of a pointer; `out_slot_size` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_subscriber_open(
    device: *mut hal_device,
    name: *const c_char,
    out: *mut *mut hal_subscriber,
    out_slot_size: *mut u64,
) -> hal_status {
    call("hal_subscriber_open", || {
        need(out, "out")?;
        let device = DEVICES.get(device as usize, "device")?;
        // SAFETY: per the contract.
        let name = unsafe { str_arg(name, "name") }?;
        let subscriber = Subscriber::open(&*device.device, name, &SubscribeOptions::default())?;
        let slot_size = subscriber.slot_size();
        let token = SUBSCRIBERS.insert(Arc::new(SubscriberObj::new(subscriber, device)));
        if !out_slot_size.is_null() {
            // SAFETY: not NULL, and valid per the contract.
            unsafe { out_slot_size.write(slot_size) };
        }
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_subscriber, "out") }
    })
}

/// Receive the next sample into `out` (`cap` bytes, at least the channel's
/// slot size, checked before anything is received so that no sample is
/// lost): its length goes to `out_len`, its sequence number to `out_seq`
/// (may be NULL). Waits up to `timeout_ns` (negative: no limit; 0: looks
/// once): `HAL_ERR_TIMEOUT` when none came; `HAL_ERR_CLOSED` once the
/// publisher closed or died and every sample was received.
///
/// # Safety
///
/// `out` is valid for `cap` bytes; `out_len` NULL or valid for a write;
/// `out_seq` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_receive(
    subscriber: *mut hal_subscriber,
    timeout_ns: i64,
    out: *mut c_void,
    cap: usize,
    out_len: *mut usize,
    out_seq: *mut u64,
) -> hal_status {
    call("hal_receive", || {
        need(out_len, "out_len")?;
        need(out, "out")?;
        let s = SUBSCRIBERS.get(subscriber as usize, "subscriber")?;
        if (cap as u64) < s.subscriber.slot_size() {
            return Err(Failure::invalid(format!(
                "`cap` is {cap}, less than the channel's slot size ({}): a sample may not fit",
                s.subscriber.slot_size()
            )));
        }
        let held = &s.subscriber;
        let sample = match timeout(timeout_ns) {
            Some(t) if t.is_zero() => held.try_receive()?.ok_or_else(|| Error::Timeout {
                after: t,
                what: "a sample (none is there now)".into(),
            })?,
            t => held.receive_timeout(t)?,
        };
        let len = sample.len() as usize;
        // SAFETY: `out` holds `cap` bytes, at least the slot size, which
        // bounds the sample's length.
        let dst = unsafe { std::slice::from_raw_parts_mut(out.cast::<u8>(), len) };
        sample.read(0, dst)?;
        if !out_seq.is_null() {
            // SAFETY: not NULL, and valid per the contract.
            unsafe { out_seq.write(sample.sequence()) };
        }
        // SAFETY: checked not NULL above.
        unsafe { put(out_len, len, "out_len") }
    })
}

/// Unsubscribe (once the samples still held, `hal_receive_sample`, are
/// released). A second release is `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_subscriber_release(subscriber: *mut hal_subscriber) -> hal_status {
    call("hal_subscriber_release", || {
        SUBSCRIBERS
            .remove(subscriber as usize, "subscriber")
            .map(drop)
    })
}
