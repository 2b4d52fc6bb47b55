//! Channels across real processes: broadcast to two subscriber processes
//! through a pool smaller than the stream (back-pressure), a queue shared
//! by two, a dead subscriber's slots back in the pool, and a dead
//! publisher reported to its subscriber, who keeps the sample it holds.

use hal_core::DeviceExt;
use std::time::Duration;

use hal_core::channel::{ChannelOptions, Mode, Publisher, SubscribeOptions, Subscriber};
use hal_core::dynamic::{DynDevice, DynMemRef, DynNotify, DynStream};
use hal_core::{AllocDesc, Backend, Capabilities as C, Error, Location, Memory};

use super::sync::{stream_model, StreamModel};
use crate::process::{self, report};
use crate::support::{must, must_be_unsupported, Suite, LONG, SHORT};

/// The child role that subscribes and receives.
pub(crate) const SUB_ROLE: &str = "channel-subscriber";
/// The child role that publishes, then waits to be killed.
pub(crate) const PUB_ROLE: &str = "channel-publisher";
/// The child role that receives a stream-ordered channel's samples.
pub(crate) const ORDERED_ROLE: &str = "channel-ordered-subscriber";

fn unique(tag: &str) -> String {
    format!(
        "conformance-{tag}-{}-{:x}",
        std::process::id(),
        u64::from_le_bytes(
            hal_core::kit::os::random_id()[..8]
                .try_into()
                .expect("8 bytes")
        )
    )
}

fn control_file(name: &str) -> std::path::PathBuf {
    hal_core::kit::os::private_path("channel", name).expect("a channel name")
}

/// The bytes of sample `seq`: `len` bytes derived from it.
fn sample_bytes(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq as usize * 31 + i) as u8).collect()
}

fn options(dev: &dyn DynDevice, slots: usize, mode: Mode) -> ChannelOptions {
    ChannelOptions::default()
        .slots(slots)
        .slot_size(dev.info().page_size())
        .mode(mode)
        .location(if dev.capabilities().contains(C::MEMORY_IS_HOST) {
            Location::Host
        } else {
            Location::Device(dev.info().ordinal)
        })
        .timeout(LONG)
}

/// A publisher on `dev`, or `None` where the device cannot share memory
/// (after checking that the channel says so).
fn publisher(dev: &dyn DynDevice, name: &str, opts: &ChannelOptions) -> Option<Publisher> {
    if !dev.capabilities().contains(C::IPC_MEMORY) {
        must_be_unsupported(
            Publisher::create(dev, name, opts),
            "ipc-memory",
            "Publisher::create",
        );
        assert!(
            !control_file(name).exists(),
            "a failed create left its file"
        );
        return None;
    }
    Some(must(
        Publisher::create(dev, name, opts),
        "Publisher::create",
    ))
}

/// A subscriber of `name` on `dev` whose receives wait up to [`LONG`].
#[track_caller]
fn subscribe(dev: &dyn DynDevice, name: &str) -> Subscriber {
    must(
        Subscriber::open(dev, name, &SubscribeOptions::default().timeout(Some(LONG))),
        "Subscriber::open",
    )
}

/// Publish `count` samples of `len` bytes, waiting for slots.
fn publish_all(p: &mut Publisher, count: u64, len: usize) {
    for seq in 0..count {
        let loan = must(p.loan(), "loan");
        must(loan.write(0, &sample_bytes(seq, len)), "write into a loan");
        assert_eq!(must(loan.publish(len as u64), "publish"), seq);
    }
}

/// Broadcast: two subscriber processes each receive all 24 samples, in
/// order, with their bytes, through 3 slots; once the publisher closes,
/// each is told so.
pub fn channel_broadcast_to_two_processes<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let name = unique("broadcast");
    let Some(mut p) = publisher(&dev, &name, &options(&dev, 3, Mode::Broadcast)) else {
        return;
    };
    let args = [("name", name.clone()), ("count", "24".to_string())];
    let mut kids = [s.spawn(SUB_ROLE, &args), s.spawn(SUB_ROLE, &args)];
    for k in &mut kids {
        k.expect("subscribed");
    }
    assert_eq!(must(p.subscribers(), "subscribers"), 2);
    publish_all(&mut p, 24, 100);
    for k in &mut kids {
        assert_eq!(k.expect("received"), "24 0..24");
    }
    drop(p);
    for mut k in kids {
        assert!(
            k.expect("closed").contains("closed"),
            "the subscriber is told the publisher closed"
        );
        k.finish();
    }
    assert!(
        !control_file(&name).exists(),
        "the channel's file outlived it"
    );
}

/// Loans and samples detached from their borrows (what the C library and
/// Python keep between calls): a detached loan publishes once, a stale one
/// (taken before another was published) is refused, and so is one of another
/// channel whose next sample has the same number, a detached sample's
/// bytes are read in place at its offset, and its slot stays held until
/// its ticket is released.
pub fn channel_tickets<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let name = unique("tickets");
    let Some(mut p) = publisher(&dev, &name, &options(&dev, 1, Mode::Broadcast)) else {
        return;
    };
    let sub = subscribe(&dev, &name);
    let stale = must(p.loan(), "loan").detach();
    let ticket = must(p.loan(), "loan again").detach();
    assert_eq!(
        (ticket.slot(), ticket.sequence(), ticket.offset()),
        (0, 0, 0)
    );
    assert_eq!(ticket.capacity(), dev.info().page_size());
    must(
        p.memory().write(ticket.offset(), &sample_bytes(0, 64)),
        "write into a detached loan's slot",
    );
    assert_eq!(must(p.publish_ticket(ticket, 64), "publish_ticket"), 0);
    assert!(
        matches!(
            p.publish_ticket(stale, 64),
            Err(Error::InvalidArgument { .. })
        ),
        "a loan taken before another was published is stale"
    );
    // A loan of another channel whose next sample has the same number:
    // refused where its slot is not this channel's next one (a channel of
    // three slots, whose sample 1 goes to slot 1, not 0), or its slots are
    // of another size.
    for (slots, size) in [(3, dev.info().page_size()), (1, 2 * dev.info().page_size())] {
        let other_name = unique("tickets-other");
        let mut other = must(
            Publisher::create(
                &dev,
                &other_name,
                &options(&dev, slots, Mode::Broadcast).slot_size(size),
            ),
            "Publisher::create",
        );
        assert_eq!(must(must(other.loan(), "loan").publish(0), "publish"), 0);
        let foreign = must(other.loan(), "loan").detach();
        assert_eq!(
            foreign.sequence(),
            1,
            "the same number as this channel's next"
        );
        assert!(
            matches!(
                p.publish_ticket(foreign, 64),
                Err(Error::InvalidArgument { .. })
            ),
            "a loan of another channel ({slots} slot(s) of {size} bytes) is refused"
        );
    }
    let sample = must(sub.receive(), "receive").detach();
    assert_eq!((sample.sequence(), sample.len()), (0, 64));
    let mut got = vec![0u8; 64];
    must(
        sub.memory().read(sample.offset(), &mut got),
        "read in place",
    );
    assert_eq!(got, sample_bytes(0, 64));
    assert!(
        matches!(p.try_loan(), Err(Error::Busy { .. })),
        "the detached sample still holds the only slot"
    );
    must(sub.release_ticket(sample), "release_ticket");
    let next = must(p.try_loan(), "try_loan after the release");
    assert_eq!(next.slot(), 0);
    drop(next);
}

/// A sample fills at most its slot, and a full pool says who holds it: a
/// sample one byte longer than the slot is refused (by `publish`, and by
/// `publish_on` where the channel is stream-ordered) and one as long as the
/// slot is published whole; the channel's listing counts what was
/// published; `try_loan` on a slot that two subscribers hold is busy with
/// two holders, and on a queued sample no subscriber took, with none.
pub fn channel_samples_fill_their_slot_and_busy_names_the_holders<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let ddev: &dyn DynDevice = &dev;
    let name = unique("bounds");
    let Some(mut p) = publisher(ddev, &name, &options(ddev, 2, Mode::Broadcast)) else {
        return;
    };
    let size = ddev.info().page_size();
    let subs = [subscribe(ddev, &name), subscribe(ddev, &name)];
    assert!(
        matches!(
            must(p.loan(), "loan").publish(size + 1),
            Err(Error::InvalidArgument { .. })
        ),
        "a sample longer than its slot"
    );
    let loan = must(p.loan(), "loan again");
    assert_eq!(loan.slot(), 0, "the refused loan's slot is loaned again");
    must(loan.write(0, &sample_bytes(0, 64)), "write into a loan");
    assert_eq!(must(loan.publish(size), "publish a whole slot"), 0);
    let listed = must(hal_core::channel::list(), "channel::list");
    let info = listed
        .iter()
        .find(|c| c.name == name)
        .expect("the channel is listed");
    assert_eq!(info.published, 1, "one sample published");
    let held: Vec<_> = subs
        .iter()
        .map(|sub| {
            let sample = must(sub.receive(), "receive");
            assert_eq!((sample.sequence(), sample.len()), (0, size));
            sample
        })
        .collect();
    assert_eq!(must(must(p.loan(), "loan").publish(8), "publish"), 1);
    let held_too: Vec<_> = subs
        .iter()
        .map(|sub| must(sub.receive(), "receive"))
        .collect();
    match p.try_loan() {
        Err(Error::Busy { holders, .. }) => assert_eq!(holders, 2, "both subscribers hold it"),
        other => panic!("try_loan of a slot two subscribers hold must be Busy, got {other:?}"),
    }
    drop((held, held_too));
    drop(subs);
    drop(p);

    let name = unique("bounds-queue");
    let mut q = must(
        Publisher::create(ddev, &name, &options(ddev, 1, Mode::Queue)),
        "Publisher::create",
    );
    assert_eq!(must(must(q.loan(), "loan").publish(8), "publish"), 0);
    match q.try_loan() {
        Err(Error::Busy { holders, .. }) => {
            assert_eq!(holders, 0, "a queued sample no subscriber took")
        }
        other => panic!("try_loan of a queued slot must be Busy, got {other:?}"),
    }
    drop(q);

    if !ddev.capabilities().contains(C::IPC_EVENT) {
        // channel_stream_ordered checks that such a channel is refused.
        return;
    }
    let name = unique("bounds-ordered");
    let mut o = must(
        Publisher::create(
            ddev,
            &name,
            &options(ddev, 1, Mode::Broadcast).stream_ordered(true),
        ),
        "a stream-ordered Publisher::create",
    );
    let stream = must(ddev.create_stream(), "create_stream");
    assert!(
        matches!(
            must(o.loan(), "loan").publish_on(ddev, &*stream, size + 1),
            Err(Error::InvalidArgument { .. })
        ),
        "a sample longer than its slot, in stream order"
    );
    assert_eq!(
        must(
            must(o.loan(), "loan").publish_on(ddev, &*stream, size),
            "publish_on a whole slot"
        ),
        0
    );
    must(ddev.synchronize(&*stream, Some(LONG)), "synchronize");
}

/// Stream order across processes: the publisher fills a slot with work
/// queued on its stream behind a gate (a notify nobody signalled yet) and
/// publishes it in stream order; the subscriber process receives it at
/// once, and a copy out of the slot that its own stream queues after
/// `wait_on` does not run until the publisher's stream ran, then brings the
/// bytes. Five more samples through the two slots are read on the host
/// (which waits for each slot's event) and released on the subscriber's
/// stream or by dropping them. Without interprocess events a stream-ordered
/// channel is refused as unsupported.
pub fn channel_stream_ordered<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let ddev: &dyn DynDevice = &dev;
    let caps = ddev.capabilities();
    let name = unique("ordered");
    let opts = options(ddev, 2, Mode::Broadcast).stream_ordered(true);
    if caps.contains(C::IPC_MEMORY) && !caps.contains(C::IPC_EVENT) {
        must_be_unsupported(
            Publisher::create(ddev, &name, &opts),
            "ipc-event",
            "a stream-ordered Publisher::create",
        );
        assert!(
            !control_file(&name).exists(),
            "a failed create left its file"
        );
        return;
    }
    let Some(mut p) = publisher(ddev, &name, &opts) else {
        return;
    };
    let mut kid = s.spawn(ORDERED_ROLE, &[("name", name.clone())]);
    kid.expect("subscribed");
    let stream = must(ddev.create_stream(), "create_stream");
    // On queued streams, the publisher's work waits behind a gate; a host-
    // synchronous stream runs it at once (the gate would block this thread).
    let gate = (stream_model(&dev) == StreamModel::Queued).then(|| {
        let gate = OpenOnPanic(must(ddev.create_notify(), "create_notify"));
        must(
            ddev.stream_wait_notify(&*stream, &*gate.0, Some(LONG)),
            "a stream waits for the gate",
        );
        gate
    });
    for seq in 0..6u64 {
        let loan = must(p.loan(), "loan");
        let slot = DynMemRef::Allocation(loan.memory());
        must(
            ddev.write_async(&*stream, slot, loan.offset(), sample_bytes(seq, 100)),
            "write_async into the slot",
        );
        assert_eq!(
            must(loan.publish_on(ddev, &*stream, 100), "publish_on"),
            seq
        );
        if seq == 0 {
            let waiting = kid.expect("waiting");
            if let Some(gate) = &gate {
                assert_eq!(
                    waiting, "queued",
                    "the subscriber's copy waits for the publisher"
                );
                must(hal_core::Notify::signal(&*gate.0), "open the gate");
            }
            assert_eq!(kid.expect("first"), "ok");
        }
    }
    assert_eq!(kid.expect("received"), "6");
    must(ddev.synchronize(&*stream, Some(LONG)), "synchronize");
    drop(p);
    assert!(kid.expect("closed").contains("closed"));
    kid.finish();
}

/// A subscriber dropped while a sample it released on a stream is still
/// queued behind work that has not run waits for that work: the drop
/// returns only after the gate that held the stream was opened (by another
/// thread, a while later).
pub fn channel_drop_waits_for_stream_releases<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let ddev: &dyn DynDevice = &dev;
    let name = unique("drop-waits");
    let Some(mut p) = ordered_publisher_on_queued_streams::<B>(&dev, &name) else {
        return;
    };
    let sub = subscribe(ddev, &name);
    let loan = must(p.loan(), "loan");
    must(loan.publish(8), "publish");
    let (stream, gate) = gated_stream(ddev);
    let sample = must(sub.receive(), "receive");
    must(
        sample.release_on(ddev, &*stream),
        "release_on behind the gate",
    );
    assert!(!must(ddev.query_stream(&*stream), "query_stream"));
    let opening = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            // Said before the gate opens: the release's event can only
            // complete after this store.
            opening.store(true, std::sync::atomic::Ordering::SeqCst);
            must(hal_core::Notify::signal(&*gate.0), "open the gate");
        });
        drop(sub);
        assert!(
            opening.load(std::sync::atomic::Ordering::SeqCst),
            "the subscriber's drop returned before its stream ran past the release"
        );
    });
    must(ddev.synchronize(&*stream, Some(LONG)), "synchronize");
}

/// A sample of a stream-ordered channel, and the same sample detached (what
/// the C library and Python hand out), waits on the host for the
/// publisher's stream: `Sample::wait` and `wait_ticket` time out at the
/// subscriber's timeout while the stream that fills the slot is held by a
/// gate, and once it opens, the bytes read are the published ones.
pub fn channel_ticket_waits_for_the_stream<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let ddev: &dyn DynDevice = &dev;
    let name = unique("ticket-waits");
    let Some(mut p) = ordered_publisher_on_queued_streams::<B>(&dev, &name) else {
        return;
    };
    let sub = must(
        Subscriber::open(
            ddev,
            &name,
            &SubscribeOptions::default().timeout(Some(SHORT)),
        ),
        "Subscriber::open",
    );
    let (stream, gate) = gated_stream(ddev);
    let loan = must(p.loan(), "loan");
    let slot = DynMemRef::Allocation(loan.memory());
    must(
        ddev.write_async(&*stream, slot, loan.offset(), sample_bytes(0, 64)),
        "write_async",
    );
    must(loan.publish_on(ddev, &*stream, 64), "publish_on");
    let sample = must(sub.receive(), "receive");
    assert!(
        matches!(sample.wait(), Err(Error::Timeout { .. })),
        "a sample's wait ends at the subscriber's timeout while the publisher's stream is held"
    );
    let ticket = sample.detach();
    assert!(
        matches!(sub.wait_ticket(&ticket), Err(Error::Timeout { .. })),
        "the slot's bytes are not there while the publisher's stream is held"
    );
    must(hal_core::Notify::signal(&*gate.0), "open the gate");
    must(
        ddev.synchronize(&*stream, Some(LONG)),
        "the publisher's stream runs",
    );
    must(sub.wait_ticket(&ticket), "wait_ticket once the stream ran");
    let mut got = vec![0u8; 64];
    must(sub.memory().read(ticket.offset(), &mut got), "read");
    assert_eq!(got, sample_bytes(0, 64));
    must(sub.release_ticket(ticket), "release_ticket");
}

/// A stream-ordered publisher of two slots on `dev`, where its streams are
/// queued (a gate can hold them) and it has interprocess events; `None`
/// elsewhere, where what the cases check cannot be arranged.
fn ordered_publisher_on_queued_streams<B: Backend>(
    dev: &B::Device,
    name: &str,
) -> Option<Publisher> {
    let ddev: &dyn DynDevice = dev;
    if !ddev.capabilities().contains(C::IPC_EVENT) || stream_model(dev) != StreamModel::Queued {
        return None;
    }
    publisher(
        ddev,
        name,
        &options(ddev, 2, Mode::Broadcast).stream_ordered(true),
    )
}

/// A stream held by a gate: nothing queued on it runs until the gate opens.
fn gated_stream(ddev: &dyn DynDevice) -> (Box<dyn DynStream>, OpenOnPanic) {
    let stream = must(ddev.create_stream(), "create_stream");
    let gate = OpenOnPanic(must(ddev.create_notify(), "create_notify"));
    must(
        ddev.stream_wait_notify(&*stream, &*gate.0, Some(LONG)),
        "a stream waits for the gate",
    );
    (stream, gate)
}

/// A gate that opens when its case panics before it opened it, so that a
/// failed case leaves no stream waiting for ever.
struct OpenOnPanic(Box<dyn DynNotify>);

impl Drop for OpenOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = hal_core::Notify::signal(&*self.0);
        }
    }
}

/// Child role of [`channel_stream_ordered`].
pub(crate) fn child_ordered_subscriber<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let ddev: &dyn DynDevice = &dev;
    let name = process::arg("name");
    let sub = subscribe(ddev, &name);
    assert!(sub.stream_ordered());
    report("subscribed", "");
    let stream = must(ddev.create_stream(), "create_stream");
    let page = ddev.info().page_size();
    let location = if ddev.capabilities().contains(C::MEMORY_IS_HOST) {
        Location::Host
    } else {
        Location::Device(ddev.info().ordinal)
    };
    let local = must(
        ddev.allocate(&AllocDesc {
            location,
            ..AllocDesc::host(page)
        }),
        "allocate",
    );
    let first = must(sub.receive(), "receive the first sample");
    must(first.wait_on(ddev, &*stream), "wait_on");
    must(
        ddev.copy_async(
            &*stream,
            DynMemRef::Allocation(&*local),
            0,
            DynMemRef::Mapping(sub.memory()),
            first.offset(),
            100,
        ),
        "copy_async out of the slot",
    );
    // The publisher's stream waits for its gate, which opens only after
    // this report: the copy queued behind `wait_on` has not run.
    std::thread::sleep(Duration::from_millis(50));
    let ran = must(ddev.query_stream(&*stream), "query_stream");
    report("waiting", if ran { "ran" } else { "queued" });
    must(ddev.synchronize(&*stream, Some(LONG)), "synchronize");
    let mut got = vec![0u8; 100];
    must(local.read(0, &mut got), "read the copy");
    assert_eq!(
        got,
        sample_bytes(0, 100),
        "the copy brought the published bytes"
    );
    must(first.release_on(ddev, &*stream), "release_on");
    report("first", "ok");
    for seq in 1..6u64 {
        let sample = must(sub.receive(), "receive");
        assert_eq!(sample.sequence(), seq);
        assert_eq!(
            must(sample.to_vec(), "read on the host"),
            sample_bytes(seq, 100)
        );
        if seq % 2 == 0 {
            must(sample.release_on(ddev, &*stream), "release_on");
        } else {
            drop(sample);
        }
    }
    report("received", "6");
    let end = sub.receive().map(|s| s.sequence());
    match end {
        Err(Error::Closed { what }) => report("closed", &what),
        other => panic!("the publisher's close must be reported, got {other:?}"),
    }
}

/// Queue: each of 30 samples reaches exactly one of two subscriber
/// processes.
pub fn channel_queue_shares_samples<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let name = unique("queue");
    let Some(mut p) = publisher(&dev, &name, &options(&dev, 4, Mode::Queue)) else {
        return;
    };
    let args = [("name", name.clone()), ("count", "all".to_string())];
    let mut kids = [s.spawn(SUB_ROLE, &args), s.spawn(SUB_ROLE, &args)];
    for k in &mut kids {
        k.expect("subscribed");
    }
    publish_all(&mut p, 30, 64);
    // Every slot released: all 30 were received.
    for _ in 0..4 {
        drop(must(p.loan(), "loan after the queue drained"));
    }
    drop(p);
    let mut seen = Vec::new();
    for mut k in kids {
        let got = k.expect("queued");
        seen.extend(
            got.split(',')
                .filter(|x| !x.is_empty())
                .map(|x| x.parse::<u64>().expect("a sequence")),
        );
        k.finish();
    }
    seen.sort();
    assert_eq!(seen, (0..30).collect::<Vec<_>>(), "each sample once");
    assert!(!control_file(&name).exists());
}

/// A subscriber process killed while it holds every slot: `try_loan` is
/// busy, then `loan` reaps it and gets a slot.
pub fn channel_dead_subscriber_returns_its_slots<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let name = unique("dead-sub");
    let Some(mut p) = publisher(&dev, &name, &options(&dev, 2, Mode::Broadcast)) else {
        return;
    };
    let mut kid = s.spawn(
        SUB_ROLE,
        &[("name", name.clone()), ("count", "hold".to_string())],
    );
    kid.expect("subscribed");
    publish_all(&mut p, 2, 8);
    kid.expect("holding");
    match p.try_loan() {
        Err(Error::Busy { .. }) => {}
        other => panic!("try_loan with every slot held must be Busy, got {other:?}"),
    }
    kid.kill();
    let loan = must(p.loan(), "loan after the holder died");
    drop(loan);
    assert_eq!(must(p.subscribers(), "subscribers"), 0);
}

/// A publisher process killed after publishing: the subscriber receives
/// what it published, keeps reading the sample it holds, then is told the
/// publisher died; its drop removes the channel's file.
pub fn channel_dead_publisher_is_reported<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    if !dev.capabilities().contains(C::IPC_MEMORY) {
        crate::report::not_exercised("its memory does not travel to another process");
        return;
    }
    let name = unique("dead-pub");
    let mut kid = s.spawn(PUB_ROLE, &[("name", name.clone())]);
    kid.expect("created");
    let sub = subscribe(&dev, &name);
    kid.send("go");
    kid.expect("published");
    let publisher_pid = kid.pid();
    kid.kill();
    let first = must(sub.receive(), "receive after the publisher died");
    assert_eq!(first.sequence(), 0);
    let second = must(sub.receive(), "the second sample");
    assert_eq!(must(second.to_vec(), "read"), sample_bytes(1, 50));
    drop(second);
    match sub.receive_timeout(Some(LONG)) {
        Err(Error::Closed { what }) => assert!(
            what.contains(&format!("pid {publisher_pid}")) && what.contains("died"),
            "{what}"
        ),
        other => panic!("a dead publisher must be reported, got {other:?}"),
    }
    assert_eq!(
        must(first.to_vec(), "a held sample after its publisher died"),
        sample_bytes(0, 50)
    );
    drop(first);
    drop(sub);
    assert!(
        !control_file(&name).exists(),
        "the last subscriber removed the file"
    );
}

/// Child role: subscribe to `name`, report `subscribed`, then by `count`:
/// a number: receive that many, check each, report `received N FIRST..END`,
/// then report the close; `all`: receive until the close, report the
/// sequences received (`queued`); `hold`: receive two, hold them, report
/// `holding` and wait to be killed.
pub(crate) fn child_subscriber<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let name = process::arg("name");
    let count = process::arg("count");
    let sub = subscribe(&dev, &name);
    report("subscribed", "");
    match count.as_str() {
        "hold" => {
            let a = must(sub.receive(), "receive");
            let b = must(sub.receive(), "receive");
            report("holding", "");
            process::wait_for_eof();
            drop((a, b));
        }
        "all" => {
            let mut got = Vec::new();
            loop {
                match sub.receive() {
                    Ok(sample) => {
                        let len = sample.len() as usize;
                        assert_eq!(
                            must(sample.to_vec(), "read"),
                            sample_bytes(sample.sequence(), len)
                        );
                        got.push(sample.sequence().to_string());
                        // Give the other subscriber a chance at the queue.
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(Error::Closed { .. }) => break,
                    Err(e) => panic!("receive: {e}"),
                }
            }
            report("queued", &got.join(","));
        }
        n => {
            let n: u64 = n.parse().expect("a count");
            let mut first = None;
            let mut next = None;
            for _ in 0..n {
                let sample = must(sub.receive(), "receive");
                let seq = sample.sequence();
                if let Some(expected) = next {
                    assert_eq!(seq, expected, "samples in order, none skipped");
                }
                first.get_or_insert(seq);
                next = Some(seq + 1);
                assert_eq!(
                    must(sample.to_vec(), "read"),
                    sample_bytes(seq, sample.len() as usize),
                    "sample {seq}'s bytes"
                );
            }
            report(
                "received",
                &format!("{n} {}..{}", first.unwrap_or(0), next.unwrap_or(0)),
            );
            match sub.receive() {
                Err(e @ Error::Closed { .. }) => report("closed", &e.to_string()),
                other => panic!("after the publisher closed, receive answered {other:?}"),
            }
        }
    }
}

/// Child role: create the channel `name`, report `created`, publish two
/// samples of 50 bytes once told `go`, report `published`, and wait to be
/// killed.
pub(crate) fn child_publisher<B: Backend>(s: &Suite<B>) {
    let dev = s.device();
    let name = process::arg("name");
    let mut p = must(
        Publisher::create(&dev, &name, &options(&dev, 4, Mode::Broadcast)),
        "Publisher::create",
    );
    report("created", "");
    process::wait_for("go");
    publish_all(&mut p, 2, 50);
    report("published", "");
    process::wait_for_eof();
}
