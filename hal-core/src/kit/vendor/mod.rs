//! A vendor runtime as a backend speaks to it: its error codes and
//! entry-point names as plain data ([`Code`], [`cuda`], [`acl`]; an error
//! of a code: [`error`]), the
//! library loaded at run time ([`library`]), whether the runtime can be used
//! here ([`runtime`]), the entry points each capability needs ([`needs`]),
//! and the bytes of a raw IPC handle given to another library
//! ([`raw_ipc`]); [`table`], the codes of a backend outside hal's workspace
//! as a table of its own.

mod codes;
pub mod library;
pub mod needs;
pub mod raw_ipc;
pub mod runtime;
pub mod table;

pub use codes::{acl, codes, cuda, error, Code};
