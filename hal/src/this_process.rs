//! The registry of the calling process, for libraries that open backends
//! on their callers' behalf (the C library, the Python package): one
//! registry per process, and a new one in a child forked from a process
//! that used it, whose parent's backends answer [`Error::Forked`] there
//! (so that "open the backend again in the child" works).
//!
//! [`Error::Forked`]: crate::Error::Forked

use std::sync::{Arc, Mutex};

use hal_core::kit::os::Origin;

use crate::Registry;

/// The registry and the process that made it.
static THIS_PROCESS: Mutex<Option<(Origin, Arc<Registry>)>> = Mutex::new(None);

impl Registry {
    /// This process's registry, made at the first call (in a forked child,
    /// at its first call after the fork).
    ///
    /// ```
    /// let a = hal::Registry::this_process();
    /// let b = hal::Registry::this_process();
    /// assert!(std::sync::Arc::ptr_eq(&a, &b));
    /// ```
    pub fn this_process() -> Arc<Registry> {
        let mut slot = THIS_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((origin, registry)) = slot.as_ref() {
            if !origin.forked() {
                return Arc::clone(registry);
            }
            // The parent's: its backends are not this process's to drop.
            if let Some((_, parents)) = slot.take() {
                std::mem::forget(parents);
            }
        }
        let registry = Arc::new(Registry::new());
        *slot = Some((Origin::here(), Arc::clone(&registry)));
        registry
    }
}
