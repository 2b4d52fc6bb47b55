//! `hal.remote.Group`: a group across hosts (`hal::remote::RemoteGroup`):
//! N processes on M hosts join by name at one address, and swap small
//! payloads (remote handle texts, most often) with the calls of `hal.Group`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use hal::remote::group::parse_secret;
use hal::remote::{RemoteGroup, RemoteGroupOptions};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{invalid, to_py, OrRaise};
use crate::remote_node::Node;
use crate::timeout::duration;

/// A membership of a group across hosts; `close()` (or the object's end)
/// leaves it.
#[pyclass(module = "hal.remote", frozen)]
pub struct Group {
    inner: Mutex<Option<RemoteGroup>>,
    name: String,
    address: String,
    rank: usize,
    /// Each member's process id and node address, by rank.
    members: Vec<(u32, String)>,
}

impl Group {
    /// Run `f` on the membership, the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut RemoteGroup) -> hal::Result<T> + Send,
    ) -> PyResult<T> {
        py.allow_threads(|| {
            let mut held = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            match held.as_mut() {
                Some(group) => f(group),
                None => Err(hal::Error::Closed {
                    what: format!("this hal.remote.Group ({:?}): it was closed", self.name),
                }),
            }
        })
        .map_err(to_py)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Leaving closes connections (and, at rank 0, ends the group).
        let held = self
            .inner
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        crate::remote_wait::drop_released(held);
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
        Ok(Group {
            name: inner.name().to_string(),
            address: inner.address().to_string(),
            rank: inner.rank(),
            members: inner
                .members()
                .iter()
                .map(|m| (m.pid, m.address.to_string()))
                .collect(),
            inner: Mutex::new(Some(inner)),
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
        self.rank
    }

    /// How many members the group has.
    #[getter]
    fn size(&self) -> usize {
        self.members.len()
    }

    /// Every member, by rank: its process id (on its host) and its node's
    /// address ("IP:PORT", what its exports' handles name).
    #[getter]
    fn members(&self) -> Vec<(u32, String)> {
        self.members.clone()
    }

    /// This member's node (a `hal.remote.Node`): export memory from it, and
    /// swap the handle texts with `all_gather`; it runs while the group or
    /// the returned object holds it (rank 0's listens on the group's
    /// address, which is free for the next group once both are gone).
    fn node(&self, py: Python<'_>) -> PyResult<Node> {
        self.with(py, |g| Ok(g.node().clone())).map(Node::of)
    }

    /// Post `data` and receive every member's, by rank (this one's too). A
    /// member that died or left is named in `hal.ClosedError`; the group is
    /// then broken: leave and join again.
    fn all_gather<'py>(&self, py: Python<'py>, data: &[u8]) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let data = data.to_vec();
        let all = self.with(py, move |g| g.all_gather(&data))?;
        Ok(all.iter().map(|b| PyBytes::new(py, b)).collect())
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
        let data = data.to_vec();
        let got = self.with(py, move |g| g.broadcast(root, &data))?;
        Ok(PyBytes::new(py, &got))
    }

    /// Wait until every member called `barrier`.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |g| g.barrier())
    }

    /// Leave the group now (at rank 0, end it: the others' calls then raise
    /// `hal.ClosedError`).
    fn close(&self, py: Python<'_>) {
        let held = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
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
            self.rank,
            self.members.len()
        )
    }
}
