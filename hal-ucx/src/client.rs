//! An importer's connection as the importer keeps it: the messages of its
//! handshake, why it is gone, and its reads and writes in flight. Filled
//! by the progress thread, waited on by the caller's.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};

use crate::completion::Completion;
use crate::ffi::bindings::ucs_memory_type_t;
use crate::protocol::Message;

/// A read or write in flight, as the importer keeps it until the exporter
/// answers.
pub(crate) struct Pending {
    /// Where a read's bytes go (address, length, UCX memory type); none
    /// for a write.
    pub(crate) target: Option<(usize, usize, ucs_memory_type_t)>,
    /// Finished when the exporter answered (and a read's bytes arrived).
    pub(crate) done: Arc<Completion>,
    /// A read's bytes are being received into its target by rendezvous.
    pub(crate) receiving: bool,
}

/// An importer's connection, as the importer keeps it.
#[derive(Default)]
pub(crate) struct Client {
    pub(crate) inbox: Mutex<Inbox>,
    pub(crate) cv: Condvar,
    /// Its reads and writes in flight, by request.
    pub(crate) pending: Mutex<HashMap<u64, Pending>>,
}

/// What reached an importer's connection.
#[derive(Default)]
pub(crate) struct Inbox {
    pub(crate) messages: VecDeque<Message>,
    /// Why the connection is gone, once it is.
    pub(crate) gone: Option<String>,
}
