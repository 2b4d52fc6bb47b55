//! The data that came with a message: kept by UCX for the progress
//! thread, a rendezvous descriptor, or a copy.

use std::ffi::c_void;

use crate::engine::Engine;

/// The data that came with a message.
#[derive(Debug)]
pub(crate) enum Payload {
    /// None.
    None,
    /// Bytes UCX keeps for us until [`Payload::release`] (its handler
    /// answered `UCS_INPROGRESS`): address and length.
    Held(usize, usize),
    /// A rendezvous descriptor, received with `Engine::receive` or released;
    /// and the length of its data.
    Rndv(usize, usize),
    /// Bytes copied in the handler (UCX could not keep them).
    Copied(Vec<u8>),
}

impl Payload {
    /// The data's length.
    pub(crate) fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Held(_, n) | Payload::Rndv(_, n) => *n,
            Payload::Copied(v) => v.len(),
        }
    }

    /// The bytes, where they are in host memory now.
    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        match self {
            // SAFETY: UCX keeps `n` bytes at `p` until the payload is
            // released, which takes it by value.
            Payload::Held(p, n) => Some(unsafe { std::slice::from_raw_parts(*p as *const u8, *n) }),
            Payload::Copied(v) => Some(v),
            Payload::None => Some(&[]),
            Payload::Rndv(..) => None,
        }
    }

    /// Let go of what UCX keeps for it.
    pub(crate) fn release(self, engine: &Engine) {
        match self {
            Payload::Held(p, _) | Payload::Rndv(p, _) => engine.release(p as *mut c_void),
            Payload::None | Payload::Copied(_) => {}
        }
    }
}
