//! Loans and samples detached from the borrow of their publisher or
//! subscriber: what a binding that cannot hold a Rust borrow across calls
//! keeps (the C library, Python), as plain data. The publisher publishes a
//! [`LoanTicket`] ([`Publisher::publish_ticket`](super::Publisher::publish_ticket))
//! and the subscriber releases a [`SampleTicket`]
//! ([`Subscriber::release_ticket`](super::Subscriber::release_ticket)); each
//! is taken by value, so it is used once.

/// A slot loaned to the publisher, detached from its borrow
/// ([`Loan::detach`](super::Loan::detach)). Dropped unpublished, the slot
/// is loaned again next, as a [`Loan`](super::Loan)'s is.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a loan ticket is published with Publisher::publish_ticket"]
pub struct LoanTicket {
    pub(super) slot: usize,
    pub(super) seq: u64,
    pub(super) offset: u64,
    pub(super) capacity: u64,
}

impl LoanTicket {
    /// The slot's index.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The sequence number the sample will have once published.
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// Where the slot starts in [`Publisher::memory`](super::Publisher::memory).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The slot's size.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

/// A received sample, detached from its borrow
/// ([`Sample::detach`](super::Sample::detach)): its slot stays held, and
/// its bytes as they are, until
/// [`Subscriber::release_ticket`](super::Subscriber::release_ticket) (or
/// until the subscriber is dropped).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a sample ticket holds its slot until Subscriber::release_ticket"]
pub struct SampleTicket {
    pub(super) slot: usize,
    pub(super) seq: u64,
    pub(super) offset: u64,
    pub(super) len: u64,
}

impl SampleTicket {
    /// The sample's sequence number.
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// Where it starts in [`Subscriber::memory`](super::Subscriber::memory).
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
