//! How a channel is offered to other hosts, and how a remote subscriber
//! receives.

use std::time::Duration;

/// How a channel is offered to other hosts
/// ([`Node::offer_channel`](crate::Node::offer_channel)).
#[derive(Clone)]
#[non_exhaustive]
pub struct RemoteChannelOptions {
    /// The secret remote subscribers prove (it is in the offer's text);
    /// `None` draws a fresh one.
    pub secret: Option<[u8; 16]>,
    /// How long a remote subscriber's handshake, and the wait for its
    /// slots, may take (30 s unless set).
    pub timeout: Duration,
}

impl std::fmt::Debug for RemoteChannelOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteChannelOptions")
            .field("secret", &self.secret.map(|_| "(set)"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Default for RemoteChannelOptions {
    fn default() -> Self {
        RemoteChannelOptions {
            secret: None,
            timeout: Duration::from_secs(30),
        }
    }
}

impl RemoteChannelOptions {
    /// Set [`RemoteChannelOptions::secret`].
    pub fn secret(mut self, secret: [u8; 16]) -> Self {
        self.secret = Some(secret);
        self
    }

    /// Set [`RemoteChannelOptions::timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// How a remote subscriber receives
/// ([`RemoteSubscriber::connect`](crate::RemoteSubscriber::connect)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RemoteSubscribeOptions {
    /// How long [`RemoteSubscriber::receive`](crate::RemoteSubscriber::receive)
    /// waits (60 s unless set; `None` waits until a sample comes or the
    /// channel ends).
    pub timeout: Option<Duration>,
    /// The most samples it holds at once: the slots of its own it
    /// allocates (0, unless set: as many as the channel has). Fewer slots
    /// take less memory; in queue mode, a smaller share at a time.
    pub slots: usize,
}

impl Default for RemoteSubscribeOptions {
    fn default() -> Self {
        RemoteSubscribeOptions {
            timeout: Some(Duration::from_secs(60)),
            slots: 0,
        }
    }
}

impl RemoteSubscribeOptions {
    /// Set [`RemoteSubscribeOptions::timeout`].
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Set [`RemoteSubscribeOptions::slots`].
    pub fn slots(mut self, slots: usize) -> Self {
        self.slots = slots;
        self
    }
}
