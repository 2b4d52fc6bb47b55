//! Ordering work: streams and the polling wait every host wait uses
//! ([`stream`]), events and IPC events ([`event`]), notifies ([`notify`]).

pub(crate) mod event;
pub(crate) mod notify;
pub(crate) mod stream;
