//! The warnings a test process logs, captured: a test binary that checks a
//! warning calls [`capture`] (as often as it likes) and reads
//! [`containing`] or [`all`].

use hal_core::kit::os::lock::lock;
use std::sync::{Mutex, Once};

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            lines().push(r.args().to_string());
        }
    }

    fn flush(&self) {}
}

fn lines() -> std::sync::MutexGuard<'static, Vec<String>> {
    lock(&LINES)
}

/// Capture this process's warnings (and worse) from now on. The first call
/// installs the logger; later calls do nothing.
///
/// # Panics
///
/// When another logger was installed in this test binary first: its
/// warnings would never be seen here.
pub fn capture() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        static LOGGER: Capture = Capture;
        log::set_logger(&LOGGER).expect("the test binary installs one logger");
        log::set_max_level(log::LevelFilter::Warn);
    });
}

/// Every warning logged since [`capture`].
pub fn all() -> Vec<String> {
    lines().clone()
}

/// The warnings logged since [`capture`] that contain `text`.
pub fn containing(text: &str) -> Vec<String> {
    lines()
        .iter()
        .filter(|l| l.contains(text))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn warnings_are_kept_and_the_rest_is_not() {
        super::capture();
        super::capture();
        log::warn!("a warning kept {}", 1);
        log::error!("an error kept too");
        log::info!("information is not kept");
        assert_eq!(super::containing("kept").len(), 2);
        assert!(super::containing("information").is_empty());
        assert!(super::all().iter().any(|l| l == "a warning kept 1"));
    }
}
