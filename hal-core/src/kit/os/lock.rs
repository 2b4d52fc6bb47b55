//! Locking and condition waits that a panic elsewhere does not poison.
//!
//! The mutexes of this library and of its backends guard data that every
//! holder leaves consistent wherever a panic can happen, so that a panic in
//! one thread (caught at an `extern "C"` boundary, or a test's failed
//! assertion) must not turn every later call of every other thread into a
//! panic: the data of a poisoned mutex is taken as it is.

use std::sync::{
    Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
    WaitTimeoutResult,
};
use std::time::Duration;

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
/// *hal_core::kit::os::lock::lock(&m) += 1;
/// assert_eq!(*hal_core::kit::os::lock::lock(&m), 2);
/// ```
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Wait on `cv` with `guard` held, as [`Condvar::wait`], taking the data of
/// a mutex poisoned meanwhile.
pub fn wait<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// Wait on `cv` at most `timeout`, as [`Condvar::wait_timeout`], taking the
/// data of a mutex poisoned meanwhile.
pub fn wait_timeout<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
    cv.wait_timeout(guard, timeout)
        .unwrap_or_else(PoisonError::into_inner)
}

/// Wait on `cv` while `condition` holds, at most `timeout`, as
/// [`Condvar::wait_timeout_while`], taking the data of a mutex poisoned
/// meanwhile.
pub fn wait_timeout_while<'a, T>(
    cv: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
    condition: impl FnMut(&mut T) -> bool,
) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
    cv.wait_timeout_while(guard, timeout, condition)
        .unwrap_or_else(PoisonError::into_inner)
}

/// Share `rw` for reading, taking the data of a poisoned one.
pub fn read<T>(rw: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    rw.read().unwrap_or_else(PoisonError::into_inner)
}

/// Hold `rw` for writing, taking the data of a poisoned one.
pub fn write<T>(rw: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    rw.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A lock poisoned by a holder's panic.
    fn poisoned<T: Send + 'static>(value: T, hold: fn(&Mutex<T>)) -> Arc<Mutex<T>> {
        let m = Arc::new(Mutex::new(value));
        let theirs = Arc::clone(&m);
        let _ = std::thread::spawn(move || hold(&theirs)).join();
        assert!(m.is_poisoned());
        m
    }

    #[test]
    fn waits_on_a_poisoned_mutex_take_its_data() {
        let m = poisoned(1, |m| {
            let _held = m.lock().unwrap();
            panic!("a holder panics");
        });
        let cv = Condvar::new();
        let (g, timed_out) = wait_timeout(&cv, lock(&m), Duration::from_millis(1));
        assert!(timed_out.timed_out());
        assert_eq!(*g, 1);
        let (mut g, timed_out) = wait_timeout_while(&cv, g, Duration::from_millis(1), |v| *v == 1);
        assert!(timed_out.timed_out());
        *g = 2;
        let (g, timed_out) = wait_timeout_while(&cv, g, Duration::from_secs(60), |v| *v == 1);
        assert!(!timed_out.timed_out(), "the condition no longer holds");
        assert_eq!(*g, 2);
        drop(g);
        // A plain wait, woken by a thread that changes the value.
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let theirs = Arc::clone(&pair);
        let waker = std::thread::spawn(move || {
            *lock(&theirs.0) = true;
            theirs.1.notify_all();
        });
        let mut g = lock(&pair.0);
        while !*g {
            g = wait(&pair.1, g);
        }
        drop(g);
        waker.join().unwrap();
    }

    #[test]
    fn a_poisoned_rwlock_is_read_and_written() {
        let rw = Arc::new(RwLock::new(1));
        let theirs = Arc::clone(&rw);
        let _ = std::thread::spawn(move || {
            let _held = theirs.write().unwrap();
            panic!("a writer panics");
        })
        .join();
        assert!(rw.is_poisoned());
        *write(&rw) += 1;
        assert_eq!(*read(&rw), 2);
    }
}
