//! Locking that a panic elsewhere does not poison.
//!
//! The mutexes of this library and of its backends guard data that every
//! holder leaves consistent wherever a panic can happen, so that a panic in
//! one thread (caught at an `extern "C"` boundary, or a test's failed
//! assertion) must not turn every later call of every other thread into a
//! panic: the data of a poisoned mutex is taken as it is.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Lock `m`, taking the data of a poisoned one.
///
/// ```
/// use std::sync::Mutex;
///
/// let m = Mutex::new(1);
/// let _ = std::panic::catch_unwind(|| {
///     let _held = m.lock().unwrap();
///     panic!("a holder panics");
/// });
/// assert!(m.is_poisoned());
/// *hal_core::lock::lock(&m) += 1;
/// assert_eq!(*hal_core::lock::lock(&m), 2);
/// ```
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
