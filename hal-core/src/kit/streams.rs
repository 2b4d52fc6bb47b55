//! A driver backend's stream methods of [`Device`] written
//! from its own calls: the device refuses a stream of another device once,
//! in [`StreamCalls::check_stream`], and queues a copy, a write or a fill
//! with what it was given; [`stream_methods!`](crate::stream_methods)
//! writes the methods of `impl Device` that go from one to the other, and
//! those a stream answers itself ([`VendorStream`]: wait, query, hold).

use std::time::Duration;

use crate::device::Device;
use crate::error::Result;
use crate::kit::queued::Holding;
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
    /// [`queued`](crate::kit::queued)).
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

/// Inside `impl Device for $device` (which implements
/// [`StreamCalls`](crate::kit::streams::StreamCalls)): `synchronize`,
/// `hold_until_done`, `copy_async`, `write_async`, `memset_async` and
/// `query_stream`, each after
/// [`StreamCalls::check_stream`](crate::kit::streams::StreamCalls::check_stream).
#[macro_export]
macro_rules! stream_methods {
    () => {
        fn synchronize(
            &self,
            stream: &Self::Stream,
            timeout: Option<::std::time::Duration>,
        ) -> $crate::Result<()> {
            $crate::kit::streams::StreamCalls::check_stream(self, stream)?;
            $crate::kit::streams::VendorStream::wait(stream, timeout)
        }

        /// Held with the stream's other held values, let go once the
        /// stream is idle.
        fn hold_until_done(
            &self,
            stream: &Self::Stream,
            value: Box<dyn ::std::any::Any + Send>,
        ) -> $crate::Result<()> {
            $crate::kit::streams::StreamCalls::check_stream(self, stream)?;
            $crate::kit::streams::VendorStream::holding(stream).hold(value);
            Ok(())
        }

        fn copy_async(
            &self,
            stream: &Self::Stream,
            dst: $crate::MemRef<'_, Self>,
            dst_offset: u64,
            src: $crate::MemRef<'_, Self>,
            src_offset: u64,
            len: u64,
        ) -> $crate::Result<()> {
            use $crate::kit::streams::StreamCalls;
            self.check_stream(stream)?;
            let copy = $crate::kit::streams::StreamCopy {
                dst,
                dst_offset,
                src,
                src_offset,
                len,
            };
            self.queue_copy(stream, copy)
        }

        fn write_async(
            &self,
            stream: &Self::Stream,
            dst: $crate::MemRef<'_, Self>,
            offset: u64,
            data: Vec<u8>,
        ) -> $crate::Result<()> {
            use $crate::kit::streams::{Span, StreamCalls};
            self.check_stream(stream)?;
            let len = data.len() as u64;
            self.queue_write(
                stream,
                Span {
                    mem: dst,
                    offset,
                    len,
                },
                data,
            )
        }

        fn memset_async(
            &self,
            stream: &Self::Stream,
            dst: $crate::MemRef<'_, Self>,
            offset: u64,
            len: u64,
            value: u8,
        ) -> $crate::Result<()> {
            use $crate::kit::streams::StreamCalls;
            self.check_stream(stream)?;
            let dst = $crate::kit::streams::Span {
                mem: dst,
                offset,
                len,
            };
            self.queue_fill(stream, dst, value)
        }

        fn query_stream(&self, stream: &Self::Stream) -> $crate::Result<bool> {
            $crate::kit::streams::StreamCalls::check_stream(self, stream)?;
            $crate::kit::streams::VendorStream::query(stream)
        }
    };
}
