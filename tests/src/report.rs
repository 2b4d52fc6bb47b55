//! What each case of the suite exercised: every case that
//! [`run_case`](crate::run_case) runs ends with one line on standard error
//! (written past the test harness's capture, so it shows in a normal run):
//!
//! ```text
//! conformance: template::vmm_granularity: answered Unsupported (vmm)
//! conformance: template::memory_export_import_roundtrip: exercised
//! conformance: template::queued_notify_outlives_its_drop: not exercised (...)
//! ```
//!
//! and when the test process ends, one count per suite module:
//!
//! ```text
//! conformance: template: 72 cases: 49 exercised, 19 answered Unsupported, 4 not exercised
//! ```
//!
//! A case is *exercised* when it checked behaviour and met no missing
//! capability; it *answered Unsupported* when a capability the device lacks
//! made it require [`Error::Unsupported`](hal_core::Error) (through
//! [`must_be_unsupported`](crate::must_be_unsupported) or [`unsupported`]);
//! it is *not exercised* when it says so ([`not_exercised`]): what it
//! checks needs something this backend or machine does not have (a second
//! device, a queued stream), and no call could answer `Unsupported` for it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Mutex, Once};

/// What the case running on this thread met so far.
#[derive(Debug, Default)]
struct Record {
    unsupported: Vec<String>,
    not_exercised: Option<String>,
}

thread_local! {
    static CASE: RefCell<Option<Record>> = const { RefCell::new(None) };
}

/// How one case ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Exercised,
    Unsupported,
    NotExercised,
    Failed,
}

/// The counts of one suite module, by outcome.
#[derive(Debug, Default)]
struct Counts {
    exercised: usize,
    unsupported: usize,
    not_exercised: usize,
    failed: usize,
}

static TOTALS: Mutex<BTreeMap<String, Counts>> = Mutex::new(BTreeMap::new());
static AT_EXIT: Once = Once::new();

/// Note that the running case required `Unsupported` because the device
/// lacks `cap` (called by [`must_be_unsupported`](crate::must_be_unsupported);
/// call it where a case checks `is_unsupported()` itself).
pub fn unsupported(cap: &str) {
    CASE.with(|c| {
        if let Some(r) = c.borrow_mut().as_mut() {
            if !r.unsupported.iter().any(|u| u == cap) {
                r.unsupported.push(cap.to_string());
            }
        }
    });
}

/// Note that the running case checks nothing of its subject on this
/// backend, and `why`: it returns without a check that could fail.
pub fn not_exercised(why: &str) {
    CASE.with(|c| {
        if let Some(r) = c.borrow_mut().as_mut() {
            r.not_exercised = Some(why.to_string());
        }
    });
}

/// The record of one case while it runs: dropped at its end, also when it
/// panics, it prints the case's line and counts it.
pub(crate) struct CaseRecord {
    module: String,
    case: String,
}

impl CaseRecord {
    /// Start recording the case `case` of the suite module `module`.
    pub(crate) fn begin(module: &str, case: &str) -> CaseRecord {
        CASE.with(|c| *c.borrow_mut() = Some(Record::default()));
        AT_EXIT.call_once(|| crate::report_exit::at_exit(print_totals));
        CaseRecord {
            module: module.to_string(),
            case: case.to_string(),
        }
    }
}

impl Drop for CaseRecord {
    fn drop(&mut self) {
        let record = CASE.with(|c| c.borrow_mut().take()).unwrap_or_default();
        let (outcome, line) = if std::thread::panicking() {
            (Outcome::Failed, "failed".to_string())
        } else if let Some(why) = record.not_exercised {
            (Outcome::NotExercised, format!("not exercised ({why})"))
        } else if !record.unsupported.is_empty() {
            (
                Outcome::Unsupported,
                format!("answered Unsupported ({})", record.unsupported.join(", ")),
            )
        } else {
            (Outcome::Exercised, "exercised".to_string())
        };
        let _ = writeln!(
            std::io::stderr(),
            "conformance: {}::{}: {line}",
            self.module,
            self.case
        );
        let mut totals = TOTALS.lock().unwrap_or_else(|p| p.into_inner());
        let counts = totals.entry(self.module.clone()).or_default();
        match outcome {
            Outcome::Exercised => counts.exercised += 1,
            Outcome::Unsupported => counts.unsupported += 1,
            Outcome::NotExercised => counts.not_exercised += 1,
            Outcome::Failed => counts.failed += 1,
        }
    }
}

/// Print [`totals`] on standard error; run at the process's exit.
extern "C" fn print_totals() {
    // Nothing may unwind out of an `atexit` handler.
    let _ = std::panic::catch_unwind(|| {
        for line in totals() {
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    });
}

/// One line per suite module that ran cases in this process, with its
/// counts.
pub(crate) fn totals() -> Vec<String> {
    let totals = TOTALS.lock().unwrap_or_else(|p| p.into_inner());
    totals
        .iter()
        .map(|(module, c)| {
            let all = c.exercised + c.unsupported + c.not_exercised + c.failed;
            let mut line = format!(
                "conformance: {module}: {all} cases: {} exercised, {} answered Unsupported, {} \
                 not exercised",
                c.exercised, c.unsupported, c.not_exercised
            );
            if c.failed > 0 {
                line.push_str(&format!(", {} failed", c.failed));
            }
            line
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_is_counted_by_what_it_met() {
        drop(CaseRecord::begin("report_unit", "plain"));
        {
            let _r = CaseRecord::begin("report_unit", "gated");
            unsupported("vmm");
            unsupported("vmm");
        }
        {
            let _r = CaseRecord::begin("report_unit", "needs_two");
            unsupported("vmm");
            not_exercised("one device");
        }
        let line = totals()
            .into_iter()
            .find(|l| l.starts_with("conformance: report_unit:"))
            .expect("the module's line");
        assert_eq!(
            line,
            "conformance: report_unit: 3 cases: 1 exercised, 1 answered Unsupported, 1 not \
             exercised"
        );
    }
}
