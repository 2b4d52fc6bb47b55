//! [`StepErrors`]: the errors of host steps (`step.rs`), kept by stream
//! until the stream's next synchronization reports them.

use std::collections::HashMap;
use std::sync::Mutex;

use hal_core::kit::os::lock::lock;
use hal_core::{Error, Result};

/// Errors of host steps, by stream id ([`UvmStream`](crate::UvmStream)),
/// until the stream's next synchronization reports them.
#[derive(Debug, Default)]
pub struct StepErrors(Mutex<HashMap<u64, Error>>);

impl StepErrors {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Error>> {
        lock(&self.0)
    }

    /// The first error of a step on the stream `key`, taken.
    pub fn take(&self, key: u64) -> Result<()> {
        match self.lock().remove(&key) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The first error of a step on any stream, taken.
    pub fn take_any(&self) -> Result<()> {
        let mut errors = self.lock();
        let first = errors.keys().next().copied();
        match first.and_then(|k| errors.remove(&k)) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Keep `e` for the stream `key`, unless it has an error already.
    pub(crate) fn keep(&self, key: u64, e: Error) {
        self.lock().entry(key).or_insert(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_error_of_a_stream_is_kept_and_taken_once() {
        let errors = StepErrors::default();
        errors.take(1).unwrap();
        errors.keep(1, Error::invalid("first"));
        errors.keep(1, Error::invalid("second"));
        errors.take(2).expect("another stream's error");
        let e = errors.take(1).unwrap_err();
        assert!(e.to_string().contains("first"), "{e}");
        errors.take(1).expect("taken already");
    }

    #[test]
    fn take_any_takes_an_error_of_any_stream() {
        let errors = StepErrors::default();
        errors.take_any().unwrap();
        errors.keep(7, Error::invalid("seven"));
        let e = errors.take_any().unwrap_err();
        assert!(e.to_string().contains("seven"), "{e}");
        errors.take_any().expect("taken already");
        errors.take(7).expect("taken by take_any");
    }
}
