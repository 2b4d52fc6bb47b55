//! `halctl remote read` and `halctl remote write`: connect to a region
//! another host serves, move the bytes, say how many and how long.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use crate::fail::{CmdResult, Context, Fail};
use crate::out;

/// Arguments of `halctl remote read`.
#[derive(Debug, Args)]
pub struct ReadArgs {
    /// The region's `hal1r.` text, as `halctl remote serve` printed it.
    #[arg(value_name = "TEXT")]
    text: String,
    /// Where in the region to start.
    #[arg(long, value_name = "N", value_parser = crate::parse_size, default_value = "0")]
    offset: u64,
    /// How many bytes (default: up to the region's end).
    #[arg(long, value_name = "N", value_parser = crate::parse_size)]
    len: Option<u64>,
    /// Write the bytes to this file, or to standard output with `-` (the
    /// default; the summary then goes to standard error).
    #[arg(long, value_name = "FILE|-", default_value = "-")]
    out: String,
}

/// Arguments of `halctl remote write`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["data", "input"])))]
pub struct WriteArgs {
    /// The region's `hal1r.` text, as `halctl remote serve` printed it.
    #[arg(value_name = "TEXT")]
    text: String,
    /// Where in the region to write.
    #[arg(long, value_name = "N", value_parser = crate::parse_size, default_value = "0")]
    offset: u64,
    /// The bytes to write: this string (UTF-8).
    #[arg(long, value_name = "STRING")]
    data: Option<String>,
    /// The bytes to write: this file's contents (`-`: standard input).
    #[arg(long = "in", id = "input", value_name = "FILE")]
    input: Option<String>,
    /// Then signal the exporter: it learns that the bytes are in its memory.
    #[arg(long)]
    signal: bool,
}

/// Bytes per second, in the most readable decimal unit.
fn rate(bytes: u64, secs: f64) -> String {
    if secs <= 0.0 {
        return "-".to_string();
    }
    let r = bytes as f64 / secs;
    if r >= 1e9 {
        format!("{:.2} GB/s", r / 1e9)
    } else if r >= 1e6 {
        format!("{:.1} MB/s", r / 1e6)
    } else {
        format!("{:.1} kB/s", r / 1e3)
    }
}

/// Run `halctl remote read`.
pub fn read(args: &ReadArgs) -> CmdResult {
    let (handle, node) = super::address::importer_node(&args.text)?;
    let size = handle.size;
    if args.offset > size {
        return Err(Fail::usage(format!(
            "--offset {} is past the region's end ({} bytes)",
            args.offset, size
        )));
    }
    let len = args.len.unwrap_or(size - args.offset);
    if args.offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(Fail::usage(format!(
            "--offset {} --len {len} goes past the region's end ({size} bytes)",
            args.offset
        )));
    }
    crate::fits_in_memory(len, "the bytes read")?;
    let t0 = Instant::now();
    let remote = node
        .connect(&args.text)
        .ctx(&format!("connecting to the export at {}", handle.listener))?;
    let connected = t0.elapsed();
    let mut buf = vec![0u8; len as usize];
    let t1 = Instant::now();
    remote
        .read(args.offset, &mut buf)
        .ctx(&format!("reading {len} bytes at offset {}", args.offset))?;
    let took = t1.elapsed();
    drop(remote);
    let to_stdout = args.out == "-";
    if to_stdout {
        let mut stdout = std::io::stdout().lock();
        match stdout.write_all(&buf).and_then(|()| stdout.flush()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                return Err(Fail::failed(String::new()))
            }
            Err(e) => return Err(Fail::failed(format!("writing to stdout: {e}"))),
        }
    } else {
        std::fs::write(&args.out, &buf)
            .map_err(|e| Fail::failed(format!("writing {}: {e}", args.out)))?;
    }
    let summary = format!(
        "read {len} bytes at offset {} from {} in {} ({}; connecting took {})",
        args.offset,
        handle.listener,
        out::nanos(took.as_nanos() as u64),
        rate(len, took.as_secs_f64()),
        out::nanos(connected.as_nanos() as u64)
    );
    if to_stdout {
        eprintln!("halctl: {summary}");
        Ok(())
    } else {
        out::line(summary)
    }
}

/// Run `halctl remote write`.
pub fn write(args: &WriteArgs) -> CmdResult {
    let data: Vec<u8> = match (&args.data, &args.input) {
        (Some(s), _) => s.clone().into_bytes(),
        (None, Some(path)) if path == "-" => {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut v)
                .map_err(|e| Fail::failed(format!("reading standard input: {e}")))?;
            v
        }
        (None, Some(path)) => std::fs::read(PathBuf::from(path))
            .map_err(|e| Fail::usage(format!("--in {path}: {e}")))?,
        (None, None) => return Err(Fail::usage("give --data STRING or --in FILE")),
    };
    let (handle, node) = super::address::importer_node(&args.text)?;
    let len = data.len() as u64;
    if args
        .offset
        .checked_add(len)
        .is_none_or(|end| end > handle.size)
    {
        return Err(Fail::usage(format!(
            "{len} bytes at offset {} go past the region's end ({} bytes)",
            args.offset, handle.size
        )));
    }
    let t0 = Instant::now();
    let remote = node
        .connect(&args.text)
        .ctx(&format!("connecting to the export at {}", handle.listener))?;
    let connected = t0.elapsed();
    let t1 = Instant::now();
    let what = format!("writing {len} bytes at offset {}", args.offset);
    if args.signal {
        remote.write_signal(args.offset, &data).ctx(&what)?;
    } else {
        remote
            .write(args.offset, &data)
            .and_then(|()| remote.flush())
            .ctx(&what)?;
    }
    let took = t1.elapsed();
    drop(remote);
    let signalled = if args.signal { ", then signalled" } else { "" };
    out::line(format!(
        "wrote {len} bytes at offset {} to {}{signalled} in {} ({}; connecting took {})",
        args.offset,
        handle.listener,
        out::nanos(took.as_nanos() as u64),
        rate(len, took.as_secs_f64()),
        out::nanos(connected.as_nanos() as u64)
    ))
}
