//! `halctl devices`: the backends compiled in, whether each is usable here,
//! their devices and capabilities.

use hal::registry::Registry;
use hal::{Availability, DeviceInfo};
use serde::Serialize;

use crate::backend;
use crate::fail::{CmdResult, Fail};
use crate::out;

#[derive(Debug, Serialize)]
struct DeviceOut {
    ordinal: u32,
    name: String,
    uuid: String,
    total_memory: u64,
    page_sizes: Vec<u64>,
    granularity_min: u64,
    granularity_recommended: u64,
    capabilities: Vec<&'static str>,
}

#[derive(Debug, Serialize)]
struct BackendOut {
    name: String,
    id: String,
    available: bool,
    reason: Option<String>,
    searched: Vec<String>,
    devices: Vec<DeviceOut>,
    /// Set when the backend is available but listing its devices failed.
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct DevicesOut {
    backends: Vec<BackendOut>,
    not_compiled_in: Vec<String>,
}

fn device_out(d: &DeviceInfo) -> DeviceOut {
    DeviceOut {
        ordinal: d.ordinal,
        name: d.name.clone(),
        uuid: hal::kit::os::hex(&d.uuid),
        total_memory: d.total_memory,
        page_sizes: d.page_sizes.clone(),
        granularity_min: d.granularity_min,
        granularity_recommended: d.granularity_recommended,
        capabilities: d.capabilities.labels(),
    }
}

/// `halctl devices`.
pub fn run(only: Option<&str>, json: bool) -> CmdResult {
    let registry = Registry::new();
    let entries = registry.entries();
    let wanted = match only {
        Some(name) => {
            // Validates the name: unknown is exit 2, not compiled in exit 1.
            let want = backend::canonical(name);
            if !entries.iter().any(|e| e.name == want) {
                return match backend::open(&registry, name) {
                    Err(f) => Err(f),
                    Ok(_) => Err(Fail::failed(format!("backend `{want}` is not listed"))),
                };
            }
            Some(want)
        }
        None => None,
    };
    let mut backends = Vec::new();
    for entry in entries
        .iter()
        .filter(|e| wanted.as_ref().is_none_or(|w| &e.name == w))
    {
        let (available, reason, searched) = match &entry.availability {
            Availability::Available => (true, None, Vec::new()),
            Availability::Unavailable { reason, searched } => (
                false,
                Some(reason.clone()),
                searched.iter().map(|p| p.display().to_string()).collect(),
            ),
        };
        let mut devices = Vec::new();
        let mut error = None;
        if available {
            match registry.open(&entry.name).and_then(|b| b.devices()) {
                Ok(list) => devices = list.iter().map(device_out).collect(),
                Err(e) => error = Some(e.to_string()),
            }
        }
        backends.push(BackendOut {
            name: entry.name.clone(),
            id: format!("{:#06x}", entry.id.to_wire()),
            available,
            reason,
            searched,
            devices,
            error,
        });
    }
    // What can be used first; each group in the registry's preference order.
    backends.sort_by_key(|b| !b.available);
    let not_compiled_in: Vec<String> = if wanted.is_some() {
        Vec::new()
    } else {
        backend::KNOWN
            .iter()
            .map(|id| id.name())
            .filter(|n| !entries.iter().any(|e| &e.name == n))
            .collect()
    };
    let report = DevicesOut {
        backends,
        not_compiled_in,
    };
    if json {
        return out::json(&report);
    }
    for b in &report.backends {
        match &b.reason {
            None => out::line(format!("{} ({}): available", b.name, b.id))?,
            Some(r) => out::line(format!("{} ({}): unavailable: {r}", b.name, b.id))?,
        }
        // The paths searched, each once: those the reason does not name already.
        let unnamed: Vec<&str> = b
            .searched
            .iter()
            .map(String::as_str)
            .filter(|p| !b.reason.as_deref().is_some_and(|r| names_path(r, p)))
            .collect();
        if !unnamed.is_empty() {
            out::line(format!("  searched: {}", unnamed.join(", ")))?;
        }
        if let Some(e) = &b.error {
            out::line(format!("  listing devices failed: {e}"))?;
        }
        for d in &b.devices {
            out::line(format!("  device {}: {}", d.ordinal, d.name))?;
            out::line(format!("    uuid         {}", d.uuid))?;
            out::line(format!(
                "    memory       {} ({} bytes)",
                out::bytes(d.total_memory),
                d.total_memory
            ))?;
            let pages: Vec<String> = d.page_sizes.iter().map(|p| out::bytes(*p)).collect();
            out::line(format!("    page sizes   {}", pages.join(", ")))?;
            out::line(format!(
                "    granularity  {} minimum, {} recommended",
                out::bytes(d.granularity_min),
                out::bytes(d.granularity_recommended)
            ))?;
            out::line(format!("    capabilities {}", d.capabilities.join(" ")))?;
        }
    }
    if !report.not_compiled_in.is_empty() {
        out::line(format!(
            "not compiled in: {}",
            report.not_compiled_in.join(", ")
        ))?;
    }
    Ok(())
}

/// True when `text` names `path` as a whole: not merely as the end of a
/// longer path (`libcuda.so.1` inside `/usr/lib/libcuda.so.1`).
fn names_path(text: &str, path: &str) -> bool {
    text.match_indices(path).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + path.len()..].chars().next();
        !before.is_some_and(|c| c == '/' || c.is_alphanumeric() || c == '-' || c == '_' || c == '.')
            && !after.is_some_and(|c| c == '/' || c.is_alphanumeric() || c == '-' || c == '_')
    })
}

#[cfg(test)]
mod tests {
    use super::names_path;

    #[test]
    fn a_path_is_named_only_as_a_whole() {
        let r = "tried libcuda.so.1: dlopen failed; /usr/lib/libcuda.so.1: no such file";
        assert!(names_path(r, "libcuda.so.1"));
        assert!(names_path(r, "/usr/lib/libcuda.so.1"));
        assert!(!names_path("tried /usr/lib/libcuda.so.1", "libcuda.so.1"));
        assert!(!names_path(r, "/usr/lib64/libcuda.so.1"));
        assert!(names_path("`/x/libcuda.so.1`.", "/x/libcuda.so.1"));
    }
}
