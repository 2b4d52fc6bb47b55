//! Which SoCs have IPC events. The runtime documents IPC events
//! (`aclrtIpcGetEventHandle`, `aclrtIpcOpenEventHandle`) on Atlas A2, Atlas
//! A3 and Ascend 950PR only (`vendor/ascend.md`, "Semantics"). The SoC is
//! known by the name `aclrtGetSocName` gives:
//!
//! | SoC name | product | IPC events |
//! |---|---|---|
//! | `Ascend910B` and a digit (`Ascend910B1` .. `Ascend910B4`, `Ascend910B2C`, `Ascend910B4-1`) | Atlas A2 | claimed |
//! | `Ascend910_93..` (`Ascend910_9391`, `Ascend910_9382`, ...) | Atlas A3 | claimed |
//! | `Ascend950PR..` | Ascend 950PR | claimed |
//! | `Ascend310..`, `Ascend610..`, `Ascend910A`, `Ascend910Pro..`, `Ascend910Premium..`, `Ascend910B` alone | earlier products | not claimed |
//! | anything else, or no name | unknown | asked of the runtime |
//!
//! An unknown SoC (a newer one, a runtime without `aclrtGetSocName`) is
//! not assumed either way: the runtime is asked, by creating an event with
//! `ACL_EVENT_IPC` and taking its IPC handle; IPC events are claimed only
//! when both succeed.

use hal_core::Result;

use crate::ffi::bindings::ACL_EVENT_IPC;
use crate::ffi::result::event;
use crate::ffi::sys::Runtime;

/// What the runtime's documentation says of a SoC's IPC events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Documented {
    /// One of the SoCs the documentation names: IPC events are there.
    Yes,
    /// An earlier product, outside the documentation's list.
    No,
    /// A name the list does not classify: ask the runtime.
    Unknown,
}

/// What the documentation says of the IPC events of SoC `name`.
pub(crate) fn ipc_events(name: &str) -> Documented {
    let a2 = name
        .strip_prefix("Ascend910B")
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    let a3 = name.starts_with("Ascend910_93");
    let pr950 = name.starts_with("Ascend950PR");
    if a2 || a3 || pr950 {
        return Documented::Yes;
    }
    let earlier = [
        "Ascend310",
        "Ascend610",
        "Ascend910A",
        "Ascend910Pro",
        "Ascend910Premium",
    ];
    if name == "Ascend910B" || earlier.iter().any(|p| name.starts_with(p)) {
        return Documented::No;
    }
    Documented::Unknown
}

/// True when the current device has IPC events: by the SoC's name where
/// the documentation classifies it, else by asking the runtime
/// ([`probe`]).
pub(crate) fn has_ipc_events(rt: &Runtime, soc: &str) -> bool {
    match ipc_events(soc) {
        Documented::Yes => true,
        Documented::No => false,
        Documented::Unknown => probe(rt),
    }
}

/// Ask the runtime whether the current device has IPC events: an event
/// created with `ACL_EVENT_IPC` whose IPC handle the runtime gives. The
/// event is destroyed again; any refusal is a no, logged.
fn probe(rt: &Runtime) -> bool {
    let asked = || -> Result<()> {
        // Every entry point first: none missing once the event is made.
        rt.create_event_ex_with_flag()?;
        rt.ipc_get_event_handle()?;
        rt.destroy_event()?;
        let made = event::create(rt, ACL_EVENT_IPC)?;
        let got = event::ipc_handle(rt, &made).map(drop);
        let destroyed = event::destroy(rt, made);
        got.and(destroyed)
    };
    match asked() {
        Ok(()) => true,
        Err(e) => {
            log::info!("the Ascend runtime gives no IPC event on this SoC: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_socs_are_classified_and_the_rest_asked() {
        for yes in [
            "Ascend910B1",
            "Ascend910B2C",
            "Ascend910B4-1",
            "Ascend910_9391",
            "Ascend910_9362",
            "Ascend950PR_9599",
        ] {
            assert_eq!(ipc_events(yes), Documented::Yes, "{yes}");
        }
        for no in [
            "Ascend910B",
            "Ascend910A",
            "Ascend910ProB",
            "Ascend910PremiumA",
            "Ascend310P3",
            "Ascend310B1",
            "Ascend610Lite",
        ] {
            assert_eq!(ipc_events(no), Documented::No, "{no}");
        }
        for unknown in [
            "",
            "Ascend950DT_9591",
            "Ascend910_9591",
            "Ascend910C",
            "Ascend910BX",
        ] {
            assert_eq!(ipc_events(unknown), Documented::Unknown, "{unknown}");
        }
    }
}
