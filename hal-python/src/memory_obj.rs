//! The memory object behind a Python `Memory` (the shared
//! [`hal::objects::MemoryObj`]), with what Python adds to it: the handle
//! texts of its exports given out, to warn when one outlives the memory.

use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyString;

use hal::Handle;

/// The handle texts of a memory's exports given out to Python, to tell
/// whether one is still held when the memory (and so the export) goes.
#[derive(Default)]
pub(crate) struct GivenTexts(Mutex<Vec<Py<PyString>>>);

/// A memory object of the Python package.
pub(crate) type MemoryObj = hal::objects::MemoryObj<GivenTexts>;

/// Why writes through a memory imported read-only are refused, in Python's
/// words.
const READ_ONLY_IMPORT: &str = "import_handle(..., read_only=True)";

/// Import the memory handle `handle` on its backend and device.
pub(crate) fn import_memory(handle: Handle, read_only: bool) -> hal::Result<MemoryObj> {
    hal::objects::import_memory(handle, read_only.then_some(READ_ONLY_IMPORT))
}

/// What Python does with the handle texts of a memory's exports.
pub(crate) trait TextsGiven {
    /// Remember `text`, the handle text of an export of this memory given
    /// out to Python (see [`TextsGiven::warn_if_texts_outlive`]).
    fn gave_out(&self, text: &Bound<'_, PyString>);

    /// Called as the last Python object over this memory (`holder`: a
    /// `Memory`, `Shared` or `Tensor`) goes: a `ResourceWarning`, as an
    /// unclosed file gives, when a handle text given out is still held
    /// elsewhere, since the exports end with the memory and the text then
    /// names nothing another process can import (`text =
    /// d.allocate(n).export()`, `str(hal.share(a))`). `own`: the text the
    /// holder itself keeps (a `Shared`'s), whose reference is not someone
    /// else's.
    fn warn_if_texts_outlive(
        self: &Arc<Self>,
        py: Python<'_>,
        holder: &str,
        own: Option<&Py<PyString>>,
    );
}

impl TextsGiven for MemoryObj {
    fn gave_out(&self, text: &Bound<'_, PyString>) {
        let mut texts = self.door.0.lock().unwrap_or_else(|e| e.into_inner());
        texts.push(text.clone().unbind());
    }

    fn warn_if_texts_outlive(
        self: &Arc<Self>,
        py: Python<'_>,
        holder: &str,
        own: Option<&Py<PyString>>,
    ) {
        // Other holders (another Python object, a DLPack capsule a consumer
        // took) keep the memory and its exports alive.
        if Arc::strong_count(self) > 1 {
            return;
        }
        let texts = std::mem::take(&mut *self.door.0.lock().unwrap_or_else(|e| e.into_inner()));
        // The list holds one reference (and the holder one of its own);
        // anything more is someone's.
        let kept = |t: &Py<PyString>| 1 + isize::from(own.is_some_and(|o| o.is(t)));
        let Some(held) = texts.iter().find(|t| t.get_refcnt(py) > kept(t)) else {
            return;
        };
        let text = held.bind(py).to_string();
        drop(texts);
        // Collection can happen with an exception pending: keep it.
        let pending = PyErr::take(py);
        warn_resource(py, holder, &text);
        if let Some(p) = pending {
            p.restore(py);
        }
    }
}

/// The `ResourceWarning` of [`TextsGiven::warn_if_texts_outlive`], unless the
/// interpreter is exiting (the objects then go in no useful order).
fn warn_resource(py: Python<'_>, holder: &str, text: &str) {
    let finalizing = py
        .import("sys")
        .and_then(|sys| sys.call_method0("is_finalizing"))
        .and_then(|f| f.is_truthy())
        .unwrap_or(true);
    if finalizing {
        return;
    }
    let shown = match text.char_indices().nth(24) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    };
    let message = format!(
        "a hal.{holder} was collected while its handle text {shown} is still held: the export \
         ended with the memory, so that text no longer imports; keep the {holder} alive while \
         other processes import it"
    );
    let message = std::ffi::CString::new(message).unwrap_or_default();
    let category = py.get_type::<pyo3::exceptions::PyResourceWarning>();
    if let Err(e) = PyErr::warn(py, category.as_any(), &message, 1) {
        // An error filter turned the warning into an exception; a finalizer
        // cannot raise, so it is reported as unraisable.
        e.write_unraisable(py, None);
    }
}
