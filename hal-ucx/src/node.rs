//! A node: this process's presence on the network, one UCX context and
//! worker with a listener and a progress thread. Everything remote is made
//! from a node: exports ([`Node::export`], [`Node::export_notify`]) and
//! imports ([`Node::connect`], [`Node::connect_notify`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hal_core::handle::remote::{RemoteHandle, RemoteKind, RemoteMemoryType};
use hal_core::kit::os::random_id;
use hal_core::{Error, Location, Memory, Notify, Result};

use crate::engine::{unsupported_memory, Engine};
use crate::export::RemoteExported;
use crate::hub::{lock, ExportEntry, Hub, Link};
use crate::memory::RemoteMemory;
use crate::notify::RemoteNotify;
use crate::owner::Owner;
use crate::protocol::AM_ID;

/// How a node is made.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The address to listen on. Port 0 takes a free one.
    pub listen: SocketAddr,
    /// The address other hosts reach this one by, when `listen`'s is not
    /// (`0.0.0.0`, `::`); the handles name it.
    pub advertise: Option<IpAddr>,
    /// How long a connection's handshake, and each remote operation, may
    /// take before it fails with [`Error::Timeout`] (default 30 s).
    pub timeout: Duration,
    /// How long a caller waiting for an answer drives the worker itself
    /// (a signal's wait, a read, a remote subscriber's receive), and the
    /// node's progress thread polls after its last work, before either
    /// sleeps (default zero: sleep at once). While a caller drives, the
    /// progress thread and the proxy threads of offered channels stay
    /// back and the caller's passes do their work, so that a ping-pong
    /// needs no thread to be woken; it pays where the waiting thread may
    /// keep a CPU busy (docs/remote.md, docs/performance.md).
    pub spin: Duration,
}

impl NodeOptions {
    /// Listen on `listen`, with the defaults.
    pub fn new(listen: SocketAddr) -> NodeOptions {
        NodeOptions {
            listen,
            advertise: None,
            timeout: Duration::from_secs(30),
            spin: Duration::ZERO,
        }
    }
}

/// This process's node: a UCX context and worker, a listener, and a
/// progress thread. Cheap to clone; it stops when it and everything made
/// from it are dropped.
///
/// ```no_run
/// use hal_core::{AllocDesc, Device};
/// use hal_cpu_shm::CpuShm;
/// use hal_ucx::{Node, RemoteOptions};
/// # fn main() -> hal_core::Result<()> {
/// let memory = CpuShm::new().host().allocate(&AllocDesc::host(1 << 20))?;
/// let node = Node::bind("192.0.2.1:0".parse().unwrap())?;
/// let export = node.export(&memory, RemoteOptions::default())?;
/// println!("{}", export.text()); // hal1r.… : give it to the other host
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Node {
    pub(crate) owner: Arc<Owner>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("address", &self.address())
            .finish()
    }
}

/// How memory is exported to other hosts.
#[derive(Debug, Clone, Default)]
pub struct RemoteOptions {
    /// Importers may read only: the exporter refuses every write
    /// ([`hal_core::Error::PermissionDenied`] at the importer, which also
    /// refuses before sending anything), and UCX registers the memory
    /// without `UCP_MEM_MAP_PROT_REMOTE_WRITE`.
    pub read_only: bool,
}

impl Node {
    /// A node listening on `listen` (an address of this host that the
    /// others reach; port 0 takes a free port).
    pub fn bind(listen: SocketAddr) -> Result<Node> {
        Node::with_options(NodeOptions::new(listen))
    }

    /// A node made with `opts`.
    pub fn with_options(opts: NodeOptions) -> Result<Node> {
        Node::make(opts, None)
    }

    /// A node made with `opts`, whose listener hands the connections that
    /// do not start as an export's to `acceptor` (set before it listens),
    /// and binds its address even while connections of an ended listener
    /// hold it (a group served again at its address).
    pub(crate) fn make(opts: NodeOptions, acceptor: Option<Arc<dyn Link>>) -> Result<Node> {
        let advertise = match (opts.listen.ip().is_unspecified(), opts.advertise) {
            (_, Some(a)) => a,
            (false, None) => opts.listen.ip(),
            (true, None) => {
                return Err(Error::InvalidArgument {
                    what: format!(
                        "{} listens on every address, and handles must name one: set \
                         NodeOptions::advertise to the address other hosts reach this one by",
                        opts.listen
                    ),
                })
            }
        };
        let engine = Engine::new(acceptor.is_some())?;
        let hub = Arc::new(Hub::new(
            engine,
            opts.timeout,
            opts.spin,
            crate::progress::pass,
        ));
        *lock(&hub.acceptor) = acceptor;
        let cb = hub.callbacks();
        hub.engine.set_am_handler(&cb, AM_ID)?;
        let (listener, bound) = hub.engine.listen(opts.listen, &cb)?;
        *lock(&hub.listener) = listener as usize;
        *lock(&hub.address) = Some(SocketAddr::new(advertise, bound.port()));
        let runner = Arc::clone(&hub);
        let thread = std::thread::Builder::new()
            .name("hal-ucx".into())
            .spawn(move || crate::progress::run(&runner))
            .map_err(|e| Error::Io {
                context: "starting hal-ucx's progress thread".into(),
                source: e,
            });
        let owner = Owner {
            hub,
            thread: Mutex::new(None),
        };
        *lock(&owner.thread) = Some(thread?);
        Ok(Node {
            owner: Arc::new(owner),
        })
    }

    /// The address handles name: where other hosts connect.
    pub fn address(&self) -> SocketAddr {
        lock(&self.owner.hub.address).unwrap_or_else(|| ([0, 0, 0, 0], 0).into())
    }

    /// Which UCX this node runs on (version and library), for messages.
    pub fn ucx(&self) -> String {
        self.owner.hub.engine.describe()
    }

    /// Export `memory` to other hosts: registered with UCX as it is
    /// (`ucp_mem_map`: host memory of any backend; CUDA device memory where
    /// the loaded UCX has CUDA support, otherwise [`Error::Unsupported`]
    /// saying so), and served from and into in place. The memory must
    /// outlive the export (drop the export first: it closes its importers'
    /// connections, then unregisters the memory).
    pub fn export(&self, memory: &dyn Memory, opts: RemoteOptions) -> Result<RemoteExported> {
        let t = match (memory.host_ptr(), memory.location()) {
            (Some(_), _) => RemoteMemoryType::Host,
            (None, Location::Device(_)) => RemoteMemoryType::Cuda,
            (None, other) => {
                return Err(Error::unsupported(
                    crate::ffi::sys::UCX,
                    "export",
                    format!("memory at {other:?} without a host address cannot be registered"),
                ))
            }
        };
        let hub = &self.owner.hub;
        if !hub.engine.supports(t) {
            return Err(unsupported_memory(&hub.engine, t));
        }
        if memory.is_empty() {
            return Err(Error::InvalidArgument {
                what: "an empty range cannot be exported".into(),
            });
        }
        let addr = match memory.host_ptr() {
            Some(p) => p as u64,
            None => memory.addr(),
        };
        let writable = !opts.read_only && !memory.is_read_only();
        let len = memory.len();
        let memh =
            hub.on_thread(move |h| h.engine.map(addr, len, t, writable).map(|m| m as usize))??;
        let handle = self.register(RemoteKind::Memory, addr, memory.len(), !writable, t, None);
        Ok(RemoteExported::new(
            Arc::clone(&self.owner),
            handle,
            Some(memh),
        ))
    }

    /// Export `notify` to other hosts: a remote [`RemoteNotify::signal`]
    /// signals it here.
    pub fn export_notify(&self, notify: Arc<dyn Notify>) -> Result<RemoteExported> {
        let handle = self.register(
            RemoteKind::Notify,
            0,
            0,
            false,
            RemoteMemoryType::Host,
            Some(notify),
        );
        Ok(RemoteExported::new(Arc::clone(&self.owner), handle, None))
    }

    fn register(
        &self,
        kind: RemoteKind,
        base: u64,
        size: u64,
        read_only: bool,
        memory_type: RemoteMemoryType,
        notify: Option<Arc<dyn Notify>>,
    ) -> RemoteHandle {
        let secret = random_id();
        let mut t = lock(&self.owner.hub.tables);
        t.next_export += 1;
        let export_id = t.next_export;
        t.exports.insert(
            export_id,
            ExportEntry {
                kind,
                secret,
                base,
                size,
                read_only,
                mem: crate::engine::mem_type(memory_type),
                importers: 0,
                signals: 0,
                notify,
            },
        );
        RemoteHandle {
            kind,
            listener: self.address(),
            export_id,
            base,
            size,
            read_only,
            memory_type,
            secret,
        }
    }

    /// Connect to the memory export `text` names (a `hal1r.` text from
    /// another host): the exporter and this node prove to each other that
    /// they hold the handle's secret, and the exporter grants access.
    /// [`Error::PermissionDenied`] when the secrets do not match.
    pub fn connect(&self, text: &str) -> Result<RemoteMemory> {
        let handle = RemoteHandle::from_text(text)?;
        RemoteMemory::connect(Arc::clone(&self.owner), handle)
    }

    /// What every object made from this node holds.
    pub(crate) fn owner(&self) -> &Arc<Owner> {
        &self.owner
    }

    /// Offer the channel `name` of this host (its publisher made it with
    /// `hal_core::channel::Publisher::create`, in any process of this
    /// host and user) to subscribers on other hosts: the text of the
    /// [`ChannelOffer`](crate::ChannelOffer) is what a
    /// [`RemoteSubscriber::connect`](crate::RemoteSubscriber::connect)
    /// takes. Each remote subscriber is a subscriber of the channel here,
    /// on `device` (where the channel's slots are imported and sent from),
    /// so it counts against the channel's
    /// [`MAX_SUBSCRIBERS`](hal_core::channel::MAX_SUBSCRIBERS). Dropping
    /// the offer ends its remote subscriptions.
    pub fn offer_channel(
        &self,
        device: Arc<dyn hal_core::dynamic::DynDevice>,
        name: &str,
        options: &crate::RemoteChannelOptions,
    ) -> Result<crate::ChannelOffer> {
        crate::ChannelOffer::new(&self.owner, self.address(), device, name, options)
    }

    /// Connect to the notify export `text` names.
    pub fn connect_notify(&self, text: &str) -> Result<RemoteNotify> {
        let handle = RemoteHandle::from_text(text)?;
        RemoteNotify::connect(Arc::clone(&self.owner), handle)
    }
}
