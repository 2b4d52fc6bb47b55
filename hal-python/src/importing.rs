//! `hal.import_handle`: any handle text, imported as what it names.

use hal::dlpack::TENSOR_TEXT_PREFIX;
use hal::objects::import_sync;
use hal::{Handle, HandleKind, ImportOptions};
use pyo3::prelude::*;

use crate::errors::{handle_error, to_py, OrRaise};
use crate::event::Event;
use crate::memory::Memory;
use crate::memory_obj::import_memory;
use crate::notify::Notify;
use crate::tensor::open_tensor;

/// Import what another process exported, from its handle text: a `Memory`,
/// `Notify` or `Event` by the handle's kind (a tensor handle, `hal1t.`
/// ..., gives a `Tensor` as `hal.open_tensor` does). The backend and the
/// device come from the handle (devices by UUID). A process not on the
/// export's pid list gets `PermissionDeniedError`; malformed text
/// `InvalidHandleError`. `read_only`: writes through the memory are
/// refused.
#[pyfunction]
#[pyo3(signature = (text, read_only=false))]
pub(crate) fn import_handle(py: Python<'_>, text: &str, read_only: bool) -> PyResult<PyObject> {
    let text = text.trim();
    if text.starts_with(TENSOR_TEXT_PREFIX) {
        return Ok(open_tensor(py, text, read_only)?
            .into_pyobject(py)?
            .into_any()
            .unbind());
    }
    let handle = Handle::from_text(text).map_err(handle_error)?;
    match handle.kind {
        HandleKind::Memory => {
            let memory = py
                .allow_threads(|| import_memory(handle, read_only))
                .or_raise()?;
            Ok(Memory::new(memory).into_pyobject(py)?.into_any().unbind())
        }
        HandleKind::Notify => {
            let notify = py
                .allow_threads(|| {
                    import_sync(handle, |d, shared| {
                        d.device.import_notify(shared, &ImportOptions::default())
                    })
                })
                .or_raise()?;
            Ok(Notify::new(notify).into_pyobject(py)?.into_any().unbind())
        }
        HandleKind::Event => {
            let event = py
                .allow_threads(|| {
                    import_sync(handle, |d, shared| {
                        d.device.import_event(shared, &ImportOptions::default())
                    })
                })
                .or_raise()?;
            Ok(Event::new(event).into_pyobject(py)?.into_any().unbind())
        }
        other => Err(to_py(hal::Error::unsupported(
            handle.backend,
            "import_handle",
            format!("a {other:?} handle: Python imports memory, notify, event and tensor handles"),
        ))),
    }
}
