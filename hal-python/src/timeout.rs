//! Timeouts from Python: seconds as a float, None for forever.

use std::time::Duration;

use pyo3::prelude::*;

use crate::errors::invalid;

/// A timeout in seconds (None: forever) as a duration.
pub(crate) fn duration(seconds: Option<f64>) -> PyResult<Option<Duration>> {
    match seconds {
        None => Ok(None),
        Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(invalid(format!(
            "timeout={s}: a number of seconds, 0 or more (None waits forever)"
        ))),
    }
}
