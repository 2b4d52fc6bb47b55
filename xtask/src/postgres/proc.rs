//! Running programs and writing files, each failure a line of text.

use std::path::Path;
use std::process::{Command, Stdio};

/// A result whose error is the line to print.
pub(super) type Res<T> = Result<T, String>;

pub(super) fn copy(from: &Path, to: &Path) -> Res<()> {
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))
}

pub(super) fn append(path: &Path, text: &str) -> Res<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Run `cmd`, its output shown; an error unless it succeeds.
pub(super) fn run(cmd: &mut Command) -> Res<()> {
    let status = cmd
        .status()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "{:?} {:?}: {status}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>()
        ))
    }
}

/// Run `cmd`; its standard output, or an error with its standard error.
pub(super) fn output(cmd: &mut Command) -> Res<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
