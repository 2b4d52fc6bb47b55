//! `hal.remote.ChannelOffer`: a channel of this host offered to
//! subscribers on other hosts (`Node.offer_channel`), its handle text.

use hal::remote::ChannelOffer as InnerOffer;
use pyo3::prelude::*;

use crate::remote_wait::drop_released;

/// A channel offered to other hosts (`Node.offer_channel`): `text` is what
/// another host's `Node.subscribe` takes. The offer is withdrawn when this
/// object goes (or `close()`): its remote subscribers' receives raise
/// `hal.ClosedError` once they received what reached them, and the slots
/// they held come back to the channel.
#[pyclass(module = "hal.remote", frozen)]
pub struct ChannelOffer {
    /// None once closed.
    inner: std::sync::Mutex<Option<InnerOffer>>,
    text: String,
    name: String,
}

impl ChannelOffer {
    pub(crate) fn new(offer: InnerOffer) -> ChannelOffer {
        ChannelOffer {
            text: offer.text().to_string(),
            name: offer.name().to_string(),
            inner: std::sync::Mutex::new(Some(offer)),
        }
    }
}

impl Drop for ChannelOffer {
    fn drop(&mut self) {
        // Withdrawing closes the remote subscribers' connections: not
        // under the GIL.
        drop_released(
            self.inner
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .take(),
        );
    }
}

#[pymethods]
impl ChannelOffer {
    /// The handle text (`hal1r.` ...) for the other hosts'
    /// `Node.subscribe`. It holds the offer's secret: give it only to the
    /// processes meant to subscribe.
    #[getter]
    fn text(&self) -> &str {
        &self.text
    }

    /// The channel's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// How many remote subscribers proved the secret and are connected
    /// now (0 once closed).
    #[getter]
    fn subscribers(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, InnerOffer::subscribers)
    }

    /// Withdraw the offer now (a second call does nothing).
    fn close(&self) {
        drop_released(self.inner.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.close();
    }

    fn __repr__(&self) -> String {
        format!("<hal.remote.ChannelOffer of {:?}>", self.name)
    }
}
