//! The bounds the encoder and the decoder both hold each field to.

use crate::error::HandleError;
use crate::handle::{HandleFlags, PidKind};

pub(super) fn check_flags(bits: u32) -> Result<(), HandleError> {
    let unknown = bits & !HandleFlags::KNOWN.0;
    if unknown != 0 {
        return Err(HandleError::Malformed {
            field: "flags",
            detail: format!(
                "unknown flag bits {unknown:#x} (this build knows {:#x})",
                HandleFlags::KNOWN.0
            ),
        });
    }
    Ok(())
}

/// `SAME_USER` is a class of importers of its own: never with
/// `ANY_IMPORTER`, an allow-list, or vendor pids.
pub(super) fn check_importer_class(
    bits: u32,
    pids: usize,
    pid_kind: PidKind,
) -> Result<(), HandleError> {
    let flags = HandleFlags(bits);
    if !flags.contains(HandleFlags::SAME_USER) {
        return Ok(());
    }
    let with = if flags.contains(HandleFlags::ANY_IMPORTER) {
        "ANY_IMPORTER"
    } else if pids > 0 {
        "an allow-list of pids"
    } else if pid_kind != PidKind::Os {
        "vendor pids"
    } else {
        return Ok(());
    };
    Err(HandleError::Malformed {
        field: "flags",
        detail: format!("SAME_USER together with {with}"),
    })
}

pub(super) fn check_range(offset: u64, size: u64) -> Result<(), HandleError> {
    match offset.checked_add(size) {
        Some(_) => Ok(()),
        None => Err(HandleError::LengthOverflow {
            field: "offset + size",
        }),
    }
}

pub(super) fn check_fd_count(count: u8) -> Result<(), HandleError> {
    if count == 0 {
        return Err(HandleError::Malformed {
            field: "fd_source",
            detail: "a descriptor count of 0 (a handle without descriptors uses FdSource::None)"
                .into(),
        });
    }
    Ok(())
}

pub(super) fn check_socket_name(name: &[u8]) -> Result<(), HandleError> {
    if name.is_empty() {
        return Err(HandleError::Malformed {
            field: "socket_name",
            detail: "empty broker socket name".into(),
        });
    }
    if let Some(pos) = name.iter().position(|b| !(0x20..=0x7e).contains(b)) {
        let byte = name.get(pos).copied().unwrap_or_default();
        return Err(HandleError::Malformed {
            field: "socket_name",
            detail: format!("byte {byte:#04x} at {pos} is not printable ASCII"),
        });
    }
    Ok(())
}
