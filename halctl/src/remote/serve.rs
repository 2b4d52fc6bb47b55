//! `halctl remote serve`: a region exported to other hosts, served until
//! Ctrl-C or SIGTERM.

use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc;
use std::time::Duration;

use clap::Args;
use hal::registry::Registry;
use hal::remote::{Node, NodeOptions, RemoteOptions};
use hal::AllocDesc;
use nix::sys::signal::Signal;

use crate::backend;
use crate::fail::{CmdResult, Context, Fail};
use crate::hold::block_termination;
use crate::out;
use crate::pattern::{self, Content};

/// How often the importers are counted while nothing else happens.
const TICK: Duration = Duration::from_millis(50);

/// Arguments of `halctl remote serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on, `IP` or `IP:PORT` (port 0 takes a free
    /// one): an address of this host that the other hosts reach. Every
    /// address (0.0.0.0, ::) needs --advertise. Listen only on a network
    /// whose hosts are trusted: UCX neither encrypts nor authenticates.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0", value_parser = super::address::parse_addr)]
    listen: SocketAddr,
    /// The address the handle names, where other hosts connect, when
    /// --listen is every address.
    #[arg(long, value_name = "IP")]
    advertise: Option<IpAddr>,
    /// Backend to allocate host memory on: cpu-shm, cuda, cuda-uvm, ascend,
    /// mock-cuda, mock-ascend (`mock` means mock-cuda).
    #[arg(long, value_name = "NAME", default_value = "cpu-shm")]
    backend: String,
    /// Size (4096, 64K, 16M, 1G).
    #[arg(long, value_name = "BYTES", value_parser = crate::parse_size, default_value = "1M")]
    size: u64,
    /// Importers may only read: UCX registers the memory for remote reads
    /// alone.
    #[arg(long)]
    read_only: bool,
    /// What the region holds at the start: a byte value for every byte
    /// (decimal or 0x hex), or `pattern` (a pseudo-random pattern, seed 1).
    #[arg(long, value_name = "PATTERN", value_parser = parse_fill, default_value = "0")]
    fill: Content,
    /// Stop (and exit 0) once an importer's signal came (`halctl remote
    /// write --signal`).
    #[arg(long)]
    exit_after_signal: bool,
}

/// A byte value, or `pattern`.
fn parse_fill(s: &str) -> Result<Content, String> {
    if s.trim().eq_ignore_ascii_case("pattern") {
        return Ok(Content::Pattern(1));
    }
    crate::parse_byte(s)
        .map(Content::Fill)
        .map_err(|e| format!("{e}, or `pattern`"))
}

fn describe(content: Content) -> String {
    match content {
        Content::Fill(b) => format!("every byte {b:#04x}"),
        Content::Pattern(_) => "a pseudo-random pattern".to_string(),
    }
}

/// Run `halctl remote serve`.
pub fn run(args: &ServeArgs) -> CmdResult {
    let size = crate::nonzero_size(args.size)?;
    if args.listen.ip().is_unspecified() && args.advertise.is_none() {
        return Err(Fail::usage(format!(
            "--listen {} listens on every address, and the handle must name one: add \
             --advertise IP, the address other hosts reach this one by",
            args.listen
        )));
    }
    crate::fits_in_memory(size, "the filled region")?;
    // Before any thread starts, so that every thread leaves the signals
    // to the one that waits for them.
    let signals = block_termination()?;
    let registry = Registry::new();
    let backend = backend::open(&registry, &args.backend)?;
    let dev = backend::device(backend.as_ref(), 0)?;
    let alloc = dev
        .allocate(&AllocDesc::host(size))
        .ctx("allocating the region")?;
    pattern::fill(alloc.as_ref(), args.fill)?;
    let mut opts = NodeOptions::new(args.listen);
    opts.advertise = args.advertise;
    let node = Node::with_options(opts).ctx("starting a UCX node")?;
    let export = node
        .export(
            alloc.as_ref(),
            RemoteOptions {
                read_only: args.read_only,
            },
        )
        .ctx("exporting the region to other hosts")?;
    out::line(export.text())?;
    let access = if args.read_only { " read-only" } else { "" };
    let until = if args.exit_after_signal {
        "until an importer signals, or Ctrl-C/SIGTERM"
    } else {
        "until Ctrl-C or SIGTERM"
    };
    eprintln!(
        "halctl: serving a{access} {} region of {} ({}) at {} (listening on {}) over {}, {until}",
        out::bytes(alloc.len()),
        backend.name(),
        describe(args.fill),
        node.address(),
        args.listen,
        node.ucx()
    );

    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Ok(sig) = signals.wait() {
            let _ = tx.send(sig);
        }
    });
    let mut importers = 0;
    let mut signalled = 0u64;
    let stop: Option<Signal> = loop {
        if let Ok(sig) = rx.try_recv() {
            break Some(sig);
        }
        let signal = match export.wait_signal(TICK) {
            Ok(()) => true,
            Err(hal::Error::Timeout { .. }) => false,
            Err(e) => return Err(Fail::hal("waiting for an importer's signal", e)),
        };
        // The count first: an importer that signals came before its signal.
        let now = export.importers();
        if now != importers {
            let what = if now > importers { "came" } else { "left" };
            out::line(format!("importer {what}: {now} connected"))?;
            importers = now;
        }
        if signal {
            signalled += 1;
            out::line(format!("signal from an importer ({signalled} so far)"))?;
            if args.exit_after_signal {
                break None;
            }
        }
    };
    // The export first: it closes its importers' connections.
    drop(export);
    drop(node);
    match stop {
        Some(sig) => eprintln!("halctl: {sig} received: stopped serving, the export is closed"),
        None => eprintln!("halctl: an importer signalled: stopped serving, the export is closed"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills() {
        assert_eq!(parse_fill("0xab"), Ok(Content::Fill(0xab)));
        assert_eq!(parse_fill("Pattern"), Ok(Content::Pattern(1)));
        assert!(parse_fill("zebra").unwrap_err().contains("pattern"));
    }
}
