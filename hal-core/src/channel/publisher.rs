//! The publisher of a channel: it makes the slots' memory and the control
//! file, loans free slots, and publishes them.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::layout::{self, Control, Mode, Shape, QUEUED};
use super::options::ChannelOptions;
use super::ticket::LoanTicket;
use super::{file, members, park};
use crate::dynamic::{DynAllocation, DynDevice, DynEvent, DynStream};
use crate::kit::os::{self, Origin, PrivateFile};
use crate::{
    AllocDesc, Capabilities, Error, EventFlags, ExportOptions, Exported, Importers, Location,
    Memory, Placement, Result,
};

/// The publishing end of a channel; dropping it closes the channel (the
/// subscribers receive what was published, then [`Error::Closed`]).
#[must_use = "dropping a Publisher closes its channel"]
pub struct Publisher {
    name: String,
    file: PrivateFile,
    control: Control,
    /// The control region's descriptor: subscribers open it through
    /// `/proc/PID/fd/N` while the name stands.
    _control_fd: OwnedFd,
    // Declared before the memory: the export ends before the memory goes.
    _exported: Exported,
    memory: Box<dyn DynAllocation>,
    /// A stream-ordered channel's events, one per slot, and their exports
    /// (declared first: they end before the events go).
    _event_exports: Vec<Exported>,
    events: Vec<Box<dyn DynEvent>>,
    /// The next sequence number.
    next: u64,
    options: ChannelOptions,
    origin: Origin,
}

impl Publisher {
    /// Create the channel `name` on `device`: `options.slots` slots of
    /// `options.slot_size` bytes in memory at `options.location`.
    ///
    /// [`Error::AlreadyExists`] when the channel has a live publisher; a
    /// channel whose publisher is gone is replaced.
    pub fn create(
        device: &dyn DynDevice,
        name: &str,
        options: &ChannelOptions,
    ) -> Result<Publisher> {
        file::path(name)?;
        if options.slots == 0 || options.slots > layout::MAX_SLOTS {
            return Err(Error::invalid(format!(
                "a channel of {} slots: a channel has 1 to {}",
                options.slots,
                layout::MAX_SLOTS
            )));
        }
        let size = options
            .slot_size
            .checked_mul(options.slots as u64)
            .filter(|_| options.slot_size > 0)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "{} slots of {} bytes",
                    options.slots, options.slot_size
                ))
            })?;
        let memory = device.allocate(&AllocDesc {
            size,
            align: 0,
            location: options.location.unwrap_or_else(|| {
                if device.capabilities().contains(Capabilities::MEMORY_IS_HOST) {
                    Location::Host
                } else {
                    Location::Device(device.info().ordinal)
                }
            }),
            placement: Placement::default(),
        })?;
        let exported = to_this_user(|opts| device.export_memory(&*memory, opts))?;
        let (events, event_exports) = if options.stream_ordered {
            slot_events(device, options.slots)?
        } else {
            (Vec::new(), Vec::new())
        };
        let shape = Shape {
            slots: options.slots as u32,
            slot_size: options.slot_size,
            mode: options.mode,
            ordered: options.stream_ordered,
        };
        let (pid, start) = os::self_identity();
        let texts: Vec<String> = event_exports.iter().map(Exported::to_text).collect();
        let head = layout::new_head(shape, pid, start, &exported.to_text(), &texts)?;
        let deadline = Instant::now() + options.timeout;
        let (file, control, control_fd) = file::create(name, shape, &head, deadline)?;
        Ok(Publisher {
            name: name.to_string(),
            file,
            control,
            _control_fd: control_fd,
            _exported: exported,
            memory,
            _event_exports: event_exports,
            events,
            next: 0,
            options: options.clone(),
            origin: Origin::here(),
        })
    }

    /// The channel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The memory of the slots: slot `i` is bytes `i * slot_size ..`.
    pub fn memory(&self) -> &dyn DynAllocation {
        &*self.memory
    }

    /// The size of a slot.
    pub fn slot_size(&self) -> u64 {
        self.options.slot_size
    }

    /// How many subscribers are subscribed now.
    pub fn subscribers(&self) -> Result<usize> {
        Ok(members::active_mask(&self.control)?.count_ones() as usize)
    }

    /// Loan the next slot (the slots are loaned in turn), waiting at most
    /// [`ChannelOptions::timeout`] until the subscribers released the
    /// sample it held.
    pub fn loan(&mut self) -> Result<Loan<'_>> {
        self.check()?;
        let control = &self.control;
        let slot = control.slot_of(self.next);
        // A free slot, the usual case, is loaned without the wait's set-up.
        if slot_free(control, slot)? {
            return self.lend(slot);
        }
        park::park_until(
            control.released()?,
            control.pub_sleepers()?,
            self.options.spin,
            Some(self.options.timeout),
            || {
                format!(
                    "slot {slot} of channel {:?}, the next in turn: its subscribers still \
                     hold it",
                    self.name
                )
            },
            || Ok(slot_free(control, slot)?.then_some(())),
            || members::reap(control),
        )?;
        self.lend(slot)
    }

    /// Loan the next slot if it is free now; [`Error::Busy`] otherwise.
    pub fn try_loan(&mut self) -> Result<Loan<'_>> {
        self.check()?;
        let slot = self.control.slot_of(self.next);
        if !slot_free(&self.control, slot)? {
            members::reap(&self.control)?;
            if !slot_free(&self.control, slot)? {
                return Err(Error::Busy {
                    what: format!("slot {slot} of channel {:?}, the next in turn", self.name),
                    holders: active_holders(&self.control, slot)?,
                });
            }
        }
        self.lend(slot)
    }

    /// Publish a detached loan's first `len` bytes, as [`Loan::publish`].
    /// [`Error::InvalidArgument`] for a ticket that is not this publisher's
    /// next sample (another loan of its slot was published since: loan
    /// again).
    pub fn publish_ticket(&mut self, ticket: LoanTicket, len: u64) -> Result<u64> {
        self.check()?;
        if ticket.seq != self.next
            || ticket.slot != self.control.slot_of(self.next)
            || ticket.capacity != self.options.slot_size
        {
            return Err(Error::invalid(format!(
                "a loan of sample {} of channel {:?}, whose next sample is {}: a loan is \
                 published once, and a loan taken before another was published is stale \
                 (loan again)",
                ticket.seq, self.name, self.next
            )));
        }
        Loan {
            publisher: self,
            slot: ticket.slot,
        }
        .publish(len)
    }

    fn check(&self) -> Result<()> {
        self.origin
            .check(format_args!("the publisher of channel {:?}", self.name))
    }

    fn lend(&mut self, slot: usize) -> Result<Loan<'_>> {
        Ok(Loan {
            publisher: self,
            slot,
        })
    }
}

/// Export with `export` to this user's processes, where the backend's
/// broker checks importers' users, else to anyone with the handle: the
/// handle lies in a file only this user may open.
fn to_this_user(export: impl Fn(&ExportOptions) -> Result<Exported>) -> Result<Exported> {
    let with = |importers| {
        export(&ExportOptions {
            importers,
            ..Default::default()
        })
    };
    match with(Importers::SameUser) {
        Err(e) if e.is_unsupported() => with(Importers::Anyone),
        other => other,
    }
}

/// A stream-ordered channel's events and their exports.
type SlotEvents = (Vec<Box<dyn DynEvent>>, Vec<Exported>);

/// The interprocess events of a stream-ordered channel's `slots` slots,
/// and their exports (to this user's processes where the backend's broker
/// checks users, to anyone with the handle elsewhere, as the slots' memory).
fn slot_events(device: &dyn DynDevice, slots: usize) -> Result<SlotEvents> {
    if !device.capabilities().contains(Capabilities::IPC_EVENT) {
        return Err(Error::unsupported(
            device.info().backend,
            "a stream-ordered channel",
            "it needs interprocess events (Capabilities::IPC_EVENT), which this device lacks: \
             publish from the host once the device work is done",
        ));
    }
    if slots > layout::MAX_ORDERED_SLOTS {
        return Err(Error::invalid(format!(
            "a stream-ordered channel of {slots} slots: it has 1 to {} (an event each)",
            layout::MAX_ORDERED_SLOTS
        )));
    }
    let flags = EventFlags {
        interprocess: true,
        ..EventFlags::default()
    };
    let mut events = Vec::with_capacity(slots);
    let mut exports = Vec::with_capacity(slots);
    for _ in 0..slots {
        let event = device.create_event(flags)?;
        exports.push(to_this_user(|opts| device.export_event(&*event, opts))?);
        events.push(event);
    }
    Ok((events, exports))
}

/// True when every subscriber released slot `slot`'s sample (or it never
/// held one).
fn slot_free(control: &Control, slot: usize) -> Result<bool> {
    let word = control.sample_word(slot)?.load(Ordering::Acquire);
    Ok(layout::split(word).1 == 0)
}

/// How many subscribers hold slot `slot`'s sample.
fn active_holders(control: &Control, slot: usize) -> Result<usize> {
    let (_, pending) = layout::split(control.sample_word(slot)?.load(Ordering::Acquire));
    Ok(if pending == QUEUED {
        0
    } else {
        pending.count_ones() as usize
    })
}

impl Drop for Publisher {
    fn drop(&mut self) {
        if !self.origin.forked() {
            let _ = self.control.close();
            file::remove(&self.file);
        }
    }
}

/// A slot loaned to the publisher: fill it, then [`Loan::publish`] it.
/// Dropped unpublished, the slot is loaned again next.
#[must_use = "a loan dropped unpublished is loaned again next"]
pub struct Loan<'a> {
    publisher: &'a mut Publisher,
    slot: usize,
}

impl Loan<'_> {
    /// The slot's index.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Where the slot starts in [`Publisher::memory`].
    pub fn offset(&self) -> u64 {
        self.slot as u64 * self.publisher.options.slot_size
    }

    /// The slot's size.
    pub fn capacity(&self) -> u64 {
        self.publisher.options.slot_size
    }

    /// The memory the slot is part of (for device work on it: the slot is
    /// bytes [`Loan::offset`] .. + [`Loan::capacity`]).
    pub fn memory(&self) -> &dyn DynAllocation {
        &*self.publisher.memory
    }

    /// Copy `src` into the slot at `offset`.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        let end = offset.checked_add(src.len() as u64);
        if end.is_none_or(|e| e > self.capacity()) {
            return Err(Error::invalid(format!(
                "{} bytes at {offset} of a slot of {}",
                src.len(),
                self.capacity()
            )));
        }
        self.publisher.memory.write(self.offset() + offset, src)
    }

    /// Publish the slot's first `len` bytes in stream order: the slot's
    /// event is recorded on `stream` (after the work queued on it before,
    /// which fills the slot), and the sample is published to the
    /// subscribers at once; their streams wait for the event
    /// ([`Sample::wait_on`](super::Sample::wait_on)), and their host reads
    /// wait for it too. `device` is the publisher's device (the one the
    /// channel was created on). A channel created without
    /// [`ChannelOptions::stream_ordered`] answers
    /// [`Error::InvalidArgument`].
    pub fn publish_on(
        self,
        device: &dyn DynDevice,
        stream: &dyn DynStream,
        len: u64,
    ) -> Result<u64> {
        self.publisher.check()?;
        let event = self.publisher.events.get(self.slot).ok_or_else(|| {
            Error::invalid(format!(
                "channel {:?} was created without ChannelOptions::stream_ordered: publish from \
                 the host once the device work is done",
                self.publisher.name
            ))
        })?;
        if len > self.capacity() {
            return Err(Error::invalid(format!(
                "a sample of {len} bytes in a slot of {}",
                self.capacity()
            )));
        }
        device.record_event(stream, &**event)?;
        self.publish(len)
    }

    /// The loan as plain data, for a binding that cannot hold this borrow
    /// across calls; publish it with [`Publisher::publish_ticket`].
    pub fn detach(self) -> LoanTicket {
        LoanTicket {
            slot: self.slot,
            seq: self.publisher.next,
            offset: self.offset(),
            capacity: self.capacity(),
        }
    }

    /// Publish the slot's first `len` bytes; answers the sample's sequence
    /// number. In broadcast mode a sample published while nobody is
    /// subscribed reaches nobody.
    pub fn publish(self, len: u64) -> Result<u64> {
        // A loan a forked child inherited publishes nothing of the parent's.
        self.publisher.check()?;
        if len > self.capacity() {
            return Err(Error::invalid(format!(
                "a sample of {len} bytes in a slot of {}",
                self.capacity()
            )));
        }
        let p = &mut *self.publisher;
        let control = &p.control;
        let seq = p.next;
        let pending = match control.shape().mode {
            Mode::Broadcast => members::active_mask(control)?,
            Mode::Queue => QUEUED,
        };
        control.set_sample(self.slot, seq, len, pending)?;
        control.set_published(seq + 1)?;
        p.next = seq + 1;
        Ok(seq)
    }
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("name", &self.name)
            .field("slots", &self.control.slots())
            .field("slot_size", &self.options.slot_size)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Loan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loan")
            .field("channel", &self.publisher.name)
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}
