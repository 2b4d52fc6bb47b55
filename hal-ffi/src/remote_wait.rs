//! The timeouts of the remote waits: nanoseconds from C, negative for
//! forever.

use std::time::Duration;

/// What "forever" waits: long enough never to end, short enough that a
/// deadline of now plus it is a time the clock can hold.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A C timeout in nanoseconds (negative: forever) as a duration.
pub(crate) fn wait_timeout(ns: i64) -> Duration {
    u64::try_from(ns).map_or(FOREVER, Duration::from_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_is_forever_and_the_rest_is_nanoseconds() {
        assert_eq!(wait_timeout(-1), FOREVER);
        assert_eq!(wait_timeout(i64::MIN), FOREVER);
        assert_eq!(wait_timeout(0), Duration::ZERO);
        assert_eq!(wait_timeout(1_500), Duration::from_nanos(1_500));
        assert!(std::time::Instant::now().checked_add(FOREVER).is_some());
    }
}
