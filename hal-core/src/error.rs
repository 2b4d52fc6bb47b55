//! The one error type of the contract.
//!
//! Every fallible call in every backend returns [`Error`]. Its variants tell
//! apart what a caller can act on differently: a backend that is not there, an
//! operation the backend cannot do, a bad handle, a misaligned range, a refused
//! importer, and so on. Vendor errors keep their numeric code and symbolic name.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::types::BackendId;

/// `Result` with the contract's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a hal call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The backend cannot be used on this machine (library missing, no device).
    #[error(
        "backend `{backend}` is unavailable: {reason}{}",
        SearchedPaths { reason, searched }
    )]
    Unavailable {
        /// The backend, e.g. [`BackendId::Cuda`] (written out by its name,
        /// `cuda`).
        backend: BackendId,
        /// Why it is unavailable.
        reason: String,
        /// Every path that was searched for the vendor runtime.
        searched: Vec<PathBuf>,
    },

    /// The backend (or this device) cannot perform the operation.
    #[error("`{operation}` is not supported by backend `{backend}`: {detail}")]
    Unsupported {
        /// The backend.
        backend: BackendId,
        /// The operation, or the missing vendor entry point.
        operation: String,
        /// Why, and what to use instead where there is an alternative.
        detail: String,
    },

    /// A handle that could not be decoded or does not fit the call.
    #[error("invalid handle: {0}")]
    InvalidHandle(#[from] HandleError),

    /// An exported range that does not cover whole pages.
    #[error(
        "range at offset {offset:#x} of length {len:#x} is not aligned to the \
         {page_size}-byte page: export whole pages (sub-allocations are never widened)"
    )]
    Misaligned {
        /// Offset of the range within its allocation.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// The page size the range must be a multiple of.
        page_size: u64,
    },

    /// The calling process is not allowed to use the resource.
    #[error("permission denied{}: {reason}", OptPid(*pid))]
    PermissionDenied {
        /// The refused process, where one is known.
        pid: Option<u32>,
        /// What was refused and how to allow it.
        reason: String,
    },

    /// The named resource does not exist.
    #[error("not found: {what}")]
    NotFound {
        /// What was looked for.
        what: String,
    },

    /// An exclusive create found the name taken.
    #[error("already exists: {what} (open it instead, or choose another name)")]
    AlreadyExists {
        /// What exists already.
        what: String,
    },

    /// The device or the host could not provide the memory.
    #[error("out of memory: {requested} bytes requested: {detail}")]
    OutOfMemory {
        /// Bytes requested.
        requested: u64,
        /// What ran out.
        detail: String,
    },

    /// A wait did not complete in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// How long the call waited.
        after: Duration,
        /// What it waited for.
        what: String,
    },

    /// The resource was closed (by this process or by its peer).
    #[error("closed: {what}")]
    Closed {
        /// What was closed.
        what: String,
    },

    /// The resource is still in use by importers and cannot be freed yet.
    #[error("busy: {what} is still held by {holders} importer(s); wait for them to close first")]
    Busy {
        /// The resource.
        what: String,
        /// How many importers hold it.
        holders: usize,
    },

    /// An argument is out of range or inconsistent.
    #[error("invalid argument: {what}")]
    InvalidArgument {
        /// What is wrong with it.
        what: String,
    },

    /// A vendor runtime returned an error code.
    #[error(transparent)]
    Vendor(#[from] VendorError),

    /// The object was made by another process: this process is a child
    /// that `fork()` made from it, and the object (a backend, a device, or
    /// what a device made) belongs to the parent. Vendor contexts do not
    /// survive a fork, and the parent's helper threads did not come along,
    /// so hal refuses instead of calling into them.
    #[error(
        "{what} was made by process {made_in} before fork(); this process ({now}) is a child of \
         it and cannot use it: open the backend again in the child (and make what it needs \
         from there), or open it only after forking"
    )]
    Forked {
        /// What was used.
        what: String,
        /// The pid of the process that made it.
        made_in: u32,
        /// The pid of this process.
        now: u32,
    },

    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What the library was doing.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A vendor runtime's error, with its code and symbolic name kept.
///
/// Made only from the vendors' code tables of the kit
/// ([`kit::vendor::error`](crate::kit::vendor::error),
/// [`Code::error`](crate::kit::vendor::Code::error)), so that a code always
/// carries the name the vendor's header gives it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{backend} error {code} ({name}): {message}")]
#[non_exhaustive]
pub struct VendorError {
    /// Backend that reported it.
    pub backend: BackendId,
    /// The vendor's numeric code, unchanged (e.g. `CUDA_ERROR_INVALID_VALUE` = 1, `ACL_ERROR_RT_NO_PERMISSION` = 207006).
    pub code: i64,
    /// The vendor's symbolic name for the code.
    pub name: String,
    /// The vendor's message, or the library's description.
    pub message: String,
}

/// Why a handle was refused: by the decoder or by an import.
///
/// Every malformed input maps to exactly one variant, so tests and callers can
/// tell them apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandleError {
    /// The input ended before the field named.
    #[error("truncated: {field} needs {needed} more byte(s) at offset {offset}")]
    Truncated {
        /// Field being read.
        field: &'static str,
        /// Offset at which it starts.
        offset: usize,
        /// Bytes missing.
        needed: usize,
    },
    /// The input does not start with the handle magic.
    #[error("bad magic: not a hal handle")]
    BadMagic,
    /// A wire version this build does not understand.
    #[error("unsupported wire version {found} (this build reads up to {supported})")]
    UnsupportedVersion {
        /// Version in the input.
        found: u8,
        /// Highest version this build reads.
        supported: u8,
    },
    /// An unknown handle kind tag.
    #[error("unknown handle kind {0}")]
    UnknownKind(u8),
    /// An unknown backend id.
    #[error("unknown backend id {0:#06x}")]
    UnknownBackend(u16),
    /// The checksum does not match the content.
    #[error("bad checksum: stored {stored:#010x}, computed {computed:#010x}")]
    BadChecksum {
        /// Checksum in the input.
        stored: u32,
        /// Checksum of the content.
        computed: u32,
    },
    /// A length or range field overflows.
    #[error("length overflow in {field}")]
    LengthOverflow {
        /// The field.
        field: &'static str,
    },
    /// A variable-length field is over its bound.
    #[error("{field} is {len} bytes/items, over the bound of {max}")]
    OverBound {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// Bytes follow the end of the handle.
    #[error("{0} trailing byte(s) after the handle")]
    TrailingBytes(usize),
    /// The text form has a character outside its alphabet.
    #[error("invalid character {ch:?} at position {position} of the text form")]
    InvalidText {
        /// Position of the character.
        position: usize,
        /// The character.
        ch: char,
    },
    /// The text form lacks its `hal1.` style prefix.
    #[error("text form must start with {expected:?}")]
    BadPrefix {
        /// The prefix expected.
        expected: &'static str,
    },
    /// A reserved field or flag is set, or a field has an impossible value.
    #[error("malformed field {field}: {detail}")]
    Malformed {
        /// The field.
        field: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The handle is of another kind than the call expects.
    #[error("expected {} handle, got {} handle", a(expected), a(found))]
    WrongKind {
        /// Kind expected.
        expected: &'static str,
        /// Kind found.
        found: &'static str,
    },
    /// The handle belongs to another backend.
    #[error("handle is for backend `{found}`, not `{expected}`")]
    WrongBackend {
        /// Backend expected.
        expected: String,
        /// Backend found.
        found: String,
    },
    /// The file descriptors that go with the handle are missing or wrong.
    #[error("file descriptors: {0}")]
    Descriptors(String),
}

impl Error {
    /// An [`Error::Io`] from the last OS error, with context.
    pub fn last_os(context: impl Into<String>) -> Self {
        Error::Io {
            context: context.into(),
            source: std::io::Error::last_os_error(),
        }
    }

    /// An [`Error::Io`] wrapping `source`, with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// An [`Error::Io`] from a `nix` errno, with context.
    pub fn errno(context: impl Into<String>, errno: nix::errno::Errno) -> Self {
        Error::Io {
            context: context.into(),
            source: std::io::Error::from_raw_os_error(errno as i32),
        }
    }

    /// An [`Error::Unsupported`].
    pub fn unsupported(
        backend: BackendId,
        operation: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Error::Unsupported {
            backend,
            operation: operation.into(),
            detail: detail.into(),
        }
    }

    /// An [`Error::InvalidArgument`].
    pub fn invalid(what: impl Into<String>) -> Self {
        Error::InvalidArgument { what: what.into() }
    }

    /// A handle whose backend payload is malformed: [`HandleError::Malformed`]
    /// of the field `payload`, `detail` saying how.
    pub fn malformed_payload(detail: impl Into<String>) -> Self {
        HandleError::Malformed {
            field: "payload",
            detail: detail.into(),
        }
        .into()
    }

    /// True for [`Error::Unsupported`]; conformance tests use it for capability gating.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Unsupported { .. })
    }

    /// True for [`Error::Forked`]: the object belongs to the process this
    /// one was forked from.
    pub fn is_forked(&self) -> bool {
        matches!(self, Error::Forked { .. })
    }

    /// True for [`Error::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// A short stable name of the variant, for logs and JSON output.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Error::Unavailable { .. } => "unavailable",
            Error::Unsupported { .. } => "unsupported",
            Error::InvalidHandle(_) => "invalid-handle",
            Error::Misaligned { .. } => "misaligned",
            Error::PermissionDenied { .. } => "permission-denied",
            Error::NotFound { .. } => "not-found",
            Error::AlreadyExists { .. } => "already-exists",
            Error::OutOfMemory { .. } => "out-of-memory",
            Error::Timeout { .. } => "timeout",
            Error::Closed { .. } => "closed",
            Error::Busy { .. } => "busy",
            Error::InvalidArgument { .. } => "invalid-argument",
            Error::Vendor(_) => "vendor",
            Error::Forked { .. } => "forked",
            Error::Io { .. } => "io",
        }
    }
}

/// `word` with its indefinite article: "a memory", "an event".
fn a(word: &str) -> String {
    let vowel = word.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {word}", if vowel { "an" } else { "a" })
}

/// The paths searched that the reason does not name already (a loader's
/// reason names each place it tried, with why it failed): every path is
/// told once.
struct SearchedPaths<'a> {
    reason: &'a str,
    searched: &'a [PathBuf],
}

/// Whether `reason` names `path` as a whole: not as the end of a longer
/// path (`libcuda.so.1` inside `/usr/lib/libcuda.so.1`), nor as a folder of
/// one (`/usr/lib` inside it). (`halctl devices` tells its paths by the
/// same rule.)
fn names(reason: &str, path: &str) -> bool {
    let in_path = |c: char| c == '/' || c.is_alphanumeric() || c == '-' || c == '_';
    reason.match_indices(path).any(|(at, _)| {
        let before = reason[..at].chars().next_back();
        let after = reason[at + path.len()..].chars().next();
        !before.is_some_and(|c| in_path(c) || c == '.') && !after.is_some_and(in_path)
    })
}

impl fmt::Display for SearchedPaths<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut untold = self
            .searched
            .iter()
            .map(|p| p.display().to_string())
            .filter(|p| !names(self.reason, p))
            .peekable();
        if untold.peek().is_none() {
            return Ok(());
        }
        f.write_str(" (searched: ")?;
        for (i, p) in untold.enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(&p)?;
        }
        f.write_str(")")
    }
}

struct OptPid(Option<u32>);

impl fmt::Display for OptPid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(pid) => write!(f, " for pid {pid}"),
            None => Ok(()),
        }
    }
}

/// The error of an import whose device (by UUID) this process does not see.
pub(crate) fn no_device_for(uuid: &[u8; 16], exporter_ordinal: u32, seen: usize) -> Error {
    let uuid: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    Error::NotFound {
        what: format!(
            "a device with UUID {uuid} (device {exporter_ordinal} of the exporter) among the \
             {seen} device(s) of this process: a device hidden from it (CUDA_VISIBLE_DEVICES, \
             ASCEND_RT_VISIBLE_DEVICES) cannot be imported onto; import onto a device it sees \
             with peer access, or make that device visible"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_lists_searched_paths() {
        let e = Error::Unavailable {
            backend: BackendId::Cuda,
            reason: "libcuda.so.1 not found".into(),
            searched: vec!["/usr/lib".into(), "/opt/cuda/lib64".into()],
        };
        let s = e.to_string();
        assert!(s.contains("searched: /usr/lib, /opt/cuda/lib64"), "{s}");
        assert_eq!(e.kind_name(), "unavailable");
    }

    #[test]
    fn unavailable_names_each_searched_path_once() {
        // A loader's reason names every place it tried.
        let e = Error::Unavailable {
            backend: BackendId::Cuda,
            reason: "the CUDA driver library could not be loaded (install the NVIDIA driver); \
                     tried /usr/lib/libcuda.so.1, /opt/cuda/lib64/libcuda.so.1: no such file"
                .into(),
            searched: vec![
                "/usr/lib/libcuda.so.1".into(),
                "/opt/cuda/lib64/libcuda.so.1".into(),
                "/etc/libcuda.so.1".into(),
            ],
        };
        let s = e.to_string();
        for path in ["/usr/lib/libcuda.so.1", "/opt/cuda/lib64/libcuda.so.1"] {
            assert_eq!(s.matches(path).count(), 1, "{path} in {s}");
        }
        assert!(s.ends_with(" (searched: /etc/libcuda.so.1)"), "{s}");
        // A folder of a path the reason names is not that path.
        let folder = Error::Unavailable {
            backend: BackendId::Cuda,
            reason: "tried /usr/lib/libcuda.so.1: no such file".into(),
            searched: vec!["/usr/lib".into()],
        };
        assert!(
            folder.to_string().ends_with("(searched: /usr/lib)"),
            "{folder}"
        );
        let told = Error::Unavailable {
            backend: BackendId::Cuda,
            reason: "/lib/libcuda.so.1: cuInit failed".into(),
            searched: vec!["/lib/libcuda.so.1".into()],
        };
        assert_eq!(
            told.to_string(),
            "backend `cuda` is unavailable: /lib/libcuda.so.1: cuInit failed"
        );
    }

    #[test]
    fn vendor_error_keeps_code_and_name() {
        let e = crate::kit::vendor::acl::RT_NO_PERMISSION
            .error(BackendId::Ascend, "pid not in allow-list");
        let s = e.to_string();
        assert!(
            s.contains("207006") && s.contains("ACL_ERROR_RT_NO_PERMISSION"),
            "{s}"
        );
    }
}
