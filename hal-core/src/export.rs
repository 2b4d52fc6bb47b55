//! Placeholder: the exporter side of a handle is being written.
use crate::handle::Handle;
use std::os::fd::OwnedFd;

/// An exported resource's handle, its descriptors, and its broker registration.
#[derive(Debug)]
pub struct Exported {
    handle: Handle,
    fds: Vec<OwnedFd>,
}

impl Exported {
    /// A handle whose descriptors travel beside it.
    pub fn new(handle: Handle, fds: Vec<OwnedFd>) -> Self {
        Exported { handle, fds }
    }
    /// The handle.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }
    /// The descriptors.
    pub fn fds(&self) -> &[OwnedFd] {
        &self.fds
    }
}
