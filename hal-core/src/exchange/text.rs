//! Handles as strings: command lines, environment variables, messages.

use std::ffi::OsStr;
use std::process::Command;

use crate::error::{Error, HandleError, Result};
use crate::handle::Handle;

/// The text form of `handle` ([`Handle::to_text`]): `hal1.` and URL-safe
/// base64, safe in files, environment variables and command lines.
pub fn encode(handle: &Handle) -> String {
    handle.to_text()
}

/// Decode a text form ([`Handle::from_text`]), ignoring whitespace around it
/// (the newline of a file or of `echo`).
pub fn decode(text: &str) -> Result<Handle> {
    Ok(Handle::from_text(text.trim())?)
}

/// Set the environment variable `name` of a child `command` to the text of
/// `handle`. (This process's own environment is left alone: changing it
/// while other threads may read it is unsound.)
pub fn to_env<'c>(command: &'c mut Command, name: &str, handle: &Handle) -> &'c mut Command {
    command.env(name, encode(handle))
}

/// The handle in the environment variable `name` of this process:
/// [`Error::NotFound`] when it is not set, the decoder's error when it does
/// not hold a handle.
pub fn from_env(name: &str) -> Result<Handle> {
    from_value(name, std::env::var_os(name).as_deref())
}

/// The handle in `value`, the value of the environment variable `name`.
fn from_value(name: &str, value: Option<&OsStr>) -> Result<Handle> {
    match value {
        None => Err(Error::NotFound {
            what: format!("environment variable {name} (it should hold a handle's text)"),
        }),
        Some(v) => match v.to_str() {
            Some(text) => decode(text),
            None => Err(HandleError::InvalidText {
                position: first_non_utf8(v),
                ch: char::REPLACEMENT_CHARACTER,
            }
            .into()),
        },
    }
}

fn first_non_utf8(v: &OsStr) -> usize {
    use std::os::unix::ffi::OsStrExt;
    match std::str::from_utf8(v.as_bytes()) {
        Ok(_) => 0,
        Err(e) => e.valid_up_to(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::{FdSource, HandleFlags, HandleKind};

    #[test]
    fn strings_and_environment() {
        let h = Handle {
            kind: HandleKind::Memory,
            backend: crate::BackendId::CpuShm,
            device: 0,
            device_uuid: [0; 16],
            location: crate::Location::Host,
            size: 4096,
            offset: 0,
            address: 0,
            creator_pid: 1,
            creator_start: 1,
            creator_pid_ns: 4026531836,
            object_id: [1; 16],
            flags: HandleFlags::default(),
            pid_kind: crate::PidKind::Os,
            allowed_pids: vec![2, 3],
            fds: FdSource::None,
            payload: Vec::new(),
        };
        assert_eq!(decode(&format!(" {}\n", encode(&h))).unwrap(), h);
        assert!(decode("hal1.!!").is_err());
        let mut cmd = Command::new("true");
        to_env(&mut cmd, "HAL_TEXT_TEST", &h);
        let value = cmd
            .get_envs()
            .find(|(k, _)| *k == "HAL_TEXT_TEST")
            .and_then(|(_, v)| v)
            .unwrap();
        assert_eq!(decode(value.to_str().unwrap()).unwrap(), h);
        let missing = format!("HAL_TEXT_TEST_MISSING_{}", crate::kit::os::pid());
        assert!(matches!(from_env(&missing), Err(Error::NotFound { .. })));
    }

    #[test]
    fn a_value_that_is_not_utf8_is_refused_where_it_stops_being_text() {
        use std::os::unix::ffi::OsStrExt;
        let value = OsStr::from_bytes(b"hal1.ab\xffcd");
        match from_value("HAL_TEXT_TEST", Some(value)) {
            Err(Error::InvalidHandle(HandleError::InvalidText { position, .. })) => {
                assert_eq!(position, 7)
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            from_value("HAL_TEXT_TEST", None),
            Err(Error::NotFound { .. })
        ));
    }
}
