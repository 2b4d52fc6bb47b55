//! What a vendor stream holds and what waits for the device's queued work:
//!
//! - [`methods`]: a driver backend's stream methods of `Device` written
//!   from its own calls ([`methods::StreamCalls`], [`methods::VendorStream`]);
//! - [`host`]: those of a backend whose streams are host-synchronous
//!   ([`host::HostStream`]: work runs before the call returns);
//! - [`queued`]: what queued work uses from the host, held until it ran;
//! - [`reaper`]: a stream dropped without waiting for its work;
//! - [`teardown`]: unmaps and frees that wait for the device, off the
//!   caller's thread;
//! - [`off_thread`]: a vendor wait that cannot time out, bounded by running
//!   it on a thread of its own.

pub mod host;
pub mod methods;
pub mod off_thread;
pub mod queued;
pub mod reaper;
pub mod teardown;
