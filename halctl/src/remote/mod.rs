//! `halctl remote`: memory shared with other hosts over UCX
//! ([`hal::remote`]): serve a region, read it, write it.

mod access;
mod address;
mod serve;

use crate::fail::CmdResult;
use clap::Subcommand;

pub use access::{ReadArgs, WriteArgs};
pub use serve::ServeArgs;

/// The subcommands of `halctl remote`.
#[derive(Debug, Subcommand)]
pub enum RemoteCommand {
    /// Allocate a region, export it to other hosts from a node listening on
    /// an address, print its `hal1r.` text, and serve it until Ctrl-C or
    /// SIGTERM, printing each signal and the count of importers when it
    /// changes (counted every 50 ms: one that comes and goes between two
    /// counts is not seen).
    #[command(after_help = crate::EXIT_CODES)]
    Serve(ServeArgs),
    /// Read bytes of a region another host serves.
    #[command(after_help = crate::EXIT_CODES)]
    Read(ReadArgs),
    /// Write bytes into a region another host serves.
    #[command(after_help = crate::EXIT_CODES)]
    Write(WriteArgs),
}

/// Run `halctl remote ...`.
pub fn run(cmd: &RemoteCommand) -> CmdResult {
    match cmd {
        RemoteCommand::Serve(a) => serve::run(a),
        RemoteCommand::Read(a) => access::read(a),
        RemoteCommand::Write(a) => access::write(a),
    }
}
