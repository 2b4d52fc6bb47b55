//! Host-synchronous streams: work "queued" on a [`HostStream`] runs at
//! once, in order, on the calling thread, so a synchronize or a query has
//! nothing to wait for. A backend without device queues (host memory, a
//! runtime that only offers blocking calls) takes `type Stream = HostStream`
//! and forwards its stream methods of `impl Device` to the functions here,
//! one line each:
//!
//! ```ignore
//! fn copy_async(&self, stream: &HostStream, dst: MemRef<'_, Self>, dst_offset: u64,
//!               src: MemRef<'_, Self>, src_offset: u64, len: u64) -> Result<()> {
//!     self.check()?;
//!     host::copy_async(self, stream, dst, dst_offset, src, src_offset, len)
//! }
//! ```
//!
//! Each refuses a stream of another device first. The copies, writes and
//! fills go through the bounds- and protection-checked [`Memory::read`](crate::Memory::read) and
//! [`Memory::write`](crate::Memory::write) of both sides, so a read-only destination answers what
//! its `write` answers ([`Error::PermissionDenied`]). `hold_until_done`
//! needs nothing here: its default drops the value at once, the stream
//! having nothing left to run.

use crate::bounds::check_bounds;
use crate::device::Device;
use crate::device::MemRef;
use crate::error::{Error, Result};
use crate::types::DeviceInfo;

/// A host-synchronous stream of one device: its work has always run.
///
/// ```
/// use hal_core::kit::stream::host::HostStream;
///
/// let stream = HostStream::new(0);
/// assert_eq!(stream.device(), 0);
/// ```
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

/// [`Device::create_stream`]: a stream of `device`.
pub fn create_stream<D: Device<Stream = HostStream>>(device: &D) -> Result<HostStream> {
    Ok(HostStream::new(device.info().ordinal))
}

/// [`Device::synchronize`]: nothing to wait for, once the stream is this
/// device's.
pub fn synchronize<D: Device<Stream = HostStream>>(device: &D, stream: &HostStream) -> Result<()> {
    stream.check(device.info())
}

/// [`Device::query_stream`]: everything has run, once the stream is this
/// device's.
pub fn query_stream<D: Device<Stream = HostStream>>(
    device: &D,
    stream: &HostStream,
) -> Result<bool> {
    stream.check(device.info())?;
    Ok(true)
}

/// [`Device::copy_async`]: `len` bytes from `src` at `src_offset` to `dst`
/// at `dst_offset`, now. The two may be the same memory and the ranges may
/// overlap: the bytes are read whole before any is written.
pub fn copy_async<D: Device<Stream = HostStream>>(
    device: &D,
    stream: &HostStream,
    dst: MemRef<'_, D>,
    dst_offset: u64,
    src: MemRef<'_, D>,
    src_offset: u64,
    len: u64,
) -> Result<()> {
    stream.check(device.info())?;
    let (dst, src) = (dst.memory(), src.memory());
    check_bounds(src_offset, len, src.len())?;
    check_bounds(dst_offset, len, dst.len())?;
    let mut buf = vec![0u8; bytes(len, "a copy")?];
    src.read(src_offset, &mut buf)?;
    dst.write(dst_offset, &buf)
}

/// [`Device::write_async`]: `data` to `dst` at `offset`, now.
pub fn write_async<D: Device<Stream = HostStream>>(
    device: &D,
    stream: &HostStream,
    dst: MemRef<'_, D>,
    offset: u64,
    data: &[u8],
) -> Result<()> {
    stream.check(device.info())?;
    let dst = dst.memory();
    check_bounds(offset, data.len() as u64, dst.len())?;
    dst.write(offset, data)
}

/// [`Device::memset_async`]: `len` bytes of `dst` from `offset` set to
/// `value`, now.
pub fn memset_async<D: Device<Stream = HostStream>>(
    device: &D,
    stream: &HostStream,
    dst: MemRef<'_, D>,
    offset: u64,
    len: u64,
    value: u8,
) -> Result<()> {
    stream.check(device.info())?;
    let dst = dst.memory();
    check_bounds(offset, len, dst.len())?;
    dst.write(offset, &vec![value; bytes(len, "a fill")?])
}

/// `len` as a buffer length, or [`Error::InvalidArgument`] naming `what`.
fn bytes(len: u64, what: &str) -> Result<usize> {
    usize::try_from(len)
        .map_err(|_| Error::invalid(format!("{what} of {len} bytes does not fit in memory")))
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
