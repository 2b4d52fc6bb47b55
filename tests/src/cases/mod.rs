//! The cases of the suite, each a generic function over the backend.
//!
//! Every case takes a [`Suite`] and fails by panicking with a message that
//! says what the backend did wrong. [`conformance_suite!`](crate::conformance_suite)
//! turns each into a `#[test]`; they can also be called one by one.

use hal_core::Backend;

use crate::support::Suite;

mod access;
mod batch;
mod channel;
#[allow(unsafe_code)]
mod device;
mod dlpack;
#[allow(unsafe_code)]
mod foreign;
mod gate;
mod handle;
mod lease;
#[allow(unsafe_code)]
mod memory;
mod notify_flags;
mod older;
mod process;
mod queued;
#[allow(unsafe_code)]
mod registered_streams;
mod remote;
mod streams;
mod sync;
mod threads;
mod util;
mod vmm;
mod vmm_access;
mod waits;

pub use access::*;
pub use batch::*;
pub use channel::*;
pub use device::*;
pub use dlpack::*;
pub use foreign::*;
pub use handle::*;
pub use lease::*;
pub use memory::*;
pub use notify_flags::*;
pub use older::*;
pub use process::*;
pub use queued::*;
pub use registered_streams::*;
pub use remote::*;
pub use streams::*;
pub use sync::*;
pub use threads::*;
pub use vmm::*;
pub use vmm_access::*;
pub use waits::*;

/// Play the child `role` (called by the generated `__child` test in a child
/// process).
pub fn run_child_role<B: Backend>(suite: &Suite<B>, role: &str) {
    match role {
        lease::HOLD_ROLE => lease::child_hold(suite),
        lease::HOLD_SYNC_ROLE => lease::child_hold_sync(suite),
        vmm::GROW_ROLE => vmm::child_grow(suite),
        access::PID_ROLE => access::child_pid_allow(suite),
        batch::BATCH_ROLE => batch::child_import_batch(suite),
        access::IDENTITY_ROLE => access::child_process_identity(suite),
        process::IMPORT_ROLE => process::child_import_signal(suite),
        process::HYGIENE_ROLE => process::child_hygiene(suite),
        waits::CANCEL_ROLE => waits::child_cancel_waits(suite),
        channel::SUB_ROLE => channel::child_subscriber(suite),
        channel::PUB_ROLE => channel::child_publisher(suite),
        channel::ORDERED_ROLE => channel::child_ordered_subscriber(suite),
        other => panic!("unknown child role `{other}`"),
    }
}
