//! # hal-cpu-shm: the default backend, on POSIX shared memory
//!
//! The backend every Linux machine can run: [`CpuShm`] has one device,
//! ordinal 0, the host ([`CpuDevice`]), whose memory is shared between
//! processes through memfds, named POSIX shared memory objects and files,
//! with events and notifies on futexes in shared memory and a VMM made of
//! memfd chunks mapped into reserved address space. It implements the whole
//! `hal_core` contract; its capabilities are [`CAPABILITIES`].
//!
//! Start with [`CpuShm`] and [`CpuDevice`]: how anonymous regions are
//! made, exported, sealed and imported, and which placement hints are
//! honoured, is told there. Named regions (POSIX objects reachable from C
//! and Python) are in [`named`](mod@named), files mapped shared in
//! [`file`](mod@file), events and notifies with [`CpuStream`], the VMM with
//! [`CpuReservation`]. What is protected against hostile peers, and what is
//! not, is in RELIABILITY.md. Shared bytes are shared: users of
//! [`Memory::host_ptr`](hal_core::Memory::host_ptr) treat them as such.
//!
//! ```
//! use hal_core::{AllocDesc, Backend, Device, ExportOptions, ImportOptions, Memory};
//!
//! let device = hal_cpu_shm::CpuShm::new().open(0)?;
//! let region = device.allocate(&AllocDesc::host(1 << 20))?;
//! region.write(0, b"hello")?;
//! let exported = device.export_memory(&region, &ExportOptions::default())?;
//! // Another process imports from `exported.to_text()` alone; here, in-process:
//! let mapping = device.import_memory(exported.share()?, &ImportOptions::default())?;
//! let mut buf = [0u8; 5];
//! mapping.read(0, &mut buf)?;
//! assert_eq!(&buf, b"hello");
//! # Ok::<(), hal_core::Error>(())
//! ```
#![deny(missing_docs)]
// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]
#![cfg(target_os = "linux")]

#[allow(unsafe_code)]
mod device;
pub mod file;
mod hostreg;
mod id;
mod info;
mod io;
mod mapping;
mod memory;
pub mod named;
#[allow(unsafe_code)]
mod placement;
mod sync;
mod view;
mod vmm;

pub use device::{CpuDevice, CpuShm};
pub use file::{create_file_backed, open_file_backed, open_file_backed_read_only};
pub use hal_core::kit::os::numa_nodes;
pub use info::{CAPABILITIES, HUGE_1G, HUGE_2M};
pub use mapping::CpuMapping;
pub use memory::{CpuAllocation, RegionKind};
pub use named::{
    collect_garbage, collect_garbage_named, collect_garbage_prefix, create_named, list_regions,
    open_named, open_named_read_only, region_id, unlink_named, Collected, NamedOptions, RegionInfo,
};
pub use sync::{CpuEvent, CpuNotify, CpuStream};
pub use vmm::{CpuPhysical, CpuReservation};
