//! The options of an export, from their Python forms.

use hal::objects::pids_importers;
use hal::{ExportOptions, Importers};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::errors::{invalid, OrRaise};

/// Export options from `importers` (`"anyone"`, the default; `"same-user"`
/// for any process of this user, checked by the exporter's broker;
/// `"default"` for the backend's default; or a list of process ids) and
/// `read_only`.
pub(crate) fn export_options(
    importers: Option<&Bound<'_, PyAny>>,
    read_only: bool,
) -> PyResult<ExportOptions> {
    let Some(importers) = importers else {
        return Ok(ExportOptions {
            importers: Importers::Anyone,
            read_only,
            ..Default::default()
        });
    };
    let importers = if let Ok(word) = importers.downcast::<PyString>() {
        match word.to_str()? {
            "anyone" => Importers::Anyone,
            "same-user" => Importers::SameUser,
            "default" => Importers::BackendDefault,
            other => {
                return Err(invalid(format!(
                    "importers={other:?}: use \"anyone\", \"same-user\", \"default\" or a list \
                     of process ids"
                )))
            }
        }
    } else if importers.is_none() {
        Importers::Anyone
    } else {
        let pids: Vec<u32> = importers.extract().map_err(|_| {
            invalid("importers: use \"anyone\", \"default\" or a list of process ids (ints)")
        })?;
        pids_importers("the number of importers", pids.len(), || pids).or_raise()?
    };
    Ok(ExportOptions {
        importers,
        read_only,
        ..Default::default()
    })
}
