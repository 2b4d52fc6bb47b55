//! What every object a node made holds: the hub, and the progress
//! thread, which stops (and the node with it) when the last of them goes.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::hub::{lock, Hub};

/// What a node's objects hold: the hub, and the progress thread, stopped
/// when the last of them goes.
pub(crate) struct Owner {
    pub(crate) hub: Arc<Hub>,
    pub(crate) thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.hub.stop();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
        self.hub.shut();
    }
}
