//! Channels offered to subscribers on other hosts: a channel of this host
//! (`hal_publisher_create`) offered on a node, its handle text (`hal1r.`)
//! what a remote subscriber connects to (`hal_remote_subscriber_connect`).

use std::ffi::c_char;
use std::sync::Arc;
use std::time::Duration;

use hal_facade::dynamic::DynDevice;
use hal_facade::remote::group::parse_secret;
use hal_facade::remote::{ChannelOffer, RemoteChannelOptions};

use crate::device::{hal_device, need, put, DEVICES};
use crate::last_error::call;
use crate::options::read_sized;
use crate::remote_node::{hal_remote_node, NODES};
use crate::status::{hal_status, Failure};
use crate::table::{Kind, Table};
use crate::text::{give_text, str_arg};

/// A channel offered to other hosts (opaque): `hal_remote_channel_offer`;
/// `hal_remote_offer_release` withdraws it, which ends its remote
/// subscriptions.
#[allow(non_camel_case_types)]
pub struct hal_remote_offer {
    _private: [u8; 0],
}

static OFFERS: Table<ChannelOffer> = Table::new(Kind::RemoteOffer);

/// Options of `hal_remote_channel_offer`. NULL options, and zero fields,
/// mean the defaults.
///
/// ```c
/// hal_remote_channel_options opts = {sizeof opts, "00112233445566778899aabbccddeeff", 0};
/// hal_remote_channel_offer(node, dev, "frames", &opts, &offer);
/// ```
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct hal_remote_channel_options {
    /// `sizeof(hal_remote_channel_options)`: fields past it are taken as
    /// zero.
    pub size: u32,
    /// The secret remote subscribers prove, 32 hex digits (it is in the
    /// offer's text); NULL: a fresh one.
    pub secret: *const c_char,
    /// How long a remote subscriber's handshake, and the wait for its
    /// slots, may take, in nanoseconds; 0 (or less): 30 seconds.
    pub timeout_ns: i64,
}

/// The options of `opts` (NULL: the defaults).
///
/// # Safety
///
/// `opts` is NULL or points to a `hal_remote_channel_options` of at least
/// its `size` bytes whose `secret` is NULL or a NUL-terminated string.
unsafe fn offer_options(
    opts: *const hal_remote_channel_options,
) -> Result<RemoteChannelOptions, Failure> {
    let mut options = RemoteChannelOptions::default();
    if opts.is_null() {
        return Ok(options);
    }
    // SAFETY: per this function's contract; the structure holds only
    // integers and raw pointers.
    let raw: hal_remote_channel_options =
        unsafe { read_sized(opts.cast(), "hal_remote_channel_options") }?;
    if !raw.secret.is_null() {
        let what = "`hal_remote_channel_options.secret`";
        // SAFETY: per this function's contract.
        let text = unsafe { str_arg(raw.secret, what) }?;
        options = options.secret(parse_secret(text, what)?);
    }
    if let Ok(ns @ 1..) = u64::try_from(raw.timeout_ns) {
        options = options.timeout(Duration::from_nanos(ns));
    }
    Ok(options)
}

/// Offer the channel `name` of this host (made with
/// `hal_publisher_create`, by any process of this host and user) to
/// subscribers on other hosts, from `node`. Each remote subscriber is a
/// subscriber of the channel here, on a device of `device`'s backend and
/// ordinal (where the channel's slots are imported and sent from), so it
/// counts against the channel's subscribers. The offer's text
/// (`hal_remote_offer_text`) is what they connect to.
///
/// Statuses: `HAL_ERR_INVALID_ARGUMENT` (bad name or secret),
/// `HAL_ERR_NOT_FOUND` (no channel of that name), `HAL_ERR_UNAVAILABLE`
/// (no UCX).
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string; `opts` is NULL or a valid
/// `hal_remote_channel_options`; `out` is NULL or valid for a write of a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_channel_offer(
    node: *const hal_remote_node,
    device: *const hal_device,
    name: *const c_char,
    opts: *const hal_remote_channel_options,
    out: *mut *mut hal_remote_offer,
) -> hal_status {
    call("hal_remote_channel_offer", || {
        need(out, "out")?;
        let node = NODES.get(node as usize, "node")?;
        let dev = DEVICES.get(device as usize, "device")?;
        // SAFETY: per the contract.
        let name = unsafe { str_arg(name, "name") }?;
        // SAFETY: per the contract.
        let options = unsafe { offer_options(opts) }?;
        // The offer holds its device: one of its own, of the same backend
        // and ordinal, so that it lives as long as the offer whatever the
        // caller releases.
        let own: Arc<dyn DynDevice> = Arc::from(dev.backend.open(dev.device.info().ordinal)?);
        let offer = node.offer_channel(own, name, &options)?;
        let token = OFFERS.insert(Arc::new(offer));
        // SAFETY: checked not NULL above.
        unsafe { put(out, token as *mut hal_remote_offer, "out") }
    })
}

/// The offer's handle text (`hal1r.` ...), for the other hosts'
/// `hal_remote_subscriber_connect`. It holds the offer's secret: give it
/// only to the processes meant to subscribe. Free it with
/// `hal_string_free`.
///
/// # Safety
///
/// `out_text` is NULL or valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_offer_text(
    offer: *const hal_remote_offer,
    out_text: *mut *mut c_char,
) -> hal_status {
    call("hal_remote_offer_text", || {
        need(out_text, "out_text")?;
        let offer = OFFERS.get(offer as usize, "offer")?;
        // SAFETY: checked not NULL above.
        unsafe { give_text(out_text, offer.text().to_string()) };
        Ok(())
    })
}

/// How many remote subscribers proved the offer's secret and are still
/// connected.
///
/// # Safety
///
/// `out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn hal_remote_offer_subscribers(
    offer: *const hal_remote_offer,
    out: *mut usize,
) -> hal_status {
    call("hal_remote_offer_subscribers", || {
        need(out, "out")?;
        let offer = OFFERS.get(offer as usize, "offer")?;
        // SAFETY: checked not NULL above.
        unsafe { put(out, offer.subscribers(), "out") }
    })
}

/// Withdraw the offer: its remote subscribers' receives answer
/// `HAL_ERR_CLOSED` once they received what reached them, and the slots
/// they held come back to the channel. A second release is
/// `HAL_ERR_DOUBLE_RELEASE`.
#[no_mangle]
pub extern "C" fn hal_remote_offer_release(offer: *mut hal_remote_offer) -> hal_status {
    call("hal_remote_offer_release", || {
        OFFERS.remove(offer as usize, "offer").map(drop)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_name_the_secret_and_the_timeout() {
        // SAFETY: NULL options.
        let plain = unsafe { offer_options(std::ptr::null()) }.unwrap();
        let default = RemoteChannelOptions::default();
        assert_eq!((plain.secret, plain.timeout), (None, default.timeout));
        let opts = hal_remote_channel_options {
            size: std::mem::size_of::<hal_remote_channel_options>() as u32,
            secret: c"000102030405060708090a0b0c0d0e0f".as_ptr(),
            timeout_ns: 2_000_000_000,
        };
        // SAFETY: valid options with a NUL-terminated text.
        let set = unsafe { offer_options(&opts) }.unwrap();
        assert_eq!(set.secret.unwrap()[15], 15);
        assert_eq!(set.timeout, Duration::from_secs(2));
        // A caller built against a header with the size alone (and its
        // padding).
        let short = hal_remote_channel_options { size: 8, ..opts };
        // SAFETY: as above; only `size` bytes are read.
        let old = unsafe { offer_options(&short) }.unwrap();
        assert_eq!((old.secret, old.timeout), (None, default.timeout));
        let bad = hal_remote_channel_options {
            secret: c"0011".as_ptr(),
            ..opts
        };
        // SAFETY: as above.
        let e = unsafe { offer_options(&bad) }.unwrap_err();
        assert_eq!(e.status, hal_status::HAL_ERR_INVALID_ARGUMENT);
        assert!(e.message.contains("32 hex digits"), "{}", e.message);
    }
}
