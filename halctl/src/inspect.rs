//! `halctl inspect`: decode a handle and print every field.

use clap::Args;
use hal::{FdSource, Handle, HandleFlags, Location};
use serde::Serialize;

use crate::fail::CmdResult;
use crate::region::load_handle;
use crate::{out, HandleSource};

/// Arguments of `halctl inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    source: HandleSource,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

const FLAG_NAMES: [(HandleFlags, &str); 5] = [
    (HandleFlags::READ_ONLY, "read-only"),
    (HandleFlags::ANY_IMPORTER, "any-importer"),
    (HandleFlags::HAS_ADDRESS, "has-address"),
    (HandleFlags::NAMED, "named"),
    (HandleFlags::NO_QUERY, "no-query"),
];

#[derive(Debug, Serialize)]
struct Fds {
    source: &'static str,
    count: usize,
    broker_socket: Option<String>,
}

#[derive(Debug, Serialize)]
struct Payload {
    len: usize,
    hex: String,
    /// The region name, for named regions.
    name: Option<String>,
}

#[derive(Debug, Serialize)]
struct InspectOut {
    version: u8,
    kind: &'static str,
    backend: String,
    backend_id: String,
    device: u32,
    device_uuid: String,
    location: String,
    size: u64,
    offset: u64,
    address: String,
    creator_pid: u32,
    creator_start: u64,
    creator_pid_ns: u64,
    same_pid_namespace: Option<bool>,
    creator_alive: bool,
    object_id: String,
    flags: Vec<&'static str>,
    flags_bits: String,
    pid_kind: &'static str,
    allowed_pids: Vec<u32>,
    importers: String,
    fds: Fds,
    payload: Payload,
    encoded_len: usize,
    text_len: usize,
    checksum: String,
}

fn describe(h: &Handle) -> InspectOut {
    let bytes = h.to_bytes();
    let checksum = bytes
        .len()
        .checked_sub(4)
        .and_then(|at| bytes.get(at..))
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .unwrap_or(0);
    let named = h.flags.contains(HandleFlags::NAMED);
    let importers = if h.flags.contains(HandleFlags::ANY_IMPORTER) {
        "anyone on this machine (another user's process once it trusts the exporter's user)"
            .to_string()
    } else if h.allowed_pids.is_empty() {
        "nobody yet (the exporter has to allow pids)".to_string()
    } else {
        format!("only the listed pids ({})", h.allowed_pids.len())
    };
    InspectOut {
        version: bytes.get(4).copied().unwrap_or(0),
        kind: h.kind.name(),
        backend: h.backend.name(),
        backend_id: format!("{:#06x}", h.backend.to_wire()),
        device: h.device,
        device_uuid: hal::kit::os::hex(&h.device_uuid),
        location: match h.location {
            Location::Device(d) => format!("device {d}"),
            Location::Host => "host".into(),
            Location::Managed => "managed".into(),
        },
        size: h.size,
        offset: h.offset,
        address: format!("{:#x}", h.address),
        creator_pid: h.creator_pid,
        creator_start: h.creator_start,
        creator_pid_ns: h.creator_pid_ns,
        same_pid_namespace: h.same_pid_namespace(),
        creator_alive: hal::kit::os::process_alive(h.creator_pid, h.creator_start),
        object_id: hal::kit::os::hex(&h.object_id),
        flags: FLAG_NAMES
            .iter()
            .filter(|(f, _)| h.flags.contains(*f))
            .map(|(_, n)| *n)
            .collect(),
        flags_bits: format!("{:#x}", h.flags.0),
        pid_kind: h.pid_kind.name(),
        allowed_pids: h.allowed_pids.clone(),
        importers,
        fds: match &h.fds {
            FdSource::None => Fds {
                source: "none",
                count: 0,
                broker_socket: None,
            },
            FdSource::Attached { count } => Fds {
                source: "attached",
                count: *count as usize,
                broker_socket: None,
            },
            FdSource::Broker { count, name } => Fds {
                source: "broker",
                count: *count as usize,
                broker_socket: Some(format!("@{name}")),
            },
        },
        payload: Payload {
            len: h.payload.len(),
            hex: hal::kit::os::hex(&h.payload),
            name: if named {
                std::str::from_utf8(&h.payload).ok().map(str::to_owned)
            } else {
                None
            },
        },
        encoded_len: bytes.len(),
        text_len: h.to_text().len(),
        checksum: format!("{checksum:#010x}"),
    }
}

/// `halctl inspect`.
pub fn run(args: &InspectArgs) -> CmdResult {
    let handle = load_handle(&args.source)?;
    let d = describe(&handle);
    if args.json {
        return out::json(&d);
    }
    let rows: Vec<(&str, String)> = vec![
        ("wire version", d.version.to_string()),
        ("kind", d.kind.to_string()),
        ("backend", format!("{} ({})", d.backend, d.backend_id)),
        ("device", d.device.to_string()),
        ("device uuid", d.device_uuid.clone()),
        ("location", d.location.clone()),
        ("size", format!("{} ({})", d.size, out::bytes(d.size))),
        ("offset", d.offset.to_string()),
        ("address", d.address.clone()),
        (
            "creator",
            format!(
                "pid {}, start {} ({})",
                d.creator_pid,
                d.creator_start,
                if d.creator_alive {
                    "alive"
                } else {
                    "not running"
                }
            ),
        ),
        (
            "pid namespace",
            match d.same_pid_namespace {
                _ if d.creator_pid_ns == 0 => "unknown".into(),
                Some(true) => format!("{} (this one)", d.creator_pid_ns),
                Some(false) => format!("{} (another one)", d.creator_pid_ns),
                None => d.creator_pid_ns.to_string(),
            },
        ),
        ("object id", d.object_id.clone()),
        (
            "flags",
            if d.flags.is_empty() {
                format!("none ({})", d.flags_bits)
            } else {
                format!("{} ({})", d.flags.join(", "), d.flags_bits)
            },
        ),
        (
            "allowed pids",
            if d.allowed_pids.is_empty() {
                "none".into()
            } else {
                d.allowed_pids
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ),
        (
            "pid kind",
            match d.pid_kind {
                "os" => "os (pids in the creator's pid namespace)".into(),
                "vendor" => "vendor (the vendor runtime's process ids)".into(),
                other => other.to_string(),
            },
        ),
        ("importers", d.importers.clone()),
        (
            "descriptors",
            match &d.fds.broker_socket {
                Some(s) => format!("{} from the exporter's broker on {s}", d.fds.count),
                None if d.fds.source == "attached" => {
                    format!("{} attached beside the handle", d.fds.count)
                }
                None => "none".into(),
            },
        ),
        (
            "payload",
            match &d.payload.name {
                Some(n) => format!("{} bytes: region name {n:?}", d.payload.len),
                None if d.payload.len == 0 => "empty".into(),
                None => format!("{} bytes: {}", d.payload.len, d.payload.hex),
            },
        ),
        (
            "encoding",
            format!(
                "{} bytes, {} characters as text, checksum {}",
                d.encoded_len, d.text_len, d.checksum
            ),
        ),
    ];
    for (k, v) in rows {
        out::line(format!("{k:<13} {v}"))?;
    }
    Ok(())
}
