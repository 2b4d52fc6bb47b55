//! Ordering: streams (`stream.rs`), events and IPC events with their cap
//! (`event.rs`), notifies (`notify.rs`), and the quiet a call that waits
//! for the device keeps with the stream waits for notifies (`quiet.rs`).

pub(crate) mod event;
pub(crate) mod notify;
pub(crate) mod quiet;
pub(crate) mod stream;

pub use event::{CudaEvent, DEFAULT_IPC_EVENT_CAP};
pub use notify::CudaNotify;
pub use stream::CudaStream;
