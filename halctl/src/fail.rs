//! Errors of the command line and their exit codes.

use std::fmt;
use std::process::ExitCode;

/// Exit code of an operation that failed (a verification mismatch, a missing
/// region, an exporter that is gone, an unavailable backend).
pub const EXIT_FAILED: u8 = 1;
/// Exit code of bad usage or bad input (a malformed handle, an unknown
/// backend name, an invalid size). clap's own usage errors use it too.
pub const EXIT_USAGE: u8 = 2;

/// A command's failure: one short line for the user and an exit code.
#[derive(Debug)]
pub struct Fail {
    /// [`EXIT_FAILED`] or [`EXIT_USAGE`].
    pub code: u8,
    /// The message, without the `halctl: error:` prefix.
    pub message: String,
}

impl Fail {
    /// The operation failed (exit 1).
    pub fn failed(message: impl Into<String>) -> Self {
        Fail {
            code: EXIT_FAILED,
            message: message.into(),
        }
    }

    /// Bad usage or bad input (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Fail {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }

    /// Wrap a hal error with what halctl was doing. Errors that describe bad
    /// input (an undecodable handle, an invalid argument, a misaligned range)
    /// map to exit 2, every other error to exit 1.
    pub fn hal(context: &str, err: hal::Error) -> Self {
        let code = match &err {
            hal::Error::InvalidArgument { .. } | hal::Error::Misaligned { .. } => EXIT_USAGE,
            hal::Error::InvalidHandle(h) if is_decode_error(h) => EXIT_USAGE,
            _ => EXIT_FAILED,
        };
        Fail {
            code,
            message: format!("{context}: {err}"),
        }
    }

    /// The exit code for the process.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }
}

/// True for the handle errors a decoder reports (the input is malformed), as
/// opposed to those an import reports about a well-formed handle.
fn is_decode_error(err: &hal::HandleError) -> bool {
    !matches!(
        err,
        hal::HandleError::WrongKind { .. }
            | hal::HandleError::WrongBackend { .. }
            | hal::HandleError::Descriptors(_)
    )
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Result of a command.
pub type CmdResult<T = ()> = Result<T, Fail>;

/// Attach context to hal results.
pub trait Context<T> {
    /// Map the error with [`Fail::hal`].
    fn ctx(self, context: &str) -> CmdResult<T>;
}

impl<T> Context<T> for hal::Result<T> {
    fn ctx(self, context: &str) -> CmdResult<T> {
        self.map_err(|e| Fail::hal(context, e))
    }
}
