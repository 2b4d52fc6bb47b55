//! `halctl`: see what a machine can share, try sharing between two processes,
//! export and import regions by hand, decode handles, and clean up after
//! crashed programs.

// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]

mod backend;
mod bench;
#[allow(unsafe_code)]
mod channel;
mod channels;
mod child;
mod demo;
mod devices;
mod fail;
#[allow(unsafe_code)]
mod hold;
mod inspect;
mod out;
#[allow(unsafe_code)]
mod pattern;
mod raw;
mod region;
mod remote;
mod shm;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};

use crate::fail::{CmdResult, Fail};

/// Shown at the end of every `--help`.
const EXIT_CODES: &str = "\
Exit codes:
  0  success (for demo and import --expect: every byte verified)
  1  the operation failed: a verification mismatch, a region or exporter that is gone,
     a known backend that this build lacks or that is unavailable on this machine,
     not enough memory, a name given to `shm gc` that it could not remove
  2  bad usage or bad input: an unknown option, a backend name hal does not know,
     a malformed handle, a handle file that does not exist, an invalid region name,
     size or byte value, a --plot path that cannot be written
Every error is one line on stderr.";

#[derive(Debug, Parser)]
#[command(
    name = "halctl",
    version,
    about = "Share memory, events and notifications between processes: inspect, try, clean up.",
    after_help = EXIT_CODES,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the backends compiled in, whether each is usable here (and why
    /// not), their devices and capabilities.
    #[command(after_help = EXIT_CODES)]
    Devices(DevicesArgs),

    /// Share a buffer with a second process: export, import, verify every
    /// byte, ping-pong a notify, and print import time, notify round trip and
    /// read bandwidth, each beside its raw baseline measured in the same run.
    #[command(after_help = EXIT_CODES)]
    Demo(demo::DemoArgs),

    /// Measure what sharing costs, scenario by scenario (export, import,
    /// notify round trips, read bandwidth, scaling), each across two real
    /// processes beside its raw baseline measured in the same run.
    #[command(after_help = EXIT_CODES)]
    Bench(bench::BenchArgs),

    /// Create, fill and export a region; print its handle; keep it alive.
    #[command(after_help = EXIT_CODES)]
    Export(region::ExportArgs),

    /// Import a region by handle (or open a named region by name), optionally
    /// checking that every byte has a value.
    #[command(after_help = EXIT_CODES)]
    Import(region::ImportArgs),

    /// Decode a handle and print every field.
    #[command(after_help = EXIT_CODES)]
    Inspect(inspect::InspectArgs),

    /// Named shared-memory regions this library created on this machine.
    #[command(subcommand, after_help = EXIT_CODES)]
    Shm(shm::ShmCommand),

    /// This user's channels: publishers, subscribers, slots in use.
    #[command(subcommand, after_help = EXIT_CODES)]
    Channel(channels::ChannelCommand),

    /// Memory shared with other hosts over UCX: serve a region, read it,
    /// write it.
    #[command(subcommand, after_help = EXIT_CODES)]
    Remote(remote::RemoteCommand),

    /// The consumer process of `halctl demo` (started by the demo itself).
    #[command(name = "__demo-consumer", hide = true)]
    DemoConsumer(demo::ConsumerArgs),

    /// The consumer process of `halctl bench` (started by the bench itself).
    #[command(name = "__bench-consumer", hide = true)]
    BenchConsumer(bench::ConsumerArgs),
}

#[derive(Debug, Args)]
struct DevicesArgs {
    /// Only this backend: cpu-shm, cuda, cuda-uvm, ascend, mock-cuda,
    /// mock-ascend (`mock` means mock-cuda).
    #[arg(long, value_name = "NAME")]
    backend: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// A handle given on the command line or in a file.
#[derive(Debug, Clone, Args)]
pub struct HandleSource {
    /// The handle's text form.
    #[arg(value_name = "HANDLE", conflicts_with = "handle_file")]
    pub handle: Option<String>,
    /// Read the handle from this file (as written by `export --handle-file`).
    #[arg(long, value_name = "PATH")]
    pub handle_file: Option<PathBuf>,
}

fn run(cli: Cli) -> CmdResult {
    match cli.command {
        Command::Devices(a) => devices::run(a.backend.as_deref(), a.json),
        Command::Demo(a) => demo::run(&a),
        Command::Bench(a) => bench::run(&a),
        Command::Export(a) => region::export(&a),
        Command::Import(a) => region::import(&a),
        Command::Inspect(a) => inspect::run(&a),
        Command::Shm(c) => shm::run(&c),
        Command::Channel(c) => channels::run(&c),
        Command::Remote(c) => remote::run(&c),
        Command::DemoConsumer(a) => demo::consumer(&a),
        Command::BenchConsumer(a) => bench::consumer(&a),
    }
}

fn main() -> ExitCode {
    // A defect must still end in one short line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        eprintln!("halctl: error: internal error: {msg}");
    }));
    // Backends of other crates linked in (the template) are named in every
    // message and open by name, as hal's own are.
    hal::registry::register_linked();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print and succeed; usage errors are one
            // line and exit 2.
            if !e.use_stderr() {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            let rendered = e.render().to_string();
            let line = if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                missing_command_line(&rendered)
            } else {
                usage_line(&rendered)
            };
            eprintln!("halctl: error: {line}");
            return ExitCode::from(fail::EXIT_USAGE);
        }
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cli))) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(f)) => {
            if !f.message.is_empty() {
                eprintln!("halctl: error: {}", f.message);
            }
            f.exit_code()
        }
        Err(_) => ExitCode::from(fail::EXIT_FAILED),
    }
}

/// clap's usage error as one line: its message and notes (what is missing,
/// a similar option), without the usage block, ending with where to look.
fn usage_line(rendered: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for line in rendered.lines().map(str::trim) {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if line.is_empty() {
            continue;
        }
        match line.strip_prefix("tip: ") {
            Some(tip) => parts.push(format!("; {tip}")),
            None => parts.push(format!(" {}", line.strip_prefix("error: ").unwrap_or(line))),
        }
    }
    format!("{} (see --help)", parts.concat().trim_start())
}

/// The help clap prints when a command is missing (`halctl`, `halctl shm`),
/// as one line: the usage and the commands there are.
fn missing_command_line(help: &str) -> String {
    let usage = help
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: "))
        .unwrap_or("halctl <COMMAND>");
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A command's line starts with two spaces; a description that wraps
        // goes on in lines indented further.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    format!(
        "a command is missing: {usage} (commands: {}; see --help)",
        commands.join(", ")
    )
}

/// Bytes from a size such as `4096`, `64K`, `64KiB`, `16M`, `1G` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: u64 = num
        .replace('_', "")
        .parse()
        .map_err(|_| format!("`{s}` is not a size (examples: 4096, 64K, 16MiB, 1G)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => return Err(format!("unknown size unit `{other}` (use K, M, G or T)")),
    };
    num.checked_mul(mult)
        .ok_or_else(|| format!("size `{s}` overflows"))
}

/// A byte value: decimal (`171`) or hexadecimal (`0xab`).
pub fn parse_byte(s: &str) -> Result<u8, String> {
    let t = s.trim();
    let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => t.parse::<u8>(),
    };
    parsed.map_err(|_| format!("`{s}` is not a byte value (0..=255 or 0x00..=0xff)"))
}

/// Refuse a zero size as bad input.
pub fn nonzero_size(size: u64) -> CmdResult<u64> {
    if size == 0 {
        return Err(Fail::usage("--size must be at least one byte"));
    }
    Ok(size)
}

/// Refuse (exit 1) work that needs more memory than this machine has
/// available now (`MemAvailable` of /proc/meminfo), instead of running into
/// the out-of-memory killer. Passes when the figure cannot be read.
pub fn fits_in_memory(bytes: u64, what: &str) -> CmdResult {
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kib| kib.saturating_mul(1024));
    match available {
        Some(avail) if bytes > avail => Err(Fail::failed(format!(
            "{what} needs {} of memory, but only {} is available on this machine",
            out::bytes(bytes),
            out::bytes(avail)
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_bytes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("99999999999999T").is_err());
        assert_eq!(parse_byte("0xab"), Ok(0xab));
        assert_eq!(parse_byte("7"), Ok(7));
        assert!(parse_byte("256").is_err());
        assert!(parse_byte("0x").is_err());
    }

    #[test]
    fn usage_errors_are_one_line() {
        for args in [
            &["halctl", "export"][..],
            &["halctl", "export", "--backend", "cpu-shm", "--sise", "4K"],
            &["halctl", "import", "--handle-file"],
            &["halctl", "nonsense"],
        ] {
            let e = Cli::try_parse_from(args).unwrap_err();
            let line = usage_line(&e.render().to_string());
            assert!(!line.contains('\n'), "{args:?}: {line}");
            assert!(!line.starts_with("error"), "{args:?}: {line}");
            assert!(line.ends_with("(see --help)"), "{args:?}: {line}");
        }
        let e = Cli::try_parse_from(["halctl", "export", "--size", "4K"]).unwrap_err();
        assert!(usage_line(&e.render().to_string()).contains("--backend"));
        let e = Cli::try_parse_from(["halctl", "shm"]).unwrap_err();
        assert_eq!(
            e.kind(),
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        );
        let line = missing_command_line(&e.render().to_string());
        assert_eq!(
            line,
            "a command is missing: halctl shm <COMMAND> (commands: ls, gc; see --help)"
        );
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
