//! The submodule `hal.remote`: memory and notifies of this process read,
//! written and signalled from other hosts over UCX (feature `ucx`), and
//! the handles (`hal1r.` ...) other hosts give.

use pyo3::prelude::*;

use crate::remote_export::RemoteExport;
use crate::remote_group::Group;
use crate::remote_memory::RemoteMemory;
use crate::remote_node::Node;
use crate::remote_notify::RemoteNotify;
use crate::remote_offer::ChannelOffer;
use crate::remote_subscriber::{Sample, Subscriber};

/// Add `hal.remote` to the module `parent`, importable as `hal.remote`.
pub(crate) fn add_to(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = parent.py();
    let m = PyModule::new(py, "remote")?;
    m.add(
        "__doc__",
        "Across machines over UCX (libucp.so.0, loaded when the first Node is made): a \
         Node exports hal memory and notifies to other hosts (RemoteExport, whose text \
         another host connects to) and connects to theirs (RemoteMemory, RemoteNotify). \
         A Group gathers processes on many hosts at one address (a rank each, \
         all_gather, broadcast, barrier), to swap the handle texts of their exports. \
         A channel of this host offered from a node (ChannelOffer) takes subscribers on \
         other hosts (Node.subscribe: a Subscriber whose Samples are read in place). \
         A node must listen only on a network whose hosts are trusted (a cluster's \
         fabric): UCX's connections are neither encrypted nor authenticated.",
    )?;
    m.add_class::<ChannelOffer>()?;
    m.add_class::<Group>()?;
    m.add_class::<Node>()?;
    m.add_class::<RemoteExport>()?;
    m.add_class::<RemoteMemory>()?;
    m.add_class::<RemoteNotify>()?;
    m.add_class::<Sample>()?;
    m.add_class::<Subscriber>()?;
    parent.add_submodule(&m)?;
    // `import hal.remote` and `from hal.remote import Node` find it.
    py.import("sys")?
        .getattr("modules")?
        .set_item("hal.remote", &m)?;
    Ok(())
}
