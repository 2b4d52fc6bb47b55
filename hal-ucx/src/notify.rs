//! A notify of another host's, signalled from here.

use std::sync::Arc;

use hal_core::handle::remote::{RemoteHandle, RemoteKind};
use hal_core::{Error, HandleError, Result};

use crate::dial::Connection;
use crate::owner::Owner;
use crate::protocol::Message;

/// Another host's notify ([`crate::Node::connect_notify`]): [`signal`]
/// wakes its waiter there.
///
/// [`signal`]: RemoteNotify::signal
pub struct RemoteNotify {
    conn: Connection,
}

impl std::fmt::Debug for RemoteNotify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteNotify")
            .field("handle", &self.conn.handle)
            .finish()
    }
}

impl RemoteNotify {
    pub(crate) fn connect(owner: Arc<Owner>, handle: RemoteHandle) -> Result<RemoteNotify> {
        if handle.kind != RemoteKind::Notify {
            return Err(Error::InvalidHandle(HandleError::WrongKind {
                expected: "remote notify",
                found: "remote memory",
            }));
        }
        let conn = Connection::open(owner, handle)?;
        Ok(RemoteNotify { conn })
    }

    /// Signal the notify on its host. Returns once the signal is sent.
    pub fn signal(&self) -> Result<()> {
        if let Some(why) = self.conn.gone() {
            return Err(self.conn.closed(&why));
        }
        self.conn.send(&Message::Signal)
    }

    /// The handle this was imported from.
    pub fn handle(&self) -> &RemoteHandle {
        &self.conn.handle
    }
}

impl Drop for RemoteNotify {
    fn drop(&mut self) {
        self.conn.close();
    }
}
