//! `halctl export` and `halctl import`.

use std::path::PathBuf;

use clap::Args;
use hal::dynamic::{DynAllocation, DynDevice};
use hal::registry::Registry;
use hal::{
    AllocDesc, BackendId, Capabilities, ExportOptions, Handle, HandleFlags, HandleKind,
    ImportOptions, Importers, PidKind,
};
use hal::{Memory, SharedHandle};
use serde::Serialize;

use crate::fail::{CmdResult, Context, Fail};
use crate::hold::{block_termination, hold, Release, Until};
use crate::pattern::{self, Content};
use crate::{backend, out, HandleSource};

/// Arguments of `halctl export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Backend to allocate on: cpu-shm, cuda, cuda-uvm, ascend, mock-cuda,
    /// mock-ascend (`mock` means mock-cuda).
    #[arg(long, value_name = "NAME")]
    backend: String,
    /// Create a named region (cpu-shm only): the POSIX shared memory object
    /// /NAME, which C's shm_open and Python's multiprocessing.shared_memory
    /// open too. It is removed when halctl exits. Without --name the region is
    /// anonymous (a sealed memfd).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Size (4096, 64K, 16M, 1G); backends round it up to whole pages.
    #[arg(long, value_name = "BYTES", value_parser = crate::parse_size)]
    size: u64,
    /// Fill every byte with this value (decimal or 0x hex).
    #[arg(long, value_name = "BYTE", value_parser = crate::parse_byte, default_value = "0")]
    fill: u8,
    /// Keep the region alive this many seconds, then clean up and exit. 0
    /// (the default) holds until standard input closes (Ctrl-D, or the end
    /// of a pipe); when standard input is not a terminal and is already at
    /// its end as the export starts (a background job `halctl export ... &`
    /// in a script, `< /dev/null`), until a signal. SIGINT, SIGTERM and
    /// SIGHUP end the hold early in every case, cleaning up.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    hold: u64,
    /// Also write the handle to this file (atomically, mode 0600); the file
    /// is removed when the region is released.
    #[arg(long, value_name = "PATH")]
    handle_file: Option<PathBuf>,
    /// Export read-only: importers map the region read-only. An anonymous
    /// cpu-shm region is then sealed against writes (F_SEAL_FUTURE_WRITE):
    /// only this process's own mapping can write it, and no importer can,
    /// not even by reopening its descriptor read-write through /proc. A named
    /// region's read-only export binds only the library (any process of the
    /// user can open the name read-write). Backends without read-only
    /// exports (the CUDA-like and Ascend-like simulators) refuse it.
    #[arg(long)]
    read_only: bool,
    /// Who may import: `anyone`, `same-user` (any process of this user,
    /// checked by the exporter's broker), or a comma-separated list of process ids,
    /// each as the importer's backend names it (an OS pid on cpu-shm and
    /// CUDA; on Ascend the runtime's own process id, which a refused
    /// `halctl import` prints). Default: the backend's (anyone on cpu-shm and
    /// CUDA, nobody on Ascend until allowed).
    #[arg(long, value_name = "anyone|same-user|PID,...", value_parser = parse_importers)]
    importers: Option<Importers>,
    /// Print one JSON object instead of the bare handle text.
    #[arg(long)]
    json: bool,
}

/// `anyone`, `same-user`, or process ids separated by commas.
fn parse_importers(s: &str) -> Result<Importers, String> {
    if s.trim().eq_ignore_ascii_case("anyone") {
        return Ok(Importers::Anyone);
    }
    if s.trim().eq_ignore_ascii_case("same-user") {
        return Ok(Importers::SameUser);
    }
    s.split(',')
        .map(|p| match p.trim().parse::<u32>() {
            Ok(pid) if pid > 0 => Ok(pid),
            _ => Err(format!(
                "`{}` is not a process id (give `anyone`, `same-user` or PID,PID,...)",
                p.trim()
            )),
        })
        .collect::<Result<Vec<u32>, String>>()
        .map(Importers::Pids)
}

/// How `--importers` reads in messages.
fn importers_text(importers: &Importers) -> String {
    match importers {
        Importers::BackendDefault => "the backend's default".to_string(),
        Importers::Anyone => "anyone".to_string(),
        Importers::SameUser => "any process of this user".to_string(),
        Importers::Pids(p) => p.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
    }
}

/// Arguments of `halctl import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(flatten)]
    source: HandleSource,
    /// Open the named region NAME instead of importing a handle (also one
    /// created by another program, e.g. Python's multiprocessing.shared_memory).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["handle", "handle_file"])]
    name: Option<String>,
    /// The backend: with --name, of the region (only cpu-shm has named
    /// regions); with a handle, a check (the handle names its backend, and
    /// a handle of another backend is refused, exit 2).
    #[arg(long, value_name = "NAME")]
    backend: Option<String>,
    /// Check that every byte has this value (decimal or 0x hex); exit 1 if not.
    #[arg(long, value_name = "BYTE", value_parser = crate::parse_byte)]
    expect: Option<u8>,
    /// Import read-only, and check that a write through the mapping is
    /// refused. A handle's access is decided by its export: --read-only
    /// takes a handle of a read-only export (a writable one fails, exit 1),
    /// and without it such a handle is refused (exit 1), since the import
    /// asks for writes. With --name: open the region read-only.
    #[arg(long)]
    read_only: bool,
    /// Take descriptors from the broker of user UID too (repeatable): an
    /// import of another user's export to anyone. By default an importer
    /// takes them only from its own user's brokers and root's.
    #[arg(long = "trust-uid", value_name = "UID")]
    trust_uid: Vec<u32>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct ExportOut {
    handle: String,
    backend: String,
    kind: &'static str,
    name: Option<String>,
    size: u64,
    fill: u8,
    pid: u32,
    handle_file: Option<PathBuf>,
    hold_seconds: u64,
    /// Until what the hold lasts: `time`, `stdin` or `signal`.
    hold_until: &'static str,
    read_only: bool,
    importers: String,
}

fn alloc_desc(dev: &dyn DynDevice, size: u64) -> AllocDesc {
    let info = dev.info();
    if info.capabilities.contains(Capabilities::MEMORY_IS_HOST) {
        AllocDesc::host(size)
    } else {
        AllocDesc::device(info.ordinal, size)
    }
}

/// `halctl export`.
pub fn export(args: &ExportArgs) -> CmdResult {
    let size = crate::nonzero_size(args.size)?;
    // Filling touches every page.
    crate::fits_in_memory(size, "the filled region")?;
    let signals = block_termination()?;
    let registry = Registry::new();
    let backend = backend::open(&registry, &args.backend)?;
    if args.name.is_some() && backend.id() != BackendId::CpuShm {
        return Err(Fail::usage(format!(
            "--name: backend `{}` has no named regions (use --backend cpu-shm)",
            backend.name()
        )));
    }
    let dev = backend::device(backend.as_ref(), 0)?;

    // The region: named (removed on drop) or anonymous.
    let alloc: Box<dyn DynAllocation> = match &args.name {
        Some(name) => Box::new(
            hal::cpu_shm::named::create_named(name, size, &Default::default())
                .ctx(&format!("creating named region {name:?}"))?,
        ),
        None => dev
            .allocate(&alloc_desc(dev.as_ref(), size))
            .ctx("allocating the region")?,
    };
    pattern::fill(&alloc, Content::Fill(args.fill))?;
    let opts = ExportOptions {
        read_only: args.read_only,
        importers: args.importers.clone().unwrap_or_default(),
        ..ExportOptions::default()
    };
    let exported = dev
        .export_memory(alloc.as_ref(), &opts)
        .ctx("exporting the region")?;
    let until = Until::for_hold(args.hold);
    // Ascend's default allow-list is empty: nobody may import yet.
    let nobody = opts.importers == Importers::BackendDefault
        && dev
            .info()
            .capabilities
            .contains(Capabilities::PID_ALLOW_LIST_DEFAULT_ON);
    let text = exported.to_text();
    if let Some(path) = &args.handle_file {
        hal::exchange::write_handle_file(path, exported.handle())
            .ctx(&format!("writing the handle file {}", path.display()))?;
    }
    let report = ExportOut {
        handle: text.clone(),
        backend: backend.name(),
        kind: exported.handle().kind.name(),
        name: args.name.clone(),
        size: alloc.len(),
        fill: args.fill,
        pid: std::process::id(),
        handle_file: args.handle_file.clone(),
        hold_seconds: args.hold,
        hold_until: until.name(),
        read_only: args.read_only,
        importers: match &opts.importers {
            Importers::BackendDefault if nobody => "nobody (the backend's default)".to_string(),
            Importers::BackendDefault => "anyone (the backend's default)".to_string(),
            other => importers_text(other),
        },
    };
    if args.json {
        out::json(&report)?;
    } else {
        out::line(&text)?;
        let region = match &args.name {
            Some(n) => format!("named region {n:?} (/dev/shm/{n})"),
            None => "anonymous region".to_string(),
        };
        let holding = match until {
            Until::StdinEnd => "until standard input closes or SIGINT/SIGTERM/SIGHUP".to_string(),
            Until::Signal => {
                "until SIGTERM, SIGINT or SIGHUP (standard input has ended, or is a terminal this background job may not read)".to_string()
            }
            Until::Time(s) => format!("for {s} s (SIGINT/SIGTERM/SIGHUP end it early)"),
        };
        let access = if args.read_only { " read-only" } else { "" };
        let who = match &opts.importers {
            Importers::BackendDefault if nobody => {
                ", importers: nobody yet (this backend's default; export with \
                 --importers anyone or --importers ID,... to allow some)"
                    .to_string()
            }
            Importers::BackendDefault => String::new(),
            other => format!(", importers: {}", importers_text(other)),
        };
        eprintln!(
            "halctl: exported{access} a {} {region} on {}, every byte {:#04x}{who}; holding it {holding}",
            out::bytes(report.size),
            report.backend,
            args.fill
        );
    }

    let why = hold(until, signals);
    // Release in order: the export (and its broker registration), the
    // region (a named one is unlinked here), then the handle file.
    drop(exported);
    drop(alloc);
    if let Some(path) = &args.handle_file {
        let _ = std::fs::remove_file(path);
    }
    // On stderr even with --json: the JSON on stdout is complete already.
    let why = match why {
        Release::Elapsed => "the hold time passed".to_string(),
        Release::StdinClosed => "standard input closed".to_string(),
        Release::Signal(s) => format!("{s} received"),
    };
    eprintln!("halctl: released the region ({why})");
    Ok(())
}

#[derive(Debug, Serialize)]
struct MismatchOut {
    offset: u64,
    expected: u8,
    found: u8,
}

#[derive(Debug, Serialize)]
struct ImportOut {
    source: &'static str,
    backend: String,
    name: Option<String>,
    size: u64,
    crc32: String,
    expect: Option<u8>,
    verified: Option<bool>,
    mismatches: u64,
    first_mismatch: Option<MismatchOut>,
    read_only: bool,
}

/// Read a handle from the command line or a file; undecodable input is
/// bad input (exit 2).
pub fn load_handle(source: &HandleSource) -> CmdResult<Handle> {
    match (&source.handle, &source.handle_file) {
        (Some(text), None) => Handle::from_text(text.trim())
            .map_err(|e| Fail::usage(format!("malformed handle: {e}"))),
        (None, Some(path)) => hal::exchange::read_handle_file(path).map_err(|e| match e {
            hal::Error::InvalidHandle(h) => {
                Fail::usage(format!("malformed handle in {}: {h}", path.display()))
            }
            // A file that is not there is bad input, as a bad handle is.
            hal::Error::NotFound { .. } => Fail::usage(format!(
                "--handle-file {}: no such file (export --handle-file writes it)",
                path.display()
            )),
            other => Fail::failed(format!("reading {}: {other}", path.display())),
        }),
        _ => Err(Fail::usage("give a handle: HANDLE or --handle-file PATH")),
    }
}

/// `halctl import`.
pub fn import(args: &ImportArgs) -> CmdResult {
    for &uid in &args.trust_uid {
        hal::exchange::trust_exporter_uid(uid);
    }
    let registry = Registry::new();
    let (mem, source, backend_name): (Box<dyn Memory>, &'static str, String) = match &args.name {
        Some(name) => {
            let backend = backend::open(&registry, args.backend.as_deref().unwrap_or("cpu-shm"))?;
            if backend.id() != BackendId::CpuShm {
                return Err(Fail::usage(format!(
                    "--name: backend `{}` has no named regions (use --backend cpu-shm)",
                    backend.name()
                )));
            }
            let region = if args.read_only {
                hal::cpu_shm::named::open_named_read_only(name, None)
            } else {
                hal::cpu_shm::named::open_named(name, None)
            }
            .ctx(&format!("opening named region {name:?}"))?;
            (Box::new(region), "name", backend.name())
        }
        None => {
            if args.source.handle.is_none() && args.source.handle_file.is_none() {
                return Err(Fail::usage(
                    "give a handle: HANDLE, --handle-file PATH, or --name NAME for a named region",
                ));
            }
            let handle = load_handle(&args.source)?;
            if let Some(want) = &args.backend {
                let have = handle.backend.name();
                if backend::canonical(want) != have {
                    return Err(Fail::usage(format!(
                        "--backend {want}: the handle is of backend `{have}` (leave --backend out: \
                         a handle names its backend)"
                    )));
                }
            }
            if handle.kind != HandleKind::Memory {
                return Err(Fail::usage(format!(
                    "this is a {} handle; import takes memory handles (try `halctl inspect`)",
                    handle.kind.name()
                )));
            }
            if handle.flags.contains(HandleFlags::READ_ONLY) && !args.read_only {
                return Err(Fail::failed(
                    "the handle is of a read-only export, and this import asks for writes; \
                     import it with --read-only",
                ));
            }
            let (backend, dev) = backend::for_handle(&registry, &handle)?;
            let creator = handle.creator_pid;
            let pid_kind = handle.pid_kind;
            let mapping = dev
                .import_memory(SharedHandle::from(handle), &ImportOptions::default())
                .map_err(|e| refused(e, creator, pid_kind, dev.as_ref()))?;
            (Box::new(mapping), "handle", backend.name())
        }
    };
    if args.read_only {
        check_read_only(mem.as_ref())?;
    }
    let checked = pattern::verify(mem.as_ref(), args.expect.map(Content::Fill))?;
    let verified = args.expect.map(|_| checked.ok());
    let report = ImportOut {
        source,
        backend: backend_name,
        name: args.name.clone(),
        size: mem.len(),
        crc32: format!("{:#010x}", checked.crc32),
        expect: args.expect,
        verified,
        mismatches: checked.mismatches,
        first_mismatch: checked
            .first_mismatch
            .map(|(offset, expected, found)| MismatchOut {
                offset,
                expected,
                found,
            }),
        read_only: mem.is_read_only(),
    };
    drop(mem);
    if args.json {
        out::json(&report)?;
    } else {
        let what = match &report.name {
            Some(n) => format!("named region {n:?}"),
            None => "the handle".to_string(),
        };
        out::line(format!(
            "imported {what} on {}: {} ({} bytes){}, crc32 {}",
            report.backend,
            out::bytes(report.size),
            report.size,
            if report.read_only {
                ", read-only (a write was refused)"
            } else {
                ""
            },
            report.crc32
        ))?;
        if let Some(b) = args.expect {
            match &report.first_mismatch {
                None => out::line(format!("verified: every byte is {b:#04x}"))?,
                Some(m) => out::line(format!(
                    "MISMATCH: {} byte(s) are not {b:#04x}; the first at offset {} is {:#04x}",
                    report.mismatches, m.offset, m.found
                ))?,
            }
        }
    }
    match verified {
        Some(false) => Err(Fail::failed(format!(
            "{} byte(s) differ from the expected value",
            report.mismatches
        ))),
        _ => Ok(()),
    }
}

/// An import's error; a refusal for want of permission says what the
/// operator can do about it: run the export with `--importers`.
fn refused(e: hal::Error, creator: u32, pid_kind: PidKind, dev: &dyn DynDevice) -> Fail {
    let hal::Error::PermissionDenied { reason, .. } = &e else {
        return Fail::hal("importing the handle", e);
    };
    // This process refused the exporter's broker: another user's.
    if let Some(uid) = reason
        .strip_prefix("the socket `")
        .and_then(|r| r.split_once("` is served by uid "))
        .and_then(|(_, r)| r.split(|c: char| !c.is_ascii_digit()).next())
        .filter(|u| !u.is_empty())
    {
        return Fail::failed(format!(
            "importing the handle: permission denied: the exporter (pid {creator}) runs as uid \
             {uid}, and this process takes descriptors only from its own user's and root's \
             brokers; to import it, trust that user: `halctl import --trust-uid {uid} ...`"
        ));
    }
    // The exporter's broker refused this process's user.
    if reason.contains("runs as another user and has not exported this to anyone") {
        return Fail::failed(format!(
            "importing the handle: permission denied: the exporter (pid {creator}) runs as \
             another user and serves other users only what is exported to anyone: run the \
             export with `--importers anyone`, or `--importers PID,...` naming this process \
             (pid {})",
            std::process::id()
        ));
    }
    let me = std::process::id();
    let (this, ids) = match (pid_kind, dev.process_id()) {
        (PidKind::Vendor, Ok(id)) => (
            format!("this process (runtime process id {id}, pid {me})"),
            "the importers' runtime process ids",
        ),
        _ => (format!("this process (pid {me})"), "the importers' pids"),
    };
    let code = vendor_code(&e.to_string())
        .map(|c| format!(" ({c})"))
        .unwrap_or_default();
    Fail::failed(format!(
        "importing the handle: permission denied{code}: the exporter (pid {creator}) has not \
         allowed {this} to import; run the export with `--importers anyone`, or \
         `--importers ID,...` naming {ids}"
    ))
}

/// The vendor's code and name in an error's text (`ascend error 207006
/// (ACL_ERROR_RT_NO_PERMISSION)`), kept when halctl words an error itself.
fn vendor_code(text: &str) -> Option<&str> {
    let at = text.find(" error ")?;
    let start = text[..at].rfind(|c: char| !c.is_ascii_alphanumeric() && c != '-')? + 1;
    let rest = &text[at + " error ".len()..];
    let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '-')?;
    if digits == 0 || !rest[digits..].starts_with(" (") {
        return None;
    }
    let close = rest.find(')')?;
    Some(&text[start..at + " error ".len() + close + 1])
}

/// With `--read-only`: the memory must say it is read-only, and a write
/// through it must be refused. The probe writes back the byte it read, so
/// that a library that let it through would change nothing.
fn check_read_only(mem: &dyn Memory) -> CmdResult {
    if !mem.is_read_only() {
        return Err(Fail::failed(
            "--read-only: the imported memory is not read-only",
        ));
    }
    let mut byte = [0u8; 1];
    mem.read(0, &mut byte).ctx("reading the first byte")?;
    match mem.write(0, &byte) {
        Err(hal::Error::PermissionDenied { .. }) => Ok(()),
        Err(e) => Err(Fail::failed(format!(
            "--read-only: a write was refused with an unexpected error: {e}"
        ))),
        Ok(()) => Err(Fail::failed(
            "--read-only: a write through the read-only mapping went through",
        )),
    }
}
