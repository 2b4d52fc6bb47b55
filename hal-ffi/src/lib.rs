//! # The C ABI of hal: `libhal_ipc.so`, `libhal_ipc.a` and `include/hal.h`
//!
//! C and C++ programs share memory, tensors, events and notifies between
//! processes through this library, on every backend compiled into it
//! (`cpu-shm`, `mock-cuda`, `mock-ascend`, `cuda`, `cuda-uvm`, `ascend`),
//! chosen by name at run time. The header `include/hal.h` is generated from
//! this crate (`cargo xtask cheader`); every function is documented there.
//!
//! The rules every entry point keeps:
//!
//! - it answers a [`hal_status`], `HAL_OK` or a stable error value, and
//!   sets this thread's message of the failure (`hal_last_error()`);
//! - no panic crosses the boundary: one is caught and answered
//!   `HAL_ERR_PANIC`;
//! - NULL where a pointer is needed is `HAL_ERR_NULL_ARGUMENT`, never a
//!   crash;
//! - objects (`hal_device`, `hal_memory`, `hal_notify`, `hal_event`,
//!   `hal_remote_*`, ...) are opaque tokens looked up before use: a forged
//!   pointer is `HAL_ERR_INVALID_OBJECT`, a second release or a use after
//!   release `HAL_ERR_DOUBLE_RELEASE`;
//! - every call is thread-safe; nothing is printed to stdout;
//! - option structures start with their own `size`, so that they can grow.
//!
//! ```c
//! #include <hal.h>
//!
//! hal_device *dev;
//! hal_memory *mem;
//! char *text;
//! if (hal_device_open("cpu-shm", 0, &dev) != HAL_OK ||
//!     hal_alloc(dev, 1 << 20, HAL_LOCATION_HOST, &mem) != HAL_OK ||
//!     hal_export(mem, NULL, &text) != HAL_OK) {
//!     fprintf(stderr, "%s\n", hal_last_error());
//!     return 1;
//! }
//! printf("%s\n", text); /* another process: hal_import(text, NULL, &mem) */
//! hal_string_free(text);
//! ```
#![deny(missing_docs)]
// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]
#![cfg(unix)]

#[allow(unsafe_code)]
mod adopt;
#[allow(unsafe_code)]
mod channel;
#[allow(unsafe_code)]
mod channel_view;
mod decode;
#[allow(unsafe_code)]
mod device;
#[allow(unsafe_code)]
mod event;
#[allow(unsafe_code)]
mod group;
#[allow(unsafe_code)]
mod last_error;
#[allow(unsafe_code)]
mod memory;
#[allow(unsafe_code)]
mod named;
#[allow(unsafe_code)]
mod notify;
#[allow(unsafe_code)]
mod options;
#[cfg(feature = "ucx")]
#[allow(unsafe_code)]
mod remote_export;
#[cfg(feature = "ucx")]
#[allow(unsafe_code)]
mod remote_group;
#[cfg(feature = "ucx")]
#[allow(unsafe_code)]
mod remote_memory;
#[cfg(feature = "ucx")]
#[allow(unsafe_code)]
mod remote_node;
#[cfg(feature = "ucx")]
#[allow(unsafe_code)]
mod remote_notify;
#[cfg(feature = "ucx")]
#[allow(unsafe_code)]
mod remote_offer;
#[cfg(feature = "ucx")]
#[allow(unsafe_code)]
mod remote_subscriber;
#[cfg(all(test, feature = "ucx"))]
#[allow(unsafe_code)]
mod remote_tests;
#[cfg(feature = "ucx")]
mod remote_wait;
#[allow(unsafe_code)]
mod sample;
mod status;
#[allow(unsafe_code)]
mod sync_obj;
mod table;
#[allow(unsafe_code)]
mod tensor;
#[allow(unsafe_code)]
mod text;
#[allow(unsafe_code)]
mod trust;

pub use adopt::hal_adopt;
pub use channel::{
    hal_channel_options, hal_publish, hal_publisher, hal_publisher_create, hal_publisher_release,
    hal_receive, hal_subscriber, hal_subscriber_open, hal_subscriber_release,
    HAL_CHANNEL_BROADCAST, HAL_CHANNEL_QUEUE,
};
pub use channel_view::{
    hal_loan, hal_loan_publish, hal_loan_release, hal_loan_write, hal_publisher_loan,
    hal_receive_sample, hal_sample, hal_sample_read, hal_sample_release,
};
pub use device::{
    hal_abi_version, hal_backends, hal_device, hal_device_backend, hal_device_has, hal_device_open,
    hal_device_release, HAL_ABI_VERSION,
};
pub use event::{
    hal_event, hal_event_create, hal_event_export, hal_event_import, hal_event_query,
    hal_event_record, hal_event_release, hal_event_wait,
};
pub use group::{
    hal_group, hal_group_all_gather, hal_group_barrier, hal_group_broadcast, hal_group_join,
    hal_group_member_pid, hal_group_rank, hal_group_release,
};
pub use last_error::hal_last_error;
pub use memory::{
    hal_alloc, hal_export, hal_import, hal_importers, hal_location, hal_memory,
    hal_memory_device_ptr, hal_memory_host_ptr, hal_memory_release, hal_memory_size, hal_read,
    hal_wait_unleased, hal_write, HAL_LOCATION_DEVICE, HAL_LOCATION_HOST, HAL_LOCATION_MANAGED,
};
pub use named::{hal_named_create, hal_named_open};
pub use notify::{
    hal_notify, hal_notify_create, hal_notify_export, hal_notify_import, hal_notify_release,
    hal_notify_signal, hal_notify_wait,
};
pub use options::{
    hal_export_options, hal_import_options, HAL_IMPORTERS_ANYONE, HAL_IMPORTERS_DEFAULT,
    HAL_IMPORTERS_PIDS, HAL_IMPORTERS_SAME_USER,
};
#[cfg(feature = "ucx")]
pub use remote_export::{
    hal_remote_export, hal_remote_export_importers, hal_remote_export_notify,
    hal_remote_export_release, hal_remote_export_text, hal_remote_export_wait_importers,
    hal_remote_export_wait_signal, hal_remote_export_wait_unused, hal_remote_exported,
};
#[cfg(feature = "ucx")]
pub use remote_group::{
    hal_remote_group, hal_remote_group_all_gather, hal_remote_group_barrier,
    hal_remote_group_broadcast, hal_remote_group_join_at, hal_remote_group_member,
    hal_remote_group_node, hal_remote_group_options, hal_remote_group_rank,
    hal_remote_group_release,
};
#[cfg(feature = "ucx")]
pub use remote_memory::{
    hal_remote_connect, hal_remote_flush, hal_remote_memory, hal_remote_memory_release,
    hal_remote_read, hal_remote_read_into, hal_remote_size, hal_remote_write,
    hal_remote_write_from, hal_remote_write_signal,
};
#[cfg(feature = "ucx")]
pub use remote_node::{
    hal_remote_node, hal_remote_node_address, hal_remote_node_bind, hal_remote_node_bind_with,
    hal_remote_node_options, hal_remote_node_release,
};
#[cfg(feature = "ucx")]
pub use remote_notify::{
    hal_remote_connect_notify, hal_remote_notify, hal_remote_notify_release,
    hal_remote_notify_signal,
};
#[cfg(feature = "ucx")]
pub use remote_offer::{
    hal_remote_channel_offer, hal_remote_channel_options, hal_remote_offer,
    hal_remote_offer_release, hal_remote_offer_subscribers, hal_remote_offer_text,
};
#[cfg(feature = "ucx")]
pub use remote_subscriber::{
    hal_remote_receive_sample, hal_remote_sample, hal_remote_sample_read,
    hal_remote_sample_release, hal_remote_subscribe_options, hal_remote_subscriber,
    hal_remote_subscriber_connect, hal_remote_subscriber_release,
};
pub use status::hal_status;
pub use tensor::{hal_export_tensor, hal_import_tensor, hal_to_dlpack};
pub use text::hal_string_free;
pub use trust::hal_trust_exporter_uid;
