//! A remote sample detached from its borrow of the subscriber, for
//! bindings that hold a sample apart from its subscriber (C, Python).

/// A received remote sample, detached from its borrow
/// ([`RemoteSample::detach`](super::RemoteSample::detach)): its slot stays
/// held, and its bytes as they are, until
/// [`RemoteSubscriber::release_ticket`](super::RemoteSubscriber::release_ticket)
/// (or until the subscriber is dropped).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a remote sample ticket holds its slot until RemoteSubscriber::release_ticket"]
pub struct RemoteSampleTicket {
    pub(super) slot: u32,
    pub(super) seq: u64,
    pub(super) offset: u64,
    pub(super) len: u64,
}

impl RemoteSampleTicket {
    /// The sample's sequence number (the publisher's count, from 0).
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// Where it starts in
    /// [`RemoteSubscriber::memory`](super::RemoteSubscriber::memory).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty sample.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
