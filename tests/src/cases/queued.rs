//! What queued work uses outlives the values the caller drops: a notify
//! recorded or waited on by a stream stays valid for the stream after its
//! owner let go of it.
//!
//! A stream-ordered notify is memory the device reads and writes (CUDA's
//! `cuStreamWaitValue32`/`cuStreamWriteValue32` on a registered page). If
//! dropping the notify unmapped that memory while the stream still had the
//! operation queued, the device would write into whatever the addresses
//! hold next (a crash on the stand-in, memory corruption or a device fault
//! on a GPU). The cases keep a second, imported handle of each notify, so
//! the shared word is reachable after the first handle is dropped, and
//! check that the stream's operation happened on it.

use hal_core::DeviceExt;
use hal_core::{Access, Backend, Capabilities as C, Device, Notify, Reservation, WaitOptions};
use hal_core::{Vmm, VmmExt};

use super::sync::{block_stream, stream_model, StreamModel};
use super::util::{gran, share};
use crate::support::{must, must_be_unsupported, must_time_out, open_export, Suite, LONG, SHORT};

/// On a queued stream with stream-ordered and IPC notifies: a notify
/// recorded behind a blocked gate and then dropped is still written by the
/// stream (its importer sees the signal), and a notify waited on and then
/// dropped still holds the stream back until its importer signals it.
pub fn queued_notify_outlives_its_drop<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let caps = dev.capabilities();
    if !caps.contains(C::STREAM_ORDERED_NOTIFY | C::IPC_NOTIFY)
        || stream_model(&dev) != StreamModel::Queued
    {
        if caps.contains(C::STREAM_ORDERED_NOTIFY) && !caps.contains(C::IPC_NOTIFY) {
            crate::report::not_exercised("its notifies do not travel to another process");
        } else {
            not_queued(&dev);
        }
        return;
    }
    let stream = must(dev.create_stream(), "create_stream");
    let opts = open_export(caps);

    // Recorded, then dropped: the stream's write still reaches the word
    // (seen by an importer's wait, which a creator-only-wait vendor refuses).
    if !caps.contains(C::CREATOR_ONLY_NOTIFY_WAIT) {
        recorded_then_dropped(&dev, &stream, &opts);
    }

    // Waited on, then dropped: the stream still waits for the word.
    let waited = must(dev.create_notify(), "create_notify (waited)");
    let waited_ex = must(dev.export_notify(&waited, &opts), "export_notify");
    let waited_peer = must(
        dev.import_notify(share(&waited_ex), &Default::default()),
        "import_notify (waited)",
    );
    let done = must(dev.create_notify(), "create_notify (done)");
    must(
        dev.stream_wait_notify(&stream, &waited, Some(LONG)),
        "stream_wait_notify",
    );
    must(dev.record_notify(&stream, &done), "record_notify (done)");
    drop(waited);
    must_time_out(
        done.wait(WaitOptions::timeout(SHORT)),
        "work queued behind a wait for a notify its owner dropped",
    );
    must(waited_peer.signal(), "signal through the importer");
    must(
        done.wait(WaitOptions::timeout(LONG)),
        "work behind the wait, after the importer's signal",
    );
    must(dev.synchronize(&stream, Some(LONG)), "synchronize");
}

/// A notify recorded behind a closed gate, then dropped: its importer sees
/// the stream's signal once the gate opens.
fn recorded_then_dropped<D: Device>(dev: &D, stream: &D::Stream, opts: &hal_core::ExportOptions) {
    let gate = super::gate::gate(dev);
    let recorded = must(dev.create_notify(), "create_notify (recorded)");
    let recorded_ex = must(dev.export_notify(&recorded, opts), "export_notify");
    let recorded_peer = must(
        dev.import_notify(share(&recorded_ex), &Default::default()),
        "import_notify (recorded)",
    );
    block_stream(dev, stream, &gate);
    must(dev.record_notify(stream, &recorded), "record_notify");
    drop(recorded);
    must_time_out(
        recorded_peer.wait(WaitOptions::timeout(SHORT)),
        "a notify recorded behind a closed gate",
    );
    must(gate.signal(), "signal the gate");
    must(
        recorded_peer.wait(WaitOptions::timeout(LONG)),
        "the signal the stream recorded on a notify its owner dropped",
    );
    must(dev.synchronize(stream, Some(LONG)), "synchronize");
}

/// True when `dev` has queued streams, stream-ordered notifies and `more`:
/// what the dropped-value cases need.
fn queued_with<D: Device>(dev: &D, more: C) -> bool {
    dev.capabilities().contains(C::STREAM_ORDERED_NOTIFY | more)
        && stream_model(dev) == StreamModel::Queued
}

/// Report the case as not exercised: its device has no queued stream with
/// stream-ordered notifies to hold work back with, so nothing can wait.
fn not_queued<D: Device>(dev: &D) {
    let why = if dev.capabilities().contains(C::STREAM_ORDERED_NOTIFY) {
        "its streams are host-synchronous: no work is ever queued to wait for"
    } else {
        "it lacks stream-ordered notifies: no queued work can be held back"
    };
    crate::report::not_exercised(why);
}

/// What a gated stream's work waits for (`gate`, signalled by nobody yet)
/// and records after it (`done`).
struct GatedWork<D: Device> {
    gate: super::gate::Gate<D::Notify>,
    done: D::Notify,
}

/// A stream whose work waits, with no timeout, for the gate, then records
/// `done`.
fn gated<D: Device>(dev: &D) -> (D::Stream, GatedWork<D>) {
    let stream = must(dev.create_stream(), "create_stream");
    let gate = super::gate::gate(dev);
    let done = must(dev.create_notify(), "create_notify (done)");
    must(
        dev.stream_wait_notify(&stream, &gate, None),
        "stream_wait_notify with no timeout",
    );
    must(dev.record_notify(&stream, &done), "record_notify (done)");
    (stream, GatedWork { gate, done })
}

impl<D: Device> GatedWork<D> {
    /// The work behind the gate has not run, after `what` was dropped.
    fn still_waits(&self, what: &str) {
        must_time_out(
            self.done.wait(WaitOptions::timeout(SHORT)),
            &format!("work behind the unsignalled wait, after {what} was dropped"),
        );
    }

    /// Open the gate and require the work behind it to run.
    fn open(&self) {
        must(self.gate.signal(), "signal the gate");
        must(
            self.done.wait(WaitOptions::timeout(LONG)),
            "the work behind the gate, once it opened",
        );
    }
}

/// Drop `value` on a thread of its own and require the drop to return.
fn drop_returns<T: Send + 'static>(value: T, what: &str) {
    let (dropped, returned) = std::sync::mpsc::channel();
    let dropping = std::thread::spawn(move || {
        drop(value);
        let _ = dropped.send(());
    });
    assert!(
        returned.recv_timeout(LONG).is_ok(),
        "dropping {what} must return without waiting for queued work that waits for a notify \
         nobody signalled"
    );
    must(
        dropping
            .join()
            .map_err(|_| hal_core::Error::invalid("panicked")),
        "the dropping thread",
    );
}

/// On a queued stream with stream-ordered notifies: dropping a stream
/// whose work waits, with no timeout, for a notify nobody has signalled
/// returns without waiting for it (a peer that signals late, or never
/// because it crashed, cannot hang the dropping thread), and signalling
/// the notify afterwards harms nothing. What happens to the work is the
/// backend's: the vendor backends run it on when the notify comes and let
/// go of the stream then; the simulator abandons it.
pub fn dropped_stream_never_waits_for_its_work<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    if !queued_with(&dev, C::default()) {
        not_queued(&dev);
        return;
    }
    let (stream, gate) = gated(&dev);
    drop_returns(stream, "a stream whose work waits");
    gate.still_waits("its stream");
    // What became of the work is the backend's; the signal harms nothing.
    must(
        gate.gate.signal(),
        "signal the gate after the stream was dropped",
    );
}

/// A mapped reservation beside a gated stream; the mapping holds the
/// physical allocation.
fn gated_beside_a_mapping<D: Vmm>(dev: &D) -> (D::Stream, GatedWork<D>, D::Reservation) {
    let (stream, gate) = gated(dev);
    let g = gran(dev);
    let physical = must(dev.allocate_physical(g), "allocate_physical");
    let reservation = must(dev.reserve(g, g), "reserve");
    must(dev.map(&reservation, 0, &physical), "map");
    must(
        dev.set_access(&reservation, 0, g, Access::ReadWrite),
        "set_access",
    );
    must(reservation.write(0, b"mapped"), "write through the mapping");
    (stream, gate, reservation)
}

/// On a queued stream with stream-ordered notifies and VMM: dropping a
/// mapped reservation while a stream's work waits, with no timeout, for a
/// notify nobody has signalled returns without waiting for that work (the
/// vendor backends unmap after the device's queued work, which a crashed
/// peer may never let run), and the work runs once the notify comes.
pub fn dropped_reservation_never_waits_for_queued_work<B: Backend>(s: &Suite<B>)
where
    <B::Device as Vmm>::Reservation: Send + 'static,
{
    let dev = s.device();
    if !dev.capabilities().contains(C::VMM) {
        let g = dev.info().granularity_min;
        must_be_unsupported(dev.reserve(g, g), "vmm", "reserve");
        return;
    }
    if !queued_with(&dev, C::VMM) {
        not_queued(&dev);
        return;
    }
    let (_stream, gate, reservation) = gated_beside_a_mapping(&dev);
    drop_returns(reservation, "a mapped reservation");
    gate.still_waits("the reservation");
    gate.open();
}

/// On a queued stream with stream-ordered notifies: dropping device memory
/// while a stream's work waits, with no timeout, for a notify nobody has
/// signalled returns (a free that synchronized the device would wait for
/// a peer that may have crashed), and the work runs once the notify comes.
pub fn dropped_allocation_never_waits_for_queued_work<B: Backend>(s: &Suite<B>)
where
    <B::Device as Device>::Allocation: 'static,
{
    let dev = s.device();
    if !queued_with(&dev, C::default()) {
        not_queued(&dev);
        return;
    }
    let memory = must(
        dev.allocate(&hal_core::AllocDesc::device(dev.info().ordinal, 1 << 20)),
        "allocate device memory",
    );
    let (_stream, gate) = gated(&dev);
    drop_returns(memory, "device memory");
    gate.still_waits("the memory");
    gate.open();
}

/// Wait until `done()` holds, at most [`LONG`], or panic with `what`.
fn eventually(done: impl Fn() -> bool, what: &str) {
    let end = std::time::Instant::now() + LONG;
    while !done() {
        assert!(std::time::Instant::now() < end, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// A vendor backend's answer to a dropped reservation (not a case of the
/// suite: it counts what this process has left to finish, so the caller
/// runs it alone in its process): a reservation dropped while the device's
/// queued work waits for a notify is unmapped and freed once that work has
/// run. Panics on a failure, as the cases do.
pub fn dropped_reservation_is_freed_after_the_work<D: Vmm>(dev: &D)
where
    D::Reservation: Send + 'static,
{
    use hal_core::kit::stream::teardown::unfinished;
    assert_eq!(unfinished(), 0, "nothing left at the start");
    let (_stream, gate, reservation) = gated_beside_a_mapping(dev);
    drop_returns(reservation, "a mapped reservation");
    assert_eq!(unfinished(), 1, "the unmap waits for the work");
    gate.open();
    eventually(
        || unfinished() == 0,
        "the dropped reservation was never unmapped and freed",
    );
}

/// A vendor backend's answer to dropped device memory (not a case of the
/// suite: it counts what this process has left to finish, so the caller
/// runs it alone in its process): memory dropped while the device's queued
/// work waits for a notify is freed, at once or, where the free waits for
/// that work, once it has run. True when the free was still waiting after
/// the drop returned. Panics on a failure, as the cases do.
pub fn dropped_allocation_is_freed_after_the_work<D: Device>(dev: &D) -> bool
where
    D::Allocation: Send + 'static,
{
    use hal_core::kit::stream::teardown::unfinished;
    assert_eq!(unfinished(), 0, "nothing left at the start");
    let memory = must(
        dev.allocate(&hal_core::AllocDesc::device(dev.info().ordinal, 1 << 20)),
        "allocate device memory",
    );
    let (_stream, gate) = gated(dev);
    drop_returns(memory, "device memory");
    let waited = unfinished();
    assert!(waited <= 1, "one free handed over, not {waited}");
    gate.still_waits("the memory");
    gate.open();
    eventually(|| unfinished() == 0, "the dropped memory was never freed");
    waited == 1
}

/// A vendor backend's answer to a dropped stream (not a case of the suite:
/// the simulator abandons the work instead): a stream dropped while its
/// work waits for a notify runs that work once the notify is signalled,
/// and lets go of what the work held then. Panics on a failure, as the
/// cases do.
pub fn dropped_stream_runs_its_work_on<D: Device>(dev: &D) {
    let (stream, gate) = gated(dev);
    let kept = std::sync::Arc::new(());
    must(
        dev.hold_until_done(&stream, Box::new(std::sync::Arc::clone(&kept))),
        "hold_until_done",
    );
    // Returns although the stream's work waits for the gate.
    drop(stream);
    assert_eq!(
        std::sync::Arc::strong_count(&kept),
        2,
        "held while the work waits"
    );
    gate.still_waits("its stream");
    // The reaper has asked the stream by now (it asks every few
    // milliseconds): still busy, so still held.
    assert_eq!(
        std::sync::Arc::strong_count(&kept),
        2,
        "held while the work still waits, after the reaper asked"
    );
    gate.open();
    eventually(
        || std::sync::Arc::strong_count(&kept) == 1,
        "the dropped stream never let go of what its work held",
    );
}
