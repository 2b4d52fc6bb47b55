//! Locking that survives a panic elsewhere.

/// Lock a mutex, taking the data of a poisoned one.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
