//! Output: human text by default, one JSON object with `--json`.
//!
//! Writing to a closed pipe (`halctl ... | head`) ends quietly instead of
//! panicking.

use std::io::Write;

use crate::fail::{CmdResult, Fail};

/// Print `text` (a newline is added) to stdout.
pub fn line(text: impl AsRef<str>) -> CmdResult {
    let mut stdout = std::io::stdout().lock();
    let r = writeln!(stdout, "{}", text.as_ref()).and_then(|()| stdout.flush());
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Fail::failed(String::new())),
        Err(e) => Err(Fail::failed(format!("writing to stdout: {e}"))),
    }
}

/// The widest line of the text output, in columns.
pub const WIDTH: usize = 100;

/// `text` broken at spaces into lines of at most `width` columns: the first
/// line starts with `first`, the others with `rest`. A word longer than a
/// line is left whole on a line of its own.
pub fn wrap(first: &str, rest: &str, text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = first.to_string();
    let mut empty = true;
    for word in text.split_whitespace() {
        let len = cur.chars().count();
        if !empty && len + 1 + word.chars().count() > width {
            lines.push(std::mem::replace(&mut cur, rest.to_string()));
            empty = true;
        }
        if !empty {
            cur.push(' ');
        }
        cur.push_str(word);
        empty = false;
    }
    lines.push(cur);
    lines
}

/// Print `text` wrapped to [`WIDTH`] columns (see [`wrap`]).
pub fn wrapped(first: &str, rest: &str, text: &str) -> CmdResult {
    for l in wrap(first, rest, text, WIDTH) {
        line(l)?;
    }
    Ok(())
}

/// Print `value` as one line of JSON.
pub fn json<T: serde::Serialize>(value: &T) -> CmdResult {
    let text = serde_json::to_string(value)
        .map_err(|e| Fail::failed(format!("encoding JSON output: {e}")))?;
    line(text)
}

/// `bytes` in binary units (`64 MiB`, `4 KiB`, `123 B`).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A duration in nanoseconds, in the most readable unit.
pub fn nanos(ns: u64) -> String {
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} us", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.2} s", ns as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(123), "123 B");
        assert_eq!(bytes(64 << 20), "64 MiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(nanos(999), "999 ns");
        assert_eq!(nanos(41_000), "41.0 us");
    }

    #[test]
    fn wrap_breaks_at_spaces_within_the_width() {
        let text = "one two three four five six seven";
        let got = wrap("  ", "    ", text, 14);
        assert_eq!(
            got,
            ["  one two", "    three four", "    five six", "    seven"]
        );
        assert!(got.iter().all(|l| l.len() <= 14));
        assert_eq!(wrap("- ", "  ", "short", 100), ["- short"]);
        assert_eq!(
            wrap("", "", "averyveryverylongword x", 5),
            ["averyveryverylongword", "x"]
        );
    }
}
