//! Driving the worker: a pass hands what its callbacks queued to the
//! exporter's side ([`serve`](crate::serve)) or the importer's
//! ([`dial`](crate::dial)) or to the link that handles the connection
//! (a group's, a channel's) and expires handshakes. The progress thread
//! makes passes and sleeps on the worker's event descriptor when there is
//! nothing to do; a caller waiting for an answer makes them itself
//! ([`crate::drive::spin_until`]) while the progress thread stays back.

use std::time::{Duration, Instant};

use crate::ffi::bindings::{ucp_conn_request_h, ucs_status_t};
use crate::hub::{lock, Event, Hub};
use crate::payload::Payload;
use crate::{dial, serve};

/// Run until the hub is asked to stop.
pub(crate) fn run(hub: &Hub) {
    // Polled until `spin` after the last work, then asleep on the worker's
    // event descriptor: a peer that answers within the spin is seen
    // without a wake-up.
    let mut last_work = Instant::now();
    while !hub.stopping() {
        // A caller drives the worker while it waits for an answer: two
        // threads polling one worker on a machine with few cores take the
        // CPU from each other, so this one stays out of the way.
        if let Some(back) = hub.stay_back() {
            std::thread::sleep(back);
            last_work = Instant::now();
            continue;
        }
        let held = hub.baton.take();
        let (worked, next) = pass(hub, true);
        if worked {
            last_work = Instant::now();
            continue;
        }
        if last_work.elapsed() < hub.spin {
            drop(held);
            std::hint::spin_loop();
            continue;
        }
        // Marked sleeping first, then the calls looked at a last time: a
        // call queued before the mark is run now, one queued after it
        // wakes the worker ([`Hub::on_thread`]).
        if hub.set_sleeping(true) || !hub.engine.arm() {
            hub.set_sleeping(false);
            continue;
        }
        // A caller may take the baton while this sleeps; whatever its
        // calls leave queued wakes this thread ([`Hub::let_go`]).
        drop(held);
        let wait = next
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1));
        let mut pfd = libc::pollfd {
            fd: hub.engine.efd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = wait.as_millis().clamp(1, 1000) as libc::c_int;
        // SAFETY: one valid pollfd, for the length given.
        unsafe { libc::poll(&mut pfd, 1, ms) };
        hub.set_sleeping(false);
        last_work = Instant::now();
    }
    hub.exited();
}

/// One pass with the baton held: drive the worker (until it has nothing
/// more when `drain`, as it must be before anyone sleeps on its event
/// descriptor; once otherwise, for a caller that polls, which looks at
/// what it waits for sooner), then hand what its callbacks queued to the
/// exporter's side, the importer's or a link, let the links do their own
/// work (a channel's forwarding: before the calls other threads left,
/// which a sample's answer need not wait for), run those calls, and
/// expire handshakes. True when anything was done; and when the next
/// handshake expires.
pub(crate) fn pass(hub: &Hub, drain: bool) -> (bool, Option<Instant>) {
    let mut worked = hub.engine.progress() != 0;
    if drain && worked {
        while hub.engine.progress() != 0 {}
    }
    serve::received(hub);
    // The progress thread runs the calls other threads left first, as it
    // always has; a caller's pass forwards first.
    let commanded_first = drain && hub.run_commands();
    let handled = handle_events(hub);
    let polled = hub.channels_link().is_some_and(|l| l.poll(hub));
    let commanded = hub.run_commands() || commanded_first;
    worked |= handled || polled || commanded;
    let next = serve::expire(hub);
    (worked, next)
}

/// Handle every queued event; true when there was one.
fn handle_events(hub: &Hub) -> bool {
    let mut any = false;
    while let Some(e) = hub.next_event() {
        any = true;
        match e {
            Event::Connect(req) => serve::accept(hub, req as ucp_conn_request_h),
            Event::Message(ep, head, payload) => message(hub, ep, &head, payload),
            Event::Failed(ep, status) => failed(hub, ep, status),
        }
    }
    any
}

/// A message: the importer's side when the endpoint is one of its
/// connections, the exporter's otherwise.
fn message(hub: &Hub, ep: usize, head: &[u8], payload: Payload) {
    if let Some(link) = hub.link(ep) {
        return link.message(hub, ep, head, payload);
    }
    if crate::group::wire::is_group(head) {
        if let Some(link) = hub.hand_to_acceptor(ep) {
            return link.message(hub, ep, head, payload);
        }
    }
    if crate::channel::wire::is_channel(head) {
        if let Some(link) = hub.hand_to_channels(ep) {
            return link.message(hub, ep, head, payload);
        }
    }
    let client = lock(&hub.tables).clients.get(&ep).cloned();
    match client {
        Some(c) => dial::message(hub, &c, head, payload),
        None => serve::message(hub, ep, head, payload),
    }
}

/// A connection's peer failed or closed.
fn failed(hub: &Hub, ep: usize, status: ucs_status_t) {
    if let Some(link) = hub.link(ep) {
        return link.failed(hub, ep, status);
    }
    let client = lock(&hub.tables).clients.get(&ep).cloned();
    match client {
        Some(c) => dial::failed(&c, status),
        None => serve::failed(hub, ep, status),
    }
}
