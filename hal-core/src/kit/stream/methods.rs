//! A driver backend's stream methods of [`Device`] written
//! from its own calls: the device refuses a stream of another device once,
//! in [`StreamCalls::check_stream`], and queues a copy, a write or a fill
//! with what it was given. The functions here ([`synchronize`],
//! [`hold_until_done`], [`copy_async`], [`write_async`], [`memset_async`],
//! [`query_stream`]) go from one to the other, and to what a stream answers
//! itself ([`VendorStream`]: wait, query, hold); each method of the
//! backend's `impl Device` forwards to one of them:
//!
//! ```ignore
//! fn query_stream(&self, stream: &Self::Stream) -> Result<bool> {
//!     hal_core::kit::stream::methods::query_stream(self, stream)
//! }
//! ```

use std::any::Any;
use std::time::Duration;

use crate::device::Device;
use crate::error::Result;
use crate::kit::stream::queued::Holding;
use crate::MemRef;

/// A vendor stream as the stream methods use it.
pub trait VendorStream {
    /// True when everything queued so far has run; what the stream held
    /// for that work is let go then.
    fn query(&self) -> Result<bool>;

    /// Wait until the stream ran everything queued, or `timeout` passes
    /// ([`Error::Timeout`](crate::Error::Timeout)).
    fn wait(&self, timeout: Option<Duration>) -> Result<()>;

    /// What the stream holds, locked for queuing (see
    /// [`queued`](crate::kit::stream::queued)).
    fn holding(&self) -> Holding<'_>;
}

/// A copy of `len` bytes from byte `src_offset` of `src` to byte
/// `dst_offset` of `dst`, as [`Device::copy_async`] was given it.
pub struct StreamCopy<'a, D: Device + ?Sized> {
    /// Where the bytes go.
    pub dst: MemRef<'a, D>,
    /// The first byte written in `dst`.
    pub dst_offset: u64,
    /// Where the bytes come from.
    pub src: MemRef<'a, D>,
    /// The first byte read in `src`.
    pub src_offset: u64,
    /// How many bytes.
    pub len: u64,
}

/// `len` bytes from byte `offset` of `mem`: where a write or a fill goes.
pub struct Span<'a, D: Device + ?Sized> {
    /// The memory.
    pub mem: MemRef<'a, D>,
    /// The first byte.
    pub offset: u64,
    /// How many bytes.
    pub len: u64,
}

impl<D: Device + ?Sized> Span<'_, D> {
    /// The address of the first byte, once the span is checked to lie
    /// inside the memory ([`MemRef::address`]).
    pub fn address(&self) -> Result<u64> {
        self.mem.address(self.offset, self.len)
    }
}

/// The calls a driver backend's stream methods are written from.
pub trait StreamCalls: Device<Stream: VendorStream> {
    /// Refuse a stream of another device (and whatever the device checks
    /// before any call, such as a forked child).
    fn check_stream(&self, stream: &Self::Stream) -> Result<()>;

    /// [`Device::copy_async`], once the stream is this device's.
    fn queue_copy(&self, stream: &Self::Stream, copy: StreamCopy<'_, Self>) -> Result<()>;

    /// [`Device::write_async`] of `data` (as long as `dst`), once the
    /// stream is this device's.
    fn queue_write(&self, stream: &Self::Stream, dst: Span<'_, Self>, data: Vec<u8>) -> Result<()>;

    /// [`Device::memset_async`] of `dst` to `value`, once the stream is
    /// this device's.
    fn queue_fill(&self, stream: &Self::Stream, dst: Span<'_, Self>, value: u8) -> Result<()>;
}

// The methods of `impl Device` a driver backend forwards here, one line
// each, after `StreamCalls::check_stream`.

/// [`Device::synchronize`]: wait for the stream once it is this device's.
pub fn synchronize<D: StreamCalls>(
    device: &D,
    stream: &D::Stream,
    timeout: Option<Duration>,
) -> Result<()> {
    device.check_stream(stream)?;
    stream.wait(timeout)
}

/// [`Device::hold_until_done`]: held with the stream's other held values,
/// let go once the stream is idle.
pub fn hold_until_done<D: StreamCalls>(
    device: &D,
    stream: &D::Stream,
    value: Box<dyn Any + Send>,
) -> Result<()> {
    device.check_stream(stream)?;
    stream.holding().hold(value);
    Ok(())
}

/// [`Device::copy_async`]: [`StreamCalls::queue_copy`] once the stream is
/// this device's.
pub fn copy_async<D: StreamCalls>(
    device: &D,
    stream: &D::Stream,
    dst: MemRef<'_, D>,
    dst_offset: u64,
    src: MemRef<'_, D>,
    src_offset: u64,
    len: u64,
) -> Result<()> {
    device.check_stream(stream)?;
    let copy = StreamCopy {
        dst,
        dst_offset,
        src,
        src_offset,
        len,
    };
    device.queue_copy(stream, copy)
}

/// [`Device::write_async`]: [`StreamCalls::queue_write`] of `data` at byte
/// `offset` of `dst` once the stream is this device's.
pub fn write_async<D: StreamCalls>(
    device: &D,
    stream: &D::Stream,
    dst: MemRef<'_, D>,
    offset: u64,
    data: Vec<u8>,
) -> Result<()> {
    device.check_stream(stream)?;
    let len = data.len() as u64;
    let span = Span {
        mem: dst,
        offset,
        len,
    };
    device.queue_write(stream, span, data)
}

/// [`Device::memset_async`]: [`StreamCalls::queue_fill`] once the stream is
/// this device's.
pub fn memset_async<D: StreamCalls>(
    device: &D,
    stream: &D::Stream,
    dst: MemRef<'_, D>,
    offset: u64,
    len: u64,
    value: u8,
) -> Result<()> {
    device.check_stream(stream)?;
    let span = Span {
        mem: dst,
        offset,
        len,
    };
    device.queue_fill(stream, span, value)
}

/// [`Device::query_stream`]: ask the stream once it is this device's.
pub fn query_stream<D: StreamCalls>(device: &D, stream: &D::Stream) -> Result<bool> {
    device.check_stream(stream)?;
    stream.query()
}
