//! Samples read in place: a sample a subscriber received, held (and its
//! slot with it) until it is released, read where it lies or copied out.
//! One shape for a channel's subscriber on this host and for one on
//! another host (feature `ucx`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use hal_core::channel::{SampleTicket, Subscriber};
use hal_core::{Error, Memory, Result};

use super::device::DeviceObj;

/// A subscriber whose samples are read in place.
pub trait SampleSource: Send + Sync {
    /// What holds a received sample's slot until it is given back.
    type Ticket: Send;

    /// The memory the samples lie in.
    fn slots(&self) -> &dyn Memory;

    /// A held sample's offset in [`SampleSource::slots`], length and
    /// sequence number.
    fn span(ticket: &Self::Ticket) -> (u64, u64, u64);

    /// `ticket`, once its bytes are there to be read in place; given back
    /// when they never will be.
    fn ready(&self, ticket: Self::Ticket) -> Result<Self::Ticket> {
        Ok(ticket)
    }

    /// Give the slot of `ticket` back.
    fn give_back(&self, ticket: Self::Ticket) -> Result<()>;
}

/// A channel's subscriber: a stream-ordered publisher may still be writing
/// a sample when it is received, so it is ready once that work has run.
impl SampleSource for Subscriber {
    type Ticket = SampleTicket;

    fn slots(&self) -> &dyn Memory {
        self.memory()
    }

    fn span(ticket: &SampleTicket) -> (u64, u64, u64) {
        (ticket.offset(), ticket.len(), ticket.sequence())
    }

    fn ready(&self, ticket: SampleTicket) -> Result<SampleTicket> {
        if let Err(e) = self.wait_ticket(&ticket) {
            let _ = self.release_ticket(ticket);
            return Err(e);
        }
        Ok(ticket)
    }

    fn give_back(&self, ticket: SampleTicket) -> Result<()> {
        self.release_ticket(ticket)
    }
}

/// A subscriber on another host than its channel's publisher: each sample
/// is received whole into a slot of its own.
#[cfg(feature = "ucx")]
impl SampleSource for hal_ucx::RemoteSubscriber {
    type Ticket = hal_ucx::RemoteSampleTicket;

    fn slots(&self) -> &dyn Memory {
        self.memory()
    }

    fn span(ticket: &hal_ucx::RemoteSampleTicket) -> (u64, u64, u64) {
        (ticket.offset(), ticket.len(), ticket.sequence())
    }

    fn give_back(&self, ticket: hal_ucx::RemoteSampleTicket) -> Result<()> {
        self.release_ticket(ticket)
    }
}

/// A subscriber and the device its slots were imported or allocated on,
/// declared in drop order: the subscription ends (its slots go) before
/// the device can. It needs no lock: receives claim their own samples, and
/// a release never waits for a receive.
pub struct SubscriberObj<S> {
    /// The subscriber.
    pub subscriber: S,
    _device: Arc<DeviceObj>,
}

impl<S> SubscriberObj<S> {
    /// `subscriber`, whose slots are on `device`.
    pub fn new(subscriber: S, device: Arc<DeviceObj>) -> SubscriberObj<S> {
        SubscriberObj {
            subscriber,
            _device: device,
        }
    }
}

impl<S: SampleSource> SampleSource for SubscriberObj<S> {
    type Ticket = S::Ticket;

    fn slots(&self) -> &dyn Memory {
        self.subscriber.slots()
    }

    fn span(ticket: &S::Ticket) -> (u64, u64, u64) {
        S::span(ticket)
    }

    fn ready(&self, ticket: S::Ticket) -> Result<S::Ticket> {
        self.subscriber.ready(ticket)
    }

    fn give_back(&self, ticket: S::Ticket) -> Result<()> {
        self.subscriber.give_back(ticket)
    }
}

/// A sample received in place. It keeps its subscriber (and so the slots'
/// memory) until it goes, and holds its slot until it is released or goes.
/// A door that lends views of its bytes counts them here
/// ([`SampleObj::add_view`]): a sample is not released under a live view.
pub struct SampleObj<S: SampleSource> {
    source: Arc<S>,
    ticket: Mutex<Option<S::Ticket>>,
    /// The sample's host address, where the slots are host-visible.
    host: Option<usize>,
    offset: u64,
    len: u64,
    sequence: u64,
    views: AtomicUsize,
}

impl<S: SampleSource> SampleObj<S> {
    /// The sample of `ticket`, which `source` received (and detached):
    /// held once its bytes are there ([`SampleSource::ready`]).
    pub fn new(source: Arc<S>, ticket: S::Ticket) -> Result<SampleObj<S>> {
        let ticket = source.ready(ticket)?;
        let (offset, len, sequence) = S::span(&ticket);
        let host = source
            .slots()
            .host_ptr()
            .map(|base| base as usize + offset as usize);
        Ok(SampleObj {
            source,
            ticket: Mutex::new(Some(ticket)),
            host,
            offset,
            len,
            sequence,
            views: AtomicUsize::new(0),
        })
    }

    fn ticket(&self) -> MutexGuard<'_, Option<S::Ticket>> {
        self.ticket.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its host address, where the slots are host-visible: its
    /// [`SampleObj::len`] bytes are there until it is released.
    pub fn host(&self) -> Option<*const u8> {
        self.host.map(|at| at as *const u8)
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its sequence number (the publisher's count, from 0).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Refused once it was released, or unless `n` bytes at `offset` lie
    /// in the sample.
    pub fn check(&self, offset: u64, n: u64) -> Result<()> {
        if self.ticket().is_none() {
            return Err(released());
        }
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::invalid(format!(
                "{n} bytes at {offset} of a sample of {}",
                self.len
            ))),
        }
    }

    /// Copy its bytes from `offset` into `out` (any memory, device memory
    /// included, where the slots' memory reads into it).
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len() as u64)?;
        if out.is_empty() {
            return Ok(());
        }
        self.source.slots().read(self.offset + offset, out)
    }

    /// Count a view of its bytes lent out; refused once it was released.
    pub fn add_view(&self) -> Result<()> {
        let ticket = self.ticket();
        if ticket.is_none() {
            return Err(released());
        }
        self.views.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// A view lent out ended.
    pub fn drop_view(&self) {
        self.views.fetch_sub(1, Ordering::AcqRel);
    }

    /// Release its slot now: `Err(n)` while `n` views of it are alive
    /// (then it stays held); a second release does nothing.
    pub fn release(&self) -> std::result::Result<Result<()>, usize> {
        // Views are counted with the ticket locked (`add_view`).
        let ticket = {
            let mut held = self.ticket();
            let views = self.views.load(Ordering::Acquire);
            if views > 0 {
                return Err(views);
            }
            held.take()
        };
        Ok(ticket.map_or(Ok(()), |t| self.source.give_back(t)))
    }
}

impl<S: SampleSource> Drop for SampleObj<S> {
    /// The slot goes back (no view is alive: each keeps the sample).
    fn drop(&mut self) {
        let ticket = self
            .ticket
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = ticket {
            let _ = self.source.give_back(t);
        }
    }
}

/// What a released sample answers.
fn released() -> Error {
    Error::invalid("this sample was released")
}

#[cfg(all(test, feature = "cpu-shm"))]
mod tests {
    use super::*;
    use crate::objects::open_device;
    use hal_core::channel::{ChannelOptions, Publisher, SubscribeOptions};

    #[test]
    fn a_sample_is_read_in_place_and_not_released_under_a_view() {
        let device = Arc::new(open_device(Some("cpu-shm"), 0).unwrap());
        let name = format!("objects-sample-{}", std::process::id());
        let mut publisher =
            Publisher::create(&*device.device, &name, &ChannelOptions::default()).unwrap();
        let subscriber =
            Subscriber::open(&*device.device, &name, &SubscribeOptions::default()).unwrap();
        let source = Arc::new(SubscriberObj::new(subscriber, Arc::clone(&device)));
        let loan = publisher.loan().unwrap();
        loan.write(0, b"hello").unwrap();
        let seq = loan.publish(5).unwrap();
        let ticket = source.subscriber.try_receive().unwrap().unwrap().detach();
        let sample = SampleObj::new(Arc::clone(&source), ticket).unwrap();
        assert_eq!((sample.len(), sample.sequence()), (5, seq));
        let base = source.subscriber.memory().host_ptr().unwrap() as usize;
        assert!(sample.host().unwrap() as usize >= base);
        let mut out = [0u8; 3];
        sample.read(2, &mut out).unwrap();
        assert_eq!(&out, b"llo");
        assert!(sample.read(3, &mut out).is_err());
        sample.add_view().unwrap();
        assert_eq!(sample.release().unwrap_err(), 1);
        sample.drop_view();
        sample.release().unwrap().unwrap();
        assert!(sample.release().unwrap().is_ok());
        let err = sample.read(0, &mut out).unwrap_err();
        assert!(err.to_string().contains("released"), "{err}");
        assert!(sample.add_view().is_err());
    }
}
