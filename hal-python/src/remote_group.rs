//! `hal.remote.Group`: a group across hosts (`hal::remote::RemoteGroup`):
//! N processes on M hosts join by name at one address, and swap small
//! payloads (remote handle texts, most often) with the calls of `hal.Group`.

use std::net::{IpAddr, SocketAddr};

use hal::objects::GroupObj;
use hal::remote::group::parse_secret;
use hal::remote::{RemoteGroup, RemoteGroupOptions};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{invalid, to_py, OrRaise};
use crate::group::{all_gather, barrier, broadcast};
use crate::remote_node::Node;
use crate::timeout::duration;

/// A membership of a group across hosts; `close()` (or the object's end)
/// leaves it.
#[pyclass(module = "hal.remote", frozen)]
pub struct Group {
    inner: GroupObj<RemoteGroup>,
    name: String,
    address: String,
}

impl Drop for Group {
    fn drop(&mut self) {
        // Leaving closes connections (and, at rank 0, ends the group).
        crate::remote_wait::drop_released(self.inner.leave());
    }
}

#[pymethods]
impl Group {
    /// Join the group `name` of `size` processes at `addr` ("IP:PORT", an
    /// address of one of the hosts, the same for every member), waiting up
    /// to `timeout` seconds until all came. The process that binds `addr`
    /// serves the group and is rank 0. `secret`: 32 hex digits, the same in
    /// every member (None: the environment's `HAL_GROUP_SECRET`);
    /// `listen`: the IP this member's node listens on (None: the address
    /// this host reaches `addr` from). A wrong secret is
    /// `hal.PermissionDeniedError`; no secret `hal.InvalidArgumentError`.
    #[new]
    #[pyo3(signature = (addr, name, size, secret=None, timeout=60.0, max_payload=4096, listen=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        addr: &str,
        name: &str,
        size: usize,
        secret: Option<&str>,
        timeout: Option<f64>,
        max_payload: usize,
        listen: Option<&str>,
    ) -> PyResult<Group> {
        let at: SocketAddr = addr.trim().parse().map_err(|e| {
            invalid(format!(
                "addr={addr:?} is no IP:PORT address ({e}): give the group's address, one \
                 address of one host and a port, such as \"192.0.2.1:29500\""
            ))
        })?;
        let mut options = RemoteGroupOptions::default().max_payload(max_payload);
        if let Some(t) = duration(timeout)? {
            options = options.timeout(t);
        }
        if let Some(s) = secret {
            options = options.secret(parse_secret(s, "secret=").or_raise()?);
        }
        if let Some(ip) = listen {
            let ip: IpAddr = ip
                .trim()
                .parse()
                .map_err(|e| invalid(format!("listen={ip:?} is no IP address ({e})")))?;
            options = options.listen(ip);
        }
        let inner = py
            .allow_threads(|| RemoteGroup::join_at(at, name, size, &options))
            .or_raise()?;
        let name = inner.name().to_string();
        Ok(Group {
            address: inner.address().to_string(),
            inner: GroupObj::new(inner, format!("this hal.remote.Group ({name:?})")),
            name,
        })
    }

    /// The group's name.
    #[getter]
    fn name(&self) -> String {
        self.name.clone()
    }

    /// The group's address, "IP:PORT".
    #[getter]
    fn address(&self) -> String {
        self.address.clone()
    }

    /// This member's rank: 0 for the member that serves the group, then
    /// the order in which the others joined.
    #[getter]
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    /// How many members the group has.
    #[getter]
    fn size(&self) -> usize {
        self.inner.size()
    }

    /// Every member, by rank: its process id (on its host) and its node's
    /// address ("IP:PORT", what its exports' handles name).
    #[getter]
    fn members(&self) -> Vec<(u32, String)> {
        self.inner
            .members()
            .iter()
            .map(|m| (m.pid, m.address.to_string()))
            .collect()
    }

    /// This member's node (a `hal.remote.Node`): export memory from it, and
    /// swap the handle texts with `all_gather`; it runs while the group or
    /// the returned object holds it (rank 0's listens on the group's
    /// address, which is free for the next group once both are gone).
    fn node(&self, py: Python<'_>) -> PyResult<Node> {
        py.allow_threads(|| self.inner.with(|g| Ok(g.node().clone())))
            .map(Node::of)
            .map_err(to_py)
    }

    /// Post `data` and receive every member's, by rank (this one's too). A
    /// member that died or left is named in `hal.ClosedError`; the group is
    /// then broken: leave and join again.
    fn all_gather<'py>(&self, py: Python<'py>, data: &[u8]) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        all_gather(py, &self.inner, data)
    }

    /// Receive what the member of rank `root` posts (`data`, at `root`;
    /// ignored elsewhere).
    #[pyo3(signature = (root, data=b"".as_slice()))]
    fn broadcast<'py>(
        &self,
        py: Python<'py>,
        root: usize,
        data: &[u8],
    ) -> PyResult<Bound<'py, PyBytes>> {
        broadcast(py, &self.inner, root, data)
    }

    /// Wait until every member called `barrier`.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        barrier(py, &self.inner)
    }

    /// Leave the group now (at rank 0, end it: the others' calls then raise
    /// `hal.ClosedError`).
    fn close(&self, py: Python<'_>) {
        let held = self.inner.leave();
        py.allow_threads(move || drop(held));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.close(py);
    }

    fn __repr__(&self) -> String {
        format!(
            "<hal.remote.Group {:?} at {}: rank {} of {}>",
            self.name,
            self.address,
            self.inner.rank(),
            self.inner.size()
        )
    }
}
