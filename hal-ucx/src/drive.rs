//! A caller that waits for an answer drives the worker itself
//! ([`crate::NodeOptions::spin`]): it makes the passes the progress thread
//! would ([`crate::progress::pass`], reached through [`Hub::pass`] so that
//! the importer's and exporter's sides, which wait here, do not import
//! the module that dispatches to them).

use std::time::Instant;

use crate::hub::Hub;

/// Drive the worker once from this thread when the baton is free; true
/// when that did anything.
fn drive(hub: &Hub) -> bool {
    match hub.baton.try_take() {
        Some(held) => {
            let (worked, _) = (hub.pass)(hub, false);
            hub.let_go(held);
            worked
        }
        None => false,
    }
}

/// Drive the worker from this thread until `done` holds, for at most the
/// node's spin ([`crate::NodeOptions::spin`]; zero: not at all); whether
/// `done` held. The caller holds no lock of the hub's: a pass handles
/// what the callbacks queued, which takes them.
pub(crate) fn spin_until(hub: &Hub, done: impl Fn() -> bool) -> bool {
    if hub.spin.is_zero() || hub.baton.held_here() {
        return done();
    }
    let _driving = hub.driving();
    let began = Instant::now();
    loop {
        if done() {
            return true;
        }
        if began.elapsed() >= hub.spin {
            return false;
        }
        if !drive(hub) {
            std::hint::spin_loop();
        }
    }
}
