//! Host-synchronous streams: work "queued" on a [`HostStream`] runs at
//! once, in order, on the calling thread, so a synchronize or a query has
//! nothing to wait for. A backend without device queues (host memory, a
//! runtime that only offers blocking calls) takes `type Stream = HostStream`
//! and writes its stream methods with
//! [`host_stream_methods!`](crate::host_stream_methods).
//!
//! The copies, writes and fills go through the bounds- and
//! protection-checked [`Memory::read`] and [`Memory::write`] of both sides,
//! so a read-only destination answers what its `write` answers
//! ([`Error::PermissionDenied`]).
//!
//! ```
//! use hal_core::kit::host_stream::{self, HostStream};
//!
//! let stream = HostStream::new(0);
//! assert_eq!(stream.device(), 0);
//! assert!(host_stream::bytes(1 << 20, "a copy").is_ok());
//! ```

use crate::bounds::check_bounds;
use crate::device::Memory;
use crate::error::{Error, Result};
use crate::types::DeviceInfo;

/// A host-synchronous stream of one device: its work has always run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostStream {
    device: u32,
}

impl HostStream {
    /// A stream of device `ordinal`.
    pub fn new(ordinal: u32) -> HostStream {
        HostStream { device: ordinal }
    }

    /// The ordinal of the device the stream belongs to.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// Refuse the stream unless it belongs to the device `info` describes:
    /// [`Error::InvalidArgument`] naming both devices.
    pub fn check(&self, info: &DeviceInfo) -> Result<()> {
        if self.device != info.ordinal {
            return Err(Error::invalid(format!(
                "a stream of device {} of backend {} given to device {}: use a stream the \
                 device made (Device::create_stream)",
                self.device, info.backend, info.ordinal
            )));
        }
        Ok(())
    }
}

/// `len` as a buffer length, or [`Error::InvalidArgument`] naming `what`.
pub fn bytes(len: u64, what: &str) -> Result<usize> {
    usize::try_from(len)
        .map_err(|_| Error::invalid(format!("{what} of {len} bytes does not fit in memory")))
}

/// Copy `len` bytes from `src` at `src_offset` to `dst` at `dst_offset`,
/// now. The two may be the same memory and the ranges may overlap: the
/// bytes are read whole before any is written.
pub fn copy(
    dst: &dyn Memory,
    dst_offset: u64,
    src: &dyn Memory,
    src_offset: u64,
    len: u64,
) -> Result<()> {
    check_bounds(src_offset, len, src.len())?;
    check_bounds(dst_offset, len, dst.len())?;
    let mut buf = vec![0u8; bytes(len, "a copy")?];
    src.read(src_offset, &mut buf)?;
    dst.write(dst_offset, &buf)
}

/// Write `data` to `dst` at `offset`, now.
pub fn write(dst: &dyn Memory, offset: u64, data: &[u8]) -> Result<()> {
    check_bounds(offset, data.len() as u64, dst.len())?;
    dst.write(offset, data)
}

/// Set `len` bytes of `dst` from `offset` to `value`, now.
pub fn fill(dst: &dyn Memory, offset: u64, len: u64, value: u8) -> Result<()> {
    check_bounds(offset, len, dst.len())?;
    dst.write(offset, &vec![value; bytes(len, "a fill")?])
}

/// Inside `impl Device for $device` whose `type Stream` is
/// [`HostStream`](crate::kit::host_stream::HostStream): `create_stream`,
/// `synchronize`, `query_stream`, `synchronize_device`, `copy_async`,
/// `write_async` and `memset_async`, each refusing a stream of another
/// device first. Work runs before the call returns, so `synchronize` and
/// `query_stream` have nothing to wait for and `hold_until_done` (the
/// default) drops the value at once.
///
/// `host_stream_methods!(check)` calls the device's own method
/// `self.check()`, a `fn(&self) -> Result<()>`, first in each (for a device
/// that refuses to be used in a forked child, say); leave it out when there
/// is nothing to check.
#[macro_export]
macro_rules! host_stream_methods {
    () => {
        $crate::host_stream_methods!(@with);
    };
    ($check:ident) => {
        $crate::host_stream_methods!(@with $check);
    };
    (@with $($check:ident)?) => {
        fn create_stream(&self) -> $crate::Result<$crate::kit::host_stream::HostStream> {
            $(self.$check()?;)?
            Ok($crate::kit::host_stream::HostStream::new(
                $crate::Device::info(self).ordinal,
            ))
        }

        /// Host-synchronous: everything queued has already run.
        fn synchronize(
            &self,
            stream: &$crate::kit::host_stream::HostStream,
            _timeout: Option<::std::time::Duration>,
        ) -> $crate::Result<()> {
            $(self.$check()?;)?
            stream.check($crate::Device::info(self))
        }

        /// Host-synchronous: everything queued has already run.
        fn query_stream(
            &self,
            stream: &$crate::kit::host_stream::HostStream,
        ) -> $crate::Result<bool> {
            $(self.$check()?;)?
            stream.check($crate::Device::info(self))?;
            Ok(true)
        }

        /// Host-synchronous: nothing is ever left to run.
        fn synchronize_device(
            &self,
            _timeout: Option<::std::time::Duration>,
        ) -> $crate::Result<()> {
            $(self.$check()?;)?
            Ok(())
        }

        /// Host-synchronous: the copy runs before the call returns.
        fn copy_async(
            &self,
            stream: &$crate::kit::host_stream::HostStream,
            dst: $crate::MemRef<'_, Self>,
            dst_offset: u64,
            src: $crate::MemRef<'_, Self>,
            src_offset: u64,
            len: u64,
        ) -> $crate::Result<()> {
            $(self.$check()?;)?
            stream.check($crate::Device::info(self))?;
            $crate::kit::host_stream::copy(
                dst.memory(),
                dst_offset,
                src.memory(),
                src_offset,
                len,
            )
        }

        /// Host-synchronous: the write runs before the call returns.
        fn write_async(
            &self,
            stream: &$crate::kit::host_stream::HostStream,
            dst: $crate::MemRef<'_, Self>,
            offset: u64,
            data: Vec<u8>,
        ) -> $crate::Result<()> {
            $(self.$check()?;)?
            stream.check($crate::Device::info(self))?;
            $crate::kit::host_stream::write(dst.memory(), offset, &data)
        }

        /// Host-synchronous: the fill runs before the call returns.
        fn memset_async(
            &self,
            stream: &$crate::kit::host_stream::HostStream,
            dst: $crate::MemRef<'_, Self>,
            offset: u64,
            len: u64,
            value: u8,
        ) -> $crate::Result<()> {
            $(self.$check()?;)?
            stream.check($crate::Device::info(self))?;
            $crate::kit::host_stream::fill(dst.memory(), offset, len, value)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{BackendId, Capabilities, DlpackTypes};

    fn info(ordinal: u32) -> DeviceInfo {
        DeviceInfo {
            backend: BackendId::External(0x8001),
            ordinal,
            uuid: [0; 16],
            name: "test".into(),
            total_memory: 0,
            page_sizes: vec![4096],
            granularity_min: 4096,
            granularity_recommended: 4096,
            capabilities: Capabilities::default(),
            dlpack: DlpackTypes::HOST,
        }
    }

    #[test]
    fn a_stream_of_another_device_is_refused() {
        let stream = HostStream::new(1);
        stream.check(&info(1)).unwrap();
        let e = stream.check(&info(0)).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        assert!(e.to_string().contains("device 1"), "{e}");
    }
}
