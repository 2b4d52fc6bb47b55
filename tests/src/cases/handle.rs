//! Handles that are corrupted, of the wrong kind, of another backend, or
//! forged: every one is refused with a typed error, never imported.

use hal_core::DeviceExt;
use hal_core::{
    Backend, BackendId, Capabilities as C, Device, Error, EventFlags, FdSource, Handle,
    HandleError, HandleKind, ImportOptions, Location, Memory, SharedHandle,
};
use hal_core::{Vmm, VmmExt};

use super::memory::ipc_memory_or_unsupported;
use super::util::share;
use crate::support::{alloc_filled, assert_bytes, must, must_fail, open_export, pattern, Suite};

#[track_caller]
fn must_be_invalid_handle(r: Result<Handle, HandleError>, what: &str) {
    match r {
        Err(e) => assert!(
            matches!(Error::from(e), Error::InvalidHandle(_)),
            "{what}: not an InvalidHandle error"
        ),
        Ok(h) => panic!("{what} decoded into {h:?}"),
    }
}

/// A handle text (and binary form) with flipped, truncated or foreign
/// characters is refused by the decoder with `Error::InvalidHandle`; the
/// unmodified text decodes to the same handle.
pub fn handle_corrupted_text_refused<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 1, 70);
    let handle = if ipc_memory_or_unsupported(&dev, &a) {
        must(dev.export_memory(&a, &open_export(caps)), "export_memory")
            .handle()
            .clone()
    } else {
        synthetic(s.backend().id(), dev.info().uuid)
    };
    let text = handle.to_text();
    assert_eq!(
        super::util::decode(&text),
        handle,
        "the unmodified text decodes"
    );
    let chars: Vec<char> = text.chars().collect();
    let body = text.find('.').map_or(0, |i| i + 1);
    // Every position but the last character (whose low bits may be padding
    // in a base-64 form).
    for pos in body..chars.len().saturating_sub(1) {
        let mut flipped = chars.clone();
        flipped[pos] = if chars[pos] == 'A' { 'B' } else { 'A' };
        let t: String = flipped.into_iter().collect();
        must_be_invalid_handle(
            Handle::from_text(&t),
            &format!("the text with character {pos} changed"),
        );
    }
    for (what, t) in [
        ("an empty text", String::new()),
        ("a truncated text", text[..text.len() / 2].to_string()),
        (
            "a text with a character outside the alphabet",
            format!("{}!{}", &text[..body + 3], &text[body + 4..]),
        ),
        ("a text with another prefix", format!("x{text}")),
        ("a text with trailing characters", format!("{text}AAAA")),
    ] {
        must_be_invalid_handle(Handle::from_text(&t), what);
    }
    let bytes = handle.to_bytes();
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut b = bytes.clone();
            b[i] ^= bit;
            must_be_invalid_handle(
                Handle::from_bytes(&b),
                &format!("the binary form with byte {i} ^ {bit:#x}"),
            );
        }
    }
    must_be_invalid_handle(
        Handle::from_bytes(&bytes[..bytes.len() - 1]),
        "a truncated binary form",
    );
}

fn synthetic(backend: BackendId, uuid: [u8; 16]) -> Handle {
    Handle {
        kind: HandleKind::Memory,
        backend,
        device: 0,
        device_uuid: uuid,
        location: Location::Host,
        size: 4096,
        offset: 0,
        address: 0,
        creator_pid: std::process::id(),
        creator_start: 0,
        creator_pid_ns: hal_core::kit::os::pid_namespace(),
        object_id: hal_core::kit::os::random_id(),
        flags: hal_core::HandleFlags::default(),
        pid_kind: hal_core::PidKind::Os,
        allowed_pids: Vec::new(),
        fds: FdSource::None,
        payload: Vec::new(),
    }
}

#[track_caller]
fn must_be_wrong_kind<T>(r: hal_core::Result<T>, cap: Option<C>, caps: C, what: &str) {
    match r {
        Err(Error::InvalidHandle(HandleError::WrongKind { .. })) => {}
        Err(e) if e.is_unsupported() && cap.is_some_and(|c| !caps.contains(c)) => {}
        Err(e) => panic!("{what}: expected InvalidHandle(WrongKind), got {e} ({e:?})"),
        Ok(_) => panic!("{what}: a handle of the wrong kind was imported"),
    }
}

/// A handle of one kind given to another kind's import is refused with
/// `InvalidHandle(WrongKind)` (or Unsupported where the device cannot import
/// that kind at all).
pub fn handle_wrong_kind_refused<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let opts = ImportOptions::default();
    let a = alloc_filled(&dev, 1, 71);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    must_be_wrong_kind(
        dev.import_event(share(&ex), &opts),
        Some(C::IPC_EVENT),
        caps,
        "a memory handle given to import_event",
    );
    must_be_wrong_kind(
        dev.import_notify(share(&ex), &opts),
        Some(C::IPC_NOTIFY),
        caps,
        "a memory handle given to import_notify",
    );
    must_be_wrong_kind(
        dev.import_physical(share(&ex), &opts),
        Some(C::VMM),
        caps,
        "a memory handle given to import_physical",
    );
    let mut relabelled = share(&ex);
    relabelled.handle.kind = HandleKind::Event;
    must_be_wrong_kind(
        dev.import_memory(relabelled, &opts),
        None,
        caps,
        "a memory handle relabelled as an event",
    );
    if caps.contains(C::IPC_NOTIFY) {
        let n = must(dev.create_notify(), "create_notify");
        let exn = must(dev.export_notify(&n, &open_export(caps)), "export_notify");
        must_be_wrong_kind(
            dev.import_memory(share(&exn), &opts),
            None,
            caps,
            "a notify handle given to import_memory",
        );
    }
    if caps.contains(C::IPC_EVENT) {
        let e = must(
            dev.create_event(EventFlags {
                interprocess: true,
                timing: false,
            }),
            "create_event",
        );
        let exe = must(dev.export_event(&e, &open_export(caps)), "export_event");
        must_be_wrong_kind(
            dev.import_memory(share(&exe), &opts),
            None,
            caps,
            "an event handle given to import_memory",
        );
        if caps.contains(C::IPC_NOTIFY) {
            must_be_wrong_kind(
                dev.import_notify(share(&exe), &opts),
                None,
                caps,
                "an event handle given to import_notify",
            );
        }
    }
    if caps.contains(C::VMM) {
        let g = dev.info().granularity_min;
        let p = must(dev.allocate_physical(g), "allocate_physical");
        let exp = must(
            dev.export_physical(&p, &open_export(caps)),
            "export_physical",
        );
        must_be_wrong_kind(
            dev.import_memory(share(&exp), &opts),
            None,
            caps,
            "a physical handle given to import_memory",
        );
    }
}

/// A handle that names another backend is refused with
/// `InvalidHandle(WrongBackend)`, whether it comes with descriptors or as
/// text.
pub fn handle_wrong_backend_refused<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let a = alloc_filled(&dev, 1, 72);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    let me = s.backend().id();
    let others = [
        if me == BackendId::CpuShm {
            BackendId::MockCuda
        } else {
            BackendId::CpuShm
        },
        if me == BackendId::MockAscend {
            BackendId::Ascend
        } else {
            BackendId::MockAscend
        },
        BackendId::External(0xfe01),
    ];
    for other in others {
        let mut shared = share(&ex);
        shared.handle.backend = other;
        let by_text = SharedHandle::from(super::util::decode(&shared.handle.to_text()));
        for (how, sh) in [("with descriptors", shared), ("as text", by_text)] {
            match dev.import_memory(sh, &ImportOptions::default()) {
                Err(Error::InvalidHandle(HandleError::WrongBackend { .. })) => {}
                Err(e) => panic!(
                    "a {other} handle {how}: expected InvalidHandle(WrongBackend), got {e} ({e:?})"
                ),
                Ok(_) => panic!("a {other} handle {how} was imported by {me}"),
            }
        }
    }
}

/// Handles that decode but lie are refused: a size larger than the exported
/// memory, descriptors of another (smaller) export, an object id the
/// exporter never made, an altered vendor payload. An offset that runs past the export is refused or
/// ignored, never a window onto bytes that were not exported.
pub fn handle_forged_refused<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    let page = dev.info().page_size();
    let a = alloc_filled(&dev, 2, 73);
    if !ipc_memory_or_unsupported(&dev, &a) {
        return;
    }
    let small = alloc_filled(&dev, 1, 74);
    let ex = must(dev.export_memory(&a, &open_export(caps)), "export_memory");
    let ex_small = must(
        dev.export_memory(&small, &open_export(caps)),
        "export_memory",
    );
    let opts = ImportOptions::default();
    let len = ex.handle().size;

    let mut bigger = share(&ex);
    bigger.handle.size = len * 8;
    let _ = must_fail(
        dev.import_memory(bigger, &opts),
        "a handle that claims more bytes than were exported",
    );

    // An offset that would run past the export: refused, or ignored in
    // favour of the vendor payload; never a window beyond the export.
    let mut shifted = share(&ex);
    shifted.handle.offset += page;
    match dev.import_memory(shifted, &opts) {
        Err(e) if e.is_unsupported() => panic!("a shifted handle must not be Unsupported: {e}"),
        Err(_) => {}
        Ok(m) => {
            assert_eq!(m.len(), len, "a shifted handle mapped another length");
            assert_bytes(
                &m,
                0,
                &pattern(73, len),
                "a shifted handle mapped other bytes",
            );
        }
    }

    let small_len = ex_small.handle().size;
    if small_len < len {
        let swapped = SharedHandle {
            handle: ex.handle().clone(),
            fds: share(&ex_small).fds,
        };
        // Refused, unless both exports live in one memory object (a vendor
        // pool): then the mapping must still be the handle's bytes.
        if !swapped.fds.is_empty() {
            match dev.import_memory(swapped, &opts) {
                Err(e) if e.is_unsupported() => {
                    panic!("swapped descriptors must not be Unsupported: {e}")
                }
                Err(_) => {}
                Ok(m) => {
                    assert_eq!(m.len(), len, "swapped descriptors mapped another length");
                    assert_bytes(
                        &m,
                        0,
                        &pattern(73, len),
                        "a handle with the descriptors of a smaller export",
                    );
                    eprintln!("{}: a handle imported with another export's descriptors (one pool memory object)", s.backend().id());
                }
            }
        }
    }

    // Every byte of the vendor payload altered in turn: refused, or the
    // very same bytes; never another window onto the descriptors' memory.
    for i in 0..ex.handle().payload.len() {
        let mut forged = share(&ex);
        forged.handle.payload[i] ^= 0xff;
        if let Ok(m) = dev.import_memory(forged, &opts) {
            assert_eq!(
                m.len(),
                len,
                "payload byte {i} altered: the mapping has another length"
            );
            assert_bytes(
                &m,
                0,
                &pattern(73, len),
                &format!("payload byte {i} altered"),
            );
        }
    }
    let mut unknown = ex.handle().clone();
    unknown.object_id = hal_core::kit::os::random_id();
    let _ = must_fail(
        dev.import_memory(SharedHandle::from(unknown), &opts),
        "a handle text with an object id the exporter never made",
    );
}
