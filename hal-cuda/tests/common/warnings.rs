//! The warnings this test process logs, captured: a binary that checks a
//! warning installs [`capture`] once and reads [`containing`].

use std::sync::{Mutex, OnceLock};

fn lines() -> &'static Mutex<Vec<String>> {
    static LINES: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    LINES.get_or_init(|| Mutex::new(Vec::new()))
}

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            lines()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(r.args().to_string());
        }
    }
    fn flush(&self) {}
}

/// Capture this process's warnings from now on (once per process).
pub fn capture() {
    static LOGGER: Capture = Capture;
    log::set_logger(&LOGGER).expect("the test binary installs one logger, once");
    log::set_max_level(log::LevelFilter::Warn);
}

/// The warnings logged so far that contain `text`.
pub fn containing(text: &str) -> Vec<String> {
    lines()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|l| l.contains(text))
        .cloned()
        .collect()
}
