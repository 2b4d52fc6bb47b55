//! The options of a channel's publisher and subscribers.

use std::time::Duration;

use super::layout::Mode;
use crate::Location;

/// How a publisher makes a channel.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ChannelOptions {
    /// How many slots (8 unless set, at most [`MAX_SLOTS`](super::MAX_SLOTS)).
    pub slots: usize,
    /// The size of a slot in bytes (64 KiB unless set).
    pub slot_size: u64,
    /// Broadcast or queue ([`Mode::Broadcast`] unless set).
    pub mode: Mode,
    /// Where the slots live. Unless set: host memory on a device whose
    /// memory the host sees (CPU shared memory), the device's own memory
    /// otherwise.
    pub location: Option<Location>,
    /// How long [`Publisher::loan`](super::Publisher::loan) waits for a free slot (60 s unless set).
    pub timeout: Duration,
    /// How long a wait spins before it sleeps (20 µs unless set).
    pub spin: Duration,
    /// Samples may be published in stream order
    /// ([`Loan::publish_on`](super::Loan::publish_on)): each slot gets an
    /// interprocess event, which the publisher records on its stream and a
    /// subscriber's stream waits on (false unless set; needs
    /// [`Capabilities::IPC_EVENT`](crate::Capabilities::IPC_EVENT) and at
    /// most [`MAX_ORDERED_SLOTS`](super::MAX_ORDERED_SLOTS) slots).
    pub stream_ordered: bool,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        ChannelOptions {
            slots: 8,
            slot_size: 64 << 10,
            mode: Mode::Broadcast,
            location: None,
            timeout: Duration::from_secs(60),
            spin: Duration::from_micros(20),
            stream_ordered: false,
        }
    }
}

impl ChannelOptions {
    /// Set [`ChannelOptions::stream_ordered`].
    pub fn stream_ordered(mut self, on: bool) -> Self {
        self.stream_ordered = on;
        self
    }

    /// Set [`ChannelOptions::slots`].
    pub fn slots(mut self, slots: usize) -> Self {
        self.slots = slots;
        self
    }

    /// Set [`ChannelOptions::slot_size`].
    pub fn slot_size(mut self, bytes: u64) -> Self {
        self.slot_size = bytes;
        self
    }

    /// Set [`ChannelOptions::mode`].
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Set [`ChannelOptions::location`].
    pub fn location(mut self, location: Location) -> Self {
        self.location = Some(location);
        self
    }

    /// Set [`ChannelOptions::timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Set [`ChannelOptions::spin`].
    pub fn spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }
}

/// How a subscriber receives.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SubscribeOptions {
    /// How long [`Subscriber::receive`](super::Subscriber::receive) waits (60 s unless set; `None`
    /// waits until a sample comes or the publisher is gone).
    pub timeout: Option<Duration>,
    /// How long a wait spins before it sleeps (20 µs unless set).
    pub spin: Duration,
}

impl Default for SubscribeOptions {
    fn default() -> Self {
        SubscribeOptions {
            timeout: Some(Duration::from_secs(60)),
            spin: Duration::from_micros(20),
        }
    }
}

impl SubscribeOptions {
    /// Set [`SubscribeOptions::timeout`].
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Set [`SubscribeOptions::spin`].
    pub fn spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }
}
