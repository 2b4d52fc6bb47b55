//! One UCP context and one worker: the calls hal makes on them, each in
//! one place with its parameters. The worker is made for many threads
//! (`UCS_THREAD_MODE_MULTI`): callers issue operations from their own
//! threads, and the node's progress thread drives it.

use std::ffi::c_void;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::Arc;

use hal_core::handle::remote::RemoteMemoryType;
use hal_core::{Error, Result};

use crate::completion::{self, Completion, Kind};
use crate::ffi::bindings::*;
use crate::ffi::status::check;
use crate::ffi::sys::{self, ucx_id, Ucx};

/// A socket address as the C API takes it.
pub(crate) struct RawAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawAddr {
    pub(crate) fn new(addr: SocketAddr) -> RawAddr {
        // SAFETY: all-zero is a valid `sockaddr_storage`.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: `sockaddr_storage` is larger than and aligned for
                // every socket address type.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
                std::mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above.
                unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
                std::mem::size_of::<libc::sockaddr_in6>()
            }
        };
        RawAddr {
            storage,
            len: len as libc::socklen_t,
        }
    }

    fn as_ucs(&self) -> ucs_sock_addr_t {
        ucs_sock_addr_t {
            addr: &self.storage as *const _ as *const sockaddr,
            addrlen: self.len,
        }
    }
}

/// The address a `sockaddr_storage` UCX filled holds, if IPv4 or IPv6.
pub(crate) fn from_storage(s: &sockaddr_storage) -> Option<SocketAddr> {
    let p = s as *const sockaddr_storage;
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a `sockaddr_in`,
            // which it is large enough and aligned for.
            let sin = unsafe { std::ptr::read(p as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, a `sockaddr_in6`.
            let sin6 = unsafe { std::ptr::read(p as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::new(
                IpAddr::V6(ip),
                u16::from_be(sin6.sin6_port),
            ))
        }
        _ => None,
    }
}

/// The callbacks the worker calls, and the argument they get.
pub(crate) struct Callbacks {
    pub(crate) conn: ucp_listener_conn_callback_t,
    pub(crate) am: ucp_am_recv_callback_t,
    pub(crate) err: ucp_err_handler_cb_t,
    pub(crate) arg: *mut c_void,
}

/// A context and its worker.
pub(crate) struct Engine {
    pub(crate) ucx: &'static Ucx,
    context: ucp_context_h,
    pub(crate) worker: ucp_worker_h,
    /// The worker's event descriptor (the worker owns it).
    pub(crate) efd: RawFd,
    /// The memory types the loaded UCX can register.
    memory_types: u64,
}

// SAFETY: the worker is made with `UCS_THREAD_MODE_MULTI`, and the context
// is shared by it alone: UCX serialises calls on them from any thread.
unsafe impl Send for Engine {}
// SAFETY: as above.
unsafe impl Sync for Engine {}

impl Engine {
    /// A context (RMA, active messages, wake-up) and its worker, from the
    /// `UCX_*` environment; with `reuse_address`, its listener binds an
    /// address that connections of an ended listener still hold
    /// (`SO_REUSEADDR`, UCX's `CM_REUSEADDR`): a listener that is still
    /// there keeps its address all the same.
    pub(crate) fn new(reuse_address: bool) -> Result<Engine> {
        let ucx = sys::ucx()?;
        let mut config: *mut ucp_config_t = std::ptr::null_mut();
        // SAFETY: NULL prefix and file are allowed: the UCX_ environment
        // is read; `config` receives the configuration.
        let st =
            unsafe { (ucx.ucp_config_read()?)(std::ptr::null(), std::ptr::null(), &mut config) };
        check(ucx, st, "ucp_config_read", "reading the UCX_ environment")?;
        let modified = if reuse_address {
            let (name, value) = (c"CM_REUSEADDR", c"y");
            match ucx.ucp_config_modify() {
                // SAFETY: `config` is the live configuration read above;
                // the name and the value are NUL-terminated strings.
                Ok(f) => check(
                    ucx,
                    unsafe { f(config, name.as_ptr(), value.as_ptr()) },
                    "ucp_config_modify",
                    "letting the listener reuse its address (CM_REUSEADDR)",
                ),
                Err(e) => Err(e),
            }
        } else {
            Ok(())
        };
        if let Err(e) = modified {
            if let Ok(release) = ucx.ucp_config_release() {
                // SAFETY: `config` came from ucp_config_read and is released once.
                unsafe { release(config) };
            }
            return Err(e);
        }
        // SAFETY: all-zero is a valid `ucp_params_t` (empty mask).
        let mut params: ucp_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = u64::from(UCP_PARAM_FIELD_FEATURES);
        // No UCP_FEATURE_RMA: every read and write is a message the exporter
        // checks (see the crate's documentation for why).
        params.features = u64::from(UCP_FEATURE_AM | UCP_FEATURE_WAKEUP);
        let mut context: ucp_context_h = std::ptr::null_mut();
        let init = ucx.ucp_init_version();
        let st = match init {
            // SAFETY: `params` and `config` are valid; `context` receives the
            // context. The API version is the header's (what ucp_init passes).
            Ok(f) => unsafe { f(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &mut context) },
            Err(_) => UCS_ERR_UNSUPPORTED,
        };
        if let Ok(release) = ucx.ucp_config_release() {
            // SAFETY: `config` came from ucp_config_read and is released once.
            unsafe { release(config) };
        }
        init?;
        check(ucx, st, "ucp_init", "making a UCX context")?;
        let mut engine = Engine {
            ucx,
            context,
            worker: std::ptr::null_mut(),
            efd: -1,
            memory_types: 1 << UCS_MEMORY_TYPE_HOST,
        };
        engine.memory_types = engine.query_memory_types()?;
        // SAFETY: all-zero is a valid `ucp_worker_params_t` (empty mask).
        let mut wp: ucp_worker_params_t = unsafe { std::mem::zeroed() };
        wp.field_mask = u64::from(UCP_WORKER_PARAM_FIELD_THREAD_MODE);
        wp.thread_mode = UCS_THREAD_MODE_MULTI;
        let mut worker: ucp_worker_h = std::ptr::null_mut();
        // SAFETY: the context is live; `worker` receives the worker.
        let st = unsafe { (ucx.ucp_worker_create()?)(context, &wp, &mut worker) };
        check(ucx, st, "ucp_worker_create", "making a UCX worker")?;
        engine.worker = worker;
        let mut efd: i32 = -1;
        // SAFETY: the worker is live and has the wake-up feature.
        let st = unsafe { (ucx.ucp_worker_get_efd()?)(worker, &mut efd) };
        check(
            ucx,
            st,
            "ucp_worker_get_efd",
            "the worker's event descriptor",
        )?;
        engine.efd = efd;
        Ok(engine)
    }

    fn query_memory_types(&self) -> Result<u64> {
        // SAFETY: all-zero is a valid `ucp_context_attr_t`.
        let mut attr: ucp_context_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = u64::from(UCP_ATTR_FIELD_MEMORY_TYPES);
        // SAFETY: the context is live; the call fills `attr`.
        let st = unsafe { (self.ucx.ucp_context_query()?)(self.context, &mut attr) };
        check(
            self.ucx,
            st,
            "ucp_context_query",
            "the memory types UCX supports",
        )?;
        Ok(attr.memory_types)
    }

    /// True when UCX can register memory of `t`.
    pub(crate) fn supports(&self, t: RemoteMemoryType) -> bool {
        self.memory_types & (1 << mem_type(t)) != 0
    }

    /// Install the active-message handler of hal's messages.
    pub(crate) fn set_am_handler(&self, cb: &Callbacks, id: u32) -> Result<()> {
        // SAFETY: all-zero is a valid `ucp_am_handler_param_t`.
        let mut p: ucp_am_handler_param_t = unsafe { std::mem::zeroed() };
        p.field_mask = u64::from(
            UCP_AM_HANDLER_PARAM_FIELD_ID
                | UCP_AM_HANDLER_PARAM_FIELD_CB
                | UCP_AM_HANDLER_PARAM_FIELD_ARG
                | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        );
        p.id = id;
        p.flags = UCP_AM_FLAG_WHOLE_MSG;
        p.cb = cb.am;
        p.arg = cb.arg;
        // SAFETY: the worker is live; `arg` outlives it (the caller's promise).
        let st = unsafe { (self.ucx.ucp_worker_set_am_recv_handler()?)(self.worker, &p) };
        check(
            self.ucx,
            st,
            "ucp_worker_set_am_recv_handler",
            "installing hal's message handler",
        )
    }

    /// A listener on `addr`, and the address it listens on.
    pub(crate) fn listen(
        &self,
        addr: SocketAddr,
        cb: &Callbacks,
    ) -> Result<(ucp_listener_h, SocketAddr)> {
        let raw = RawAddr::new(addr);
        // SAFETY: all-zero is a valid `ucp_listener_params_t`.
        let mut p: ucp_listener_params_t = unsafe { std::mem::zeroed() };
        p.field_mask =
            u64::from(UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER);
        p.sockaddr = raw.as_ucs();
        p.conn_handler = ucp_listener_conn_handler_t {
            cb: cb.conn,
            arg: cb.arg,
        };
        let mut listener: ucp_listener_h = std::ptr::null_mut();
        // SAFETY: the worker is live; the address lives through the call;
        // `arg` outlives the listener (the caller's promise).
        let st = unsafe { (self.ucx.ucp_listener_create()?)(self.worker, &p, &mut listener) };
        check(
            self.ucx,
            st,
            "ucp_listener_create",
            &format!("listening on {addr}"),
        )?;
        // SAFETY: all-zero is a valid `ucp_listener_attr_t`.
        let mut attr: ucp_listener_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = u64::from(UCP_LISTENER_ATTR_FIELD_SOCKADDR);
        // SAFETY: the listener is live; the call fills `attr`.
        let st = unsafe { (self.ucx.ucp_listener_query()?)(listener, &mut attr) };
        let bound = check(self.ucx, st, "ucp_listener_query", "the listener's address").map(|()| {
            from_storage(&attr.sockaddr).map_or(addr, |a| SocketAddr::new(addr.ip(), a.port()))
        });
        match bound {
            Ok(b) => Ok((listener, b)),
            Err(e) => {
                self.destroy_listener(listener);
                Err(e)
            }
        }
    }

    pub(crate) fn destroy_listener(&self, listener: ucp_listener_h) {
        if let Ok(f) = self.ucx.ucp_listener_destroy() {
            // SAFETY: the listener is live and destroyed once.
            unsafe { f(listener) };
        }
    }

    /// The client's address of a connection request.
    pub(crate) fn client_of(&self, req: ucp_conn_request_h) -> Option<SocketAddr> {
        // SAFETY: all-zero is a valid `ucp_conn_request_attr_t`.
        let mut attr: ucp_conn_request_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = u64::from(UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR);
        let f = self.ucx.ucp_conn_request_query().ok()?;
        // SAFETY: the request is live (not yet accepted or rejected).
        let st = unsafe { f(req, &mut attr) };
        (st == UCS_OK)
            .then(|| from_storage(&attr.client_address))
            .flatten()
    }

    /// Refuse a connection request.
    pub(crate) fn reject(&self, listener: ucp_listener_h, req: ucp_conn_request_h) {
        if let Ok(f) = self.ucx.ucp_listener_reject() {
            // SAFETY: the listener and the request are live; the request is
            // answered once.
            unsafe { f(listener, req) };
        }
    }

    /// An endpoint: accepting `req`, or connecting to `to`; with peer
    /// failure reported to the error callback.
    pub(crate) fn endpoint(
        &self,
        req: Option<ucp_conn_request_h>,
        to: Option<SocketAddr>,
        cb: &Callbacks,
    ) -> Result<ucp_ep_h> {
        // SAFETY: all-zero is a valid `ucp_ep_params_t`.
        let mut p: ucp_ep_params_t = unsafe { std::mem::zeroed() };
        p.field_mask =
            u64::from(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
        p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        p.err_handler = ucp_err_handler_t {
            cb: cb.err,
            arg: cb.arg,
        };
        let raw = to.map(RawAddr::new);
        if let Some(req) = req {
            p.field_mask |= u64::from(UCP_EP_PARAM_FIELD_CONN_REQUEST);
            p.conn_request = req;
        }
        if let Some(raw) = &raw {
            p.field_mask |= u64::from(UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS);
            p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
            p.sockaddr = raw.as_ucs();
        }
        let mut ep: ucp_ep_h = std::ptr::null_mut();
        // SAFETY: the worker is live; the parameters and the address live
        // through the call; `arg` outlives the endpoint.
        let st = unsafe { (self.ucx.ucp_ep_create()?)(self.worker, &p, &mut ep) };
        let what = match to {
            Some(a) => format!("connecting to {a}"),
            None => "accepting a connection".to_string(),
        };
        check(self.ucx, st, "ucp_ep_create", &what)?;
        Ok(ep)
    }

    /// Close `ep`: flushing first, or at once with `force` (outstanding
    /// operations then fail). The completion finishes when it is closed.
    pub(crate) fn close(&self, ep: ucp_ep_h, force: bool) -> Arc<Completion> {
        let Ok(f) = self.ucx.ucp_ep_close_nbx() else {
            let c = Arc::new(Completion::default());
            c.finish(UCS_ERR_UNSUPPORTED);
            return c;
        };
        completion::issue(
            Kind::Send,
            None,
            |p| {
                if force {
                    p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
                    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
                }
            },
            // SAFETY: the endpoint is live and closed once; the parameters
            // live through the call.
            |p| unsafe { f(ep, p) },
        )
    }

    /// Send `header` on `ep` as an active message of `id`, with `data`
    /// (address, length, memory type) as its data; by rendezvous when
    /// `rndv`. The header is kept until it is sent; the data must stay
    /// valid until the completion finishes.
    pub(crate) fn send(
        &self,
        ep: ucp_ep_h,
        id: u32,
        header: Vec<u8>,
        data: Option<(*const c_void, usize, ucs_memory_type_t)>,
        rndv: bool,
    ) -> Result<Arc<Completion>> {
        let f = self.ucx.ucp_am_send_nbx()?;
        let (hp, hl) = (header.as_ptr() as *const c_void, header.len());
        let (dp, dl, mem) = data.unwrap_or((std::ptr::null(), 0, UCS_MEMORY_TYPE_HOST));
        Ok(completion::issue(
            Kind::Send,
            Some(header),
            |p| {
                p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
                p.flags = UCP_AM_SEND_FLAG_REPLY;
                if data.is_none() {
                    p.flags |= UCP_AM_SEND_FLAG_EAGER;
                } else if rndv {
                    p.flags |= UCP_AM_SEND_FLAG_RNDV;
                }
                p.memory_type = mem;
            },
            // SAFETY: the endpoint is live; the header is kept alive by the
            // completion; the data is the caller's, valid until it finishes.
            |p| unsafe { f(ep, id, hp, hl, dp, dl, p) },
        ))
    }

    /// Send `head` on `ep` as an active message of `id` with `body` as its
    /// data, eagerly whatever its size (its handler gets it whole, in host
    /// memory). Both are kept until the send is over.
    pub(crate) fn send_eager(
        &self,
        ep: ucp_ep_h,
        id: u32,
        head: Vec<u8>,
        body: &[u8],
    ) -> Result<Arc<Completion>> {
        let f = self.ucx.ucp_am_send_nbx()?;
        let hl = head.len();
        let mut both = head;
        both.extend_from_slice(body);
        let hp = both.as_ptr() as *const c_void;
        let (dp, dl) = match both.len() - hl {
            0 => (std::ptr::null(), 0),
            n => (both.as_ptr().wrapping_add(hl) as *const c_void, n),
        };
        Ok(completion::issue(
            Kind::Send,
            Some(both),
            |p| {
                p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
                p.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
                p.memory_type = UCS_MEMORY_TYPE_HOST;
            },
            // SAFETY: the endpoint is live; the head and the body are one
            // buffer the completion keeps until the send is over (moving
            // the vector into it does not move its bytes).
            |p| unsafe { f(ep, id, hp, hl, dp, dl, p) },
        ))
    }

    /// Receive the data of a rendezvous message (`desc`, as its handler got
    /// it) into `len` bytes at `target` of memory type `mem`; `done`
    /// finishes when they are in.
    pub(crate) fn receive(
        &self,
        desc: *mut c_void,
        target: *mut c_void,
        len: usize,
        mem: ucs_memory_type_t,
        done: Arc<Completion>,
    ) -> Result<()> {
        let f = self.ucx.ucp_am_recv_data_nbx()?;
        completion::issue_into(
            done,
            Kind::Receive,
            |p| {
                p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
                p.memory_type = mem;
            },
            // SAFETY: the worker is live; `desc` is a rendezvous descriptor
            // its handler kept (answered UCS_INPROGRESS for) and that is
            // received once; `target` is writable for `len` bytes until the
            // completion finishes (the caller's promise).
            |p| unsafe { f(self.worker, desc, target, len, p) },
        );
        Ok(())
    }

    /// Let go of a message's data that its handler kept.
    pub(crate) fn release(&self, data: *mut c_void) {
        if let Ok(f) = self.ucx.ucp_am_data_release() {
            // SAFETY: `data` is data a handler kept (answered UCS_INPROGRESS
            // for), released once.
            unsafe { f(self.worker, data) };
        }
    }

    /// Register `len` bytes at `addr` of memory type `t` (which UCX then
    /// sends from and receives into without registering them again);
    /// remote writes only when `writable`.
    pub(crate) fn map(
        &self,
        addr: u64,
        len: u64,
        t: RemoteMemoryType,
        writable: bool,
    ) -> Result<ucp_mem_h> {
        // SAFETY: all-zero is a valid `ucp_mem_map_params_t`.
        let mut p: ucp_mem_map_params_t = unsafe { std::mem::zeroed() };
        p.field_mask = u64::from(
            UCP_MEM_MAP_PARAM_FIELD_ADDRESS
                | UCP_MEM_MAP_PARAM_FIELD_LENGTH
                | UCP_MEM_MAP_PARAM_FIELD_PROT
                | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
        );
        p.address = addr as *mut c_void;
        p.length = len as usize;
        p.prot = UCP_MEM_MAP_PROT_LOCAL_READ
            | UCP_MEM_MAP_PROT_LOCAL_WRITE
            | UCP_MEM_MAP_PROT_REMOTE_READ;
        if writable {
            p.prot |= UCP_MEM_MAP_PROT_REMOTE_WRITE;
        }
        p.memory_type = mem_type(t);
        let mut memh: ucp_mem_h = std::ptr::null_mut();
        // SAFETY: the context is live; the range is the caller's memory,
        // which outlives the registration (unmapped before it is freed).
        let st = unsafe { (self.ucx.ucp_mem_map()?)(self.context, &p, &mut memh) };
        check(
            self.ucx,
            st,
            "ucp_mem_map",
            &format!("registering {len} bytes at {addr:#x}"),
        )?;
        Ok(memh)
    }

    pub(crate) fn unmap(&self, memh: ucp_mem_h) {
        if let Ok(f) = self.ucx.ucp_mem_unmap() {
            // SAFETY: the registration is live and unmapped once.
            unsafe { f(self.context, memh) };
        }
    }

    /// Progress once; how many events it handled.
    pub(crate) fn progress(&self) -> u32 {
        match self.ucx.ucp_worker_progress() {
            // SAFETY: the worker is live.
            Ok(f) => unsafe { f(self.worker) },
            Err(_) => 0,
        }
    }

    /// Arm the event descriptor; false when events are pending (progress
    /// again before sleeping).
    pub(crate) fn arm(&self) -> bool {
        match self.ucx.ucp_worker_arm() {
            // SAFETY: the worker is live.
            Ok(f) => (unsafe { f(self.worker) }) == UCS_OK,
            Err(_) => false,
        }
    }

    /// Wake the thread sleeping on the event descriptor.
    pub(crate) fn signal(&self) {
        if let Ok(f) = self.ucx.ucp_worker_signal() {
            // SAFETY: the worker is live.
            unsafe { f(self.worker) };
        }
    }

    /// What UCX is, for messages: the library and its version.
    pub(crate) fn describe(&self) -> String {
        let (a, b, c) = self.ucx.version;
        format!("UCX {a}.{b}.{c} ({})", self.ucx.path().display())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if !self.worker.is_null() {
            if let Ok(f) = self.ucx.ucp_worker_destroy() {
                // SAFETY: the worker is live, has no endpoints left that hal
                // uses, and is destroyed once.
                unsafe { f(self.worker) };
            }
        }
        if let Ok(f) = self.ucx.ucp_cleanup() {
            // SAFETY: the context is live, its worker destroyed above, and it
            // is cleaned up once.
            unsafe { f(self.context) };
        }
    }
}

/// UCX's memory type of `t`.
pub(crate) fn mem_type(t: RemoteMemoryType) -> ucs_memory_type_t {
    match t {
        RemoteMemoryType::Host => UCS_MEMORY_TYPE_HOST,
        RemoteMemoryType::Cuda => UCS_MEMORY_TYPE_CUDA,
        RemoteMemoryType::CudaManaged => UCS_MEMORY_TYPE_CUDA_MANAGED,
    }
}

/// The refusal of memory UCX cannot register here.
pub(crate) fn unsupported_memory(engine: &Engine, t: RemoteMemoryType) -> Error {
    Error::unsupported(
        ucx_id(),
        "export",
        format!(
            "{} cannot register {t:?} memory (ucp_context_query's memory types): load a UCX \
             built with CUDA (pip install libucx-cu13, then HAL_UCX_LIBRARY=<the wheel's \
             libucx/lib/libucp.so.0>), or copy the bytes into host memory and export that",
            engine.describe()
        ),
    )
}
