//! `hal.Group`: a rendezvous of N processes by name (`hal::group`): ranks,
//! all-gather, broadcast and barrier of small payloads such as handle texts.

use std::time::Duration;

use hal::group::{Group as Inner, GroupOptions};
use hal::objects::{Collective, GroupObj};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{to_py, OrRaise};
use crate::timeout::duration;

/// A membership of a group; `close()` (or the object's end) leaves it.
#[pyclass(module = "hal", frozen)]
pub struct Group {
    inner: GroupObj<Inner>,
}

/// Post `data` in `group` and receive every member's, by rank, the GIL
/// released.
pub(crate) fn all_gather<'py, G: Collective>(
    py: Python<'py>,
    group: &GroupObj<G>,
    data: &[u8],
) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    let data = data.to_vec();
    let all = py
        .allow_threads(move || group.all_gather(&data))
        .map_err(to_py)?;
    Ok(all.iter().map(|b| PyBytes::new(py, b)).collect())
}

/// Receive in `group` what the member of rank `root` posts, the GIL
/// released.
pub(crate) fn broadcast<'py, G: Collective>(
    py: Python<'py>,
    group: &GroupObj<G>,
    root: usize,
    data: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let data = data.to_vec();
    let got = py
        .allow_threads(move || group.broadcast(root, &data))
        .map_err(to_py)?;
    Ok(PyBytes::new(py, &got))
}

/// Wait in `group` until every member called `barrier`, the GIL released.
pub(crate) fn barrier<G: Collective>(py: Python<'_>, group: &GroupObj<G>) -> PyResult<()> {
    py.allow_threads(|| group.barrier()).map_err(to_py)
}

#[pymethods]
impl Group {
    /// Join the group `name` of `size` processes (this user's), waiting up
    /// to `timeout` seconds until all came. Every member passes the same
    /// `size` and `max_payload` (the most bytes a member posts a round).
    #[new]
    #[pyo3(signature = (name, size, timeout=60.0, max_payload=4096))]
    fn new(
        py: Python<'_>,
        name: &str,
        size: usize,
        timeout: Option<f64>,
        max_payload: usize,
    ) -> PyResult<Group> {
        let timeout = duration(timeout)?.unwrap_or(Duration::from_secs(60 * 60 * 24 * 365));
        let options = GroupOptions::default()
            .timeout(timeout)
            .max_payload(max_payload);
        let inner = py
            .allow_threads(|| Inner::join(name, size, &options))
            .or_raise()?;
        Ok(Group {
            inner: GroupObj::new(inner, "this Group"),
        })
    }

    /// This member's rank: the order in which it joined, from 0.
    #[getter]
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    /// How many members the group has.
    #[getter]
    fn size(&self) -> usize {
        self.inner.size()
    }

    /// The members' process ids, by rank.
    #[getter]
    fn members(&self) -> Vec<u32> {
        self.inner.members().iter().map(|m| m.pid).collect()
    }

    /// Post `data` and receive every member's, by rank (this one's too).
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

    /// Leave the group now.
    fn close(&self) {
        drop(self.inner.leave());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.close();
    }

    fn __repr__(&self) -> String {
        format!("<hal.Group rank {} of {}>", self.rank(), self.size())
    }
}
