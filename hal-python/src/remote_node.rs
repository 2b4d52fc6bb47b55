//! `hal.remote.Node`: this process on the network, one UCX context and
//! worker with a listener and a progress thread. Exports and connections
//! are made from a node.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hal::dynamic::DynDevice;
use hal::remote::group::parse_secret;
use hal::remote::{
    NodeOptions, RemoteChannelOptions, RemoteOptions, RemoteSubscribeOptions, RemoteSubscriber,
};
use pyo3::prelude::*;

use crate::device::Device;
use crate::errors::{invalid, OrRaise};
use crate::memory::Memory;
use crate::notify::Notify;
use crate::remote_export::RemoteExport;
use crate::remote_memory::RemoteMemory;
use crate::remote_notify::RemoteNotify;
use crate::remote_offer::ChannelOffer;
use crate::remote_subscriber::{Held, Subscriber};
use crate::timeout::duration;

/// This process on the network: `Node("192.0.2.1:0")` listens on an
/// address of this host that other hosts reach (port 0 takes a free one),
/// which the handles of its exports name. With `"0.0.0.0:PORT"` (every
/// address), `advertise` is the address the handles name. `timeout`:
/// seconds a connection's handshake, and each remote operation, may take
/// (None: 30). UCX (`libucp.so.0`, or the library `HAL_UCX_LIBRARY`
/// names) is loaded now: `hal.UnavailableError` without it.
#[pyclass(module = "hal.remote", frozen)]
pub struct Node {
    /// Always Some but while dropped.
    node: Option<hal::remote::Node>,
}

impl Drop for Node {
    fn drop(&mut self) {
        // The last holder of a node stops its progress thread and waits
        // for its connections to close.
        crate::remote_wait::drop_released(self.node.take());
    }
}

impl Node {
    /// A handle of `node` (another holder of the same node).
    pub(crate) fn of(node: hal::remote::Node) -> Node {
        Node { node: Some(node) }
    }

    fn node(&self) -> PyResult<&hal::remote::Node> {
        self.node.as_ref().ok_or_else(|| {
            crate::errors::to_py(hal::Error::Closed {
                what: "this Node was dropped".into(),
            })
        })
    }
}

/// `text` as an address, or an `InvalidArgumentError` naming `argument`.
fn parse<T: std::str::FromStr>(text: &str, argument: &str, form: &str) -> PyResult<T>
where
    T::Err: std::fmt::Display,
{
    text.trim()
        .parse()
        .map_err(|e| invalid(format!("{argument}={text:?} is no {form} ({e})")))
}

#[pymethods]
impl Node {
    #[new]
    #[pyo3(signature = (addr, advertise=None, timeout=None, spin=None))]
    fn new(
        py: Python<'_>,
        addr: &str,
        advertise: Option<&str>,
        timeout: Option<f64>,
        spin: Option<f64>,
    ) -> PyResult<Node> {
        let listen: SocketAddr = parse(addr, "addr", "IP:PORT address, such as \"192.0.2.1:0\"")?;
        let advertise: Option<IpAddr> = advertise
            .map(|a| parse(a, "advertise", "IP address"))
            .transpose()?;
        if listen.ip().is_unspecified() && advertise.is_none() {
            return Err(invalid(format!(
                "Node({addr:?}) listens on every address, and the handles must name one other \
                 hosts reach: pass advertise=\"<this host's address on their network>\", or \
                 listen on that address"
            )));
        }
        let mut opts = NodeOptions::new(listen);
        opts.advertise = advertise;
        if let Some(t) = duration(timeout)? {
            opts.timeout = t;
        }
        match spin {
            None => {}
            Some(s) if s.is_finite() && s >= 0.0 => opts.spin = Duration::from_secs_f64(s),
            Some(s) => {
                return Err(invalid(format!(
                    "spin={s}: a number of seconds, 0 or more (a waiting call drives the \
                     worker that long before it sleeps)"
                )))
            }
        }
        let node = py
            .allow_threads(|| hal::remote::Node::with_options(opts))
            .or_raise()?;
        Ok(Node { node: Some(node) })
    }

    /// The address the node's handles name, "IP:PORT" (with the port taken
    /// when it was bound with port 0).
    #[getter]
    fn address(&self) -> PyResult<String> {
        Ok(self.node()?.address().to_string())
    }

    /// Which UCX the node runs on: its version and library.
    #[getter]
    fn ucx(&self) -> PyResult<String> {
        Ok(self.node()?.ucx())
    }

    /// Export `memory` (a `hal.Memory`) to other hosts: host memory of any
    /// backend, or device memory where the loaded UCX was built with CUDA.
    /// `read_only`: importers may only read. The memory stays alive while
    /// the export does; the export ends with the returned object.
    #[pyo3(signature = (memory, read_only=false))]
    fn export(
        &self,
        py: Python<'_>,
        memory: PyRef<'_, Memory>,
        read_only: bool,
    ) -> PyResult<RemoteExport> {
        let node = self.node()?;
        let memory = Arc::clone(&memory.inner);
        let opts = RemoteOptions { read_only };
        let exported = py
            .allow_threads(|| node.export(&*memory, opts))
            .or_raise()?;
        Ok(RemoteExport::new(exported, Some(memory)))
    }

    /// Export `notify` (a `hal.Notify`) to other hosts: a remote
    /// `RemoteNotify.signal()` signals it here (its `wait()` wakes).
    fn export_notify(&self, notify: PyRef<'_, Notify>) -> PyResult<RemoteExport> {
        let exported = self
            .node()?
            .export_notify(notify.inner.clone())
            .or_raise()?;
        Ok(RemoteExport::new(exported, None))
    }

    /// Connect to the memory export `text` names (`hal1r.` ..., the other
    /// host's `RemoteExport.text`): both sides prove they hold the
    /// handle's secret. A wrong secret is `hal.PermissionDeniedError`; an
    /// export that ended `hal.NotFoundError`; malformed text, or a
    /// notify's, `hal.InvalidHandleError`.
    fn connect(&self, py: Python<'_>, text: &str) -> PyResult<RemoteMemory> {
        let node = self.node()?;
        let remote = py.allow_threads(|| node.connect(text)).or_raise()?;
        Ok(RemoteMemory::new(remote))
    }

    /// Connect to the notify export `text` names.
    fn connect_notify(&self, py: Python<'_>, text: &str) -> PyResult<RemoteNotify> {
        let node = self.node()?;
        let notify = py.allow_threads(|| node.connect_notify(text)).or_raise()?;
        Ok(RemoteNotify::new(notify))
    }

    /// Offer the channel `name` of this host (a `Device.publisher` of any
    /// process of this host and user) to subscribers on other hosts: the
    /// offer's `text` is what their `Node.subscribe` takes. Each remote
    /// subscriber is a subscriber of the channel here, on a device of
    /// `device`'s backend and ordinal. `secret`: 32 hex digits (None: a
    /// fresh one); `timeout`: seconds a subscriber's handshake, and the
    /// wait for its slots, may take (None: 30). The offer is withdrawn
    /// with the returned object.
    #[pyo3(signature = (device, name, secret=None, timeout=None))]
    fn offer_channel(
        &self,
        py: Python<'_>,
        device: PyRef<'_, Device>,
        name: &str,
        secret: Option<&str>,
        timeout: Option<f64>,
    ) -> PyResult<ChannelOffer> {
        let node = self.node()?;
        let mut options = RemoteChannelOptions::default();
        if let Some(s) = secret {
            options = options.secret(parse_secret(s, "secret").or_raise()?);
        }
        if let Some(t) = duration(timeout)? {
            options = options.timeout(t);
        }
        let dev = Arc::clone(&device.inner);
        let offer = py
            .allow_threads(|| {
                // The offer holds a device of its own, of the same backend
                // and ordinal, as long as it lives.
                let own: Arc<dyn DynDevice> =
                    Arc::from(dev.backend.open(dev.device.info().ordinal)?);
                node.offer_channel(own, name, &options)
            })
            .or_raise()?;
        Ok(ChannelOffer::new(offer))
    }

    /// Subscribe to the channel offer `text` names (`hal1r.` ..., the
    /// publisher's host's `ChannelOffer.text`); the subscriber's slots are
    /// allocated on `device` (host memory). `slots`: the most samples it
    /// holds at once (0: as many as the channel has). In broadcast mode it
    /// receives the samples published from now on. A wrong secret is
    /// `hal.PermissionDeniedError`; a withdrawn offer `hal.NotFoundError`;
    /// malformed text `hal.InvalidHandleError`; another handle's text
    /// `hal.InvalidArgumentError`.
    #[pyo3(signature = (device, text, slots=0))]
    fn subscribe(
        &self,
        py: Python<'_>,
        device: PyRef<'_, Device>,
        text: &str,
        slots: usize,
    ) -> PyResult<Subscriber> {
        let node = self.node()?;
        let dev = Arc::clone(&device.inner);
        let options = RemoteSubscribeOptions::default().slots(slots);
        let subscriber = py
            .allow_threads(|| RemoteSubscriber::connect(node, &*dev.device, text, &options))
            .or_raise()?;
        Ok(Subscriber::new(Held::new(subscriber, dev)))
    }

    fn __repr__(&self) -> String {
        match self.node() {
            Ok(n) => format!("<hal.remote.Node at {}>", n.address()),
            Err(_) => "<hal.remote.Node (dropped)>".into(),
        }
    }
}
