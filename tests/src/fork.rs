//! The fork rule, checked with real `fork()`s on any backend: in a child,
//! every object its parent made (the backend once it has loaded its
//! runtime, devices, memory, streams, events, notifies) answers
//! [`Error::Forked`], and dropping them neither hangs nor calls into the
//! parent's vendor context; what the child makes for itself works; the
//! parent's objects still work after the child is gone; a backend the
//! parent made but never opened costs the child nothing.
//!
//! Call these from a test binary of their own (one test per binary, or
//! tests that take no hal lock in the parent while another forks): a
//! forked child keeps only the thread that forked, and a lock another
//! test's thread held at that moment would stay held in the child.

use hal_core::DeviceExt;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use hal_core::{
    AllocDesc, Backend, Device, Error, Event, EventFlags, Memory, Notify, Result, WaitOptions,
};

use crate::support::location;

/// What the parent's objects must answer in the child.
fn forked<T>(r: Result<T>, what: &str, report: &mut Vec<String>) {
    match r {
        Err(e @ Error::Forked { .. }) => {
            let text = e.to_string();
            let Error::Forked { made_in, now, .. } = e else {
                return;
            };
            if made_in == now || !text.contains("open the backend again") {
                report.push(format!(
                    "{what}: a Forked error that says too little: {text}"
                ));
            }
        }
        Err(e) => report.push(format!("{what}: {e} instead of Error::Forked")),
        Ok(_) => report.push(format!("{what}: worked in a forked child")),
    }
}

/// Drop, in a forked child, its copy of a value the parent keeps.
fn drop_in_child<T>(value: &T) {
    // SAFETY: called only in a forked child, on a value of the child's own
    // copy of the parent's memory; the child never uses `value` again and
    // leaves with `_exit`, so the value is dropped exactly once in this
    // process and the parent's own copy is untouched.
    drop(unsafe { std::ptr::read(value) });
}

/// Run `child` in a forked child; its report lines (empty: it passed).
fn in_forked_child(child: impl FnOnce() -> Vec<String>) -> Vec<String> {
    let (mut theirs, mut ours) = UnixStream::pair().expect("a socket pair for the child's report");
    // SAFETY: the caller's process holds no hal lock while it forks (see
    // the module documentation); the child writes its report and leaves
    // with `_exit`, running no exit handler of the parent.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    if pid == 0 {
        drop(theirs);
        let report = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child))
            .unwrap_or_else(|_| vec!["the child panicked".to_string()]);
        let _ = ours.write_all(report.join("\n").as_bytes());
        drop(ours);
        // SAFETY: ends the forked child at once.
        unsafe { libc::_exit(i32::from(!report.is_empty())) };
    }
    drop(ours);
    let mut text = String::new();
    let _ = theirs.read_to_string(&mut text);
    let mut status = 0;
    // SAFETY: waits for the child forked above; `status` is a valid place.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    let mut report: Vec<String> = text.lines().map(str::to_string).collect();
    if waited != pid || !libc::WIFEXITED(status) {
        report.push(format!(
            "the child did not exit normally (status {status:#x})"
        ));
    } else if libc::WEXITSTATUS(status) != 0 && report.is_empty() {
        report.push(format!(
            "the child exited with {}",
            libc::WEXITSTATUS(status)
        ));
    }
    report
}

/// A short cycle on a device made in the child: allocate, write and read
/// back, a stream synchronized, an event recorded and waited, a notify
/// signalled and waited.
fn works<D: Device>(dev: &D, report: &mut Vec<String>) {
    let mut step = |what: &str, r: Result<()>| {
        if let Err(e) = r {
            report.push(format!("in the child, {what}: {e}"));
        }
    };
    let desc = AllocDesc {
        location: location(dev),
        ..AllocDesc::host(1 << 21)
    };
    step(
        "a cycle on its own objects",
        (|| {
            let alloc = dev.allocate(&desc)?;
            if alloc.host_visible() {
                alloc.write(0, b"child")?;
                let mut back = [0u8; 5];
                alloc.read(0, &mut back)?;
                if &back != b"child" {
                    return Err(Error::invalid("the child's bytes did not read back"));
                }
            }
            let stream = dev.create_stream()?;
            let event = dev.create_event(EventFlags::default())?;
            dev.record_event(&stream, &event)?;
            dev.synchronize(&stream, None)?;
            event.wait(WaitOptions::default())?;
            let notify = dev.create_notify()?;
            notify.signal()?;
            notify.wait(WaitOptions::default())?;
            Ok(())
        })(),
    );
}

/// The parent makes and uses a device and one object of each kind, then
/// forks: the child is refused each of them with [`Error::Forked`] (the
/// backend itself too where `backend_refused`: a backend that loaded its
/// vendor runtime), drops them all without hanging, and, where
/// `fresh_works` (the backend's runtime survives a fork: no vendor
/// context), works with a backend of its own from `make`. The parent's
/// objects work after the child has exited.
pub fn parents_objects_are_refused_in_a_child<B: Backend>(
    make: impl Fn() -> B,
    backend_refused: bool,
    fresh_works: bool,
) {
    let backend = make();
    let dev = backend.open(0).expect("open device 0");
    let desc = AllocDesc {
        location: location(&dev),
        ..AllocDesc::host(1 << 21)
    };
    let alloc = dev.allocate(&desc).expect("allocate");
    let visible = alloc.host_visible();
    if visible {
        alloc.write(0, b"parent").expect("write");
    }
    let stream = dev.create_stream().expect("create a stream");
    let event = dev
        .create_event(EventFlags::default())
        .expect("create an event");
    dev.record_event(&stream, &event).expect("record");
    dev.synchronize(&stream, None).expect("synchronize");
    let notify = dev.create_notify().expect("create a notify");

    let report = in_forked_child(|| {
        let mut r = Vec::new();
        if backend_refused {
            forked(backend.open(0), "the parent's backend: open", &mut r);
            forked(backend.devices(), "the parent's backend: devices", &mut r);
        }
        forked(dev.allocate(&desc), "the parent's device: allocate", &mut r);
        forked(
            dev.create_stream(),
            "the parent's device: create_stream",
            &mut r,
        );
        forked(
            dev.create_notify(),
            "the parent's device: create_notify",
            &mut r,
        );
        forked(
            dev.synchronize(&stream, None),
            "the parent's stream: synchronize",
            &mut r,
        );
        forked(
            dev.record_event(&stream, &event),
            "the parent's event: record",
            &mut r,
        );
        forked(
            dev.synchronize_device(None),
            "the parent's device: synchronize",
            &mut r,
        );
        let mut buf = [0u8; 6];
        forked(alloc.read(0, &mut buf), "the parent's memory: read", &mut r);
        forked(
            alloc.write(0, b"child!"),
            "the parent's memory: write",
            &mut r,
        );
        forked(notify.signal(), "the parent's notify: signal", &mut r);
        forked(
            notify.wait(WaitOptions::timeout(std::time::Duration::ZERO)),
            "the parent's notify: wait",
            &mut r,
        );
        forked(
            event.wait(WaitOptions::timeout(std::time::Duration::ZERO)),
            "the parent's event: wait",
            &mut r,
        );
        // The parent's objects dropped in the child, as a child's scope
        // end drops them: none may hang or call the parent's context.
        drop_in_child(&notify);
        drop_in_child(&event);
        drop_in_child(&stream);
        drop_in_child(&alloc);
        drop_in_child(&dev);
        drop_in_child(&backend);
        if fresh_works {
            match make().open(0) {
                Ok(mine) => works(&mine, &mut r),
                Err(e) => r.push(format!("a backend made in the child: open: {e}")),
            }
        }
        r
    });
    assert!(
        report.is_empty(),
        "in the forked child:\n{}",
        report.join("\n")
    );
    // The parent's objects are untouched by the child's refusals and drops.
    let mut report = Vec::new();
    if visible {
        let mut back = [0u8; 6];
        match alloc.read(0, &mut back) {
            Ok(()) if &back == b"parent" => {}
            other => report.push(format!(
                "the parent's bytes after the child: {other:?} {back:?}"
            )),
        }
    }
    let r = notify
        .signal()
        .and_then(|()| notify.wait(WaitOptions::default()))
        .and_then(|()| dev.record_event(&stream, &event))
        .and_then(|()| dev.synchronize(&stream, None));
    if let Err(e) = r {
        report.push(format!(
            "the parent's notify, event and stream after the child: {e}"
        ));
    }
    works(&dev, &mut report);
    assert!(report.is_empty(), "in the parent:\n{}", report.join("\n"));
}

/// A backend the parent made and never opened (the postmaster's case: it
/// loaded the library, touched no vendor runtime) is the child's to use:
/// the child opens it and works with it, the fork having cost it nothing.
pub fn unopened_backend_works_in_a_child<B: Backend>(make: impl Fn() -> B) {
    let backend = make();
    let report = in_forked_child(|| {
        let mut r = Vec::new();
        match backend.open(0) {
            Ok(dev) => works(&dev, &mut r),
            Err(e) => r.push(format!("the parent's unopened backend: open: {e}")),
        }
        r
    });
    assert!(
        report.is_empty(),
        "in the forked child:\n{}",
        report.join("\n")
    );
}

/// The fork rule for a channel's publisher and subscriber and a group's
/// member made on `dev`: refused in a forked child, whose drops leave the
/// parent's channel open and its membership standing; the parent goes on.
pub fn channel_and_group_are_refused_in_a_child(dev: &dyn hal_core::dynamic::DynDevice) {
    use hal_core::channel::{ChannelOptions, Publisher, SubscribeOptions, Subscriber};
    use hal_core::group::{Group, GroupOptions};

    let name = format!(
        "fork-{}-{:x}",
        std::process::id(),
        u64::from_le_bytes(
            hal_core::kit::os::random_id()[..8]
                .try_into()
                .expect("8 bytes")
        )
    );
    let mut publisher = Publisher::create(dev, &name, &ChannelOptions::default().slots(2))
        .expect("create a channel");
    let subscriber = Subscriber::open(dev, &name, &SubscribeOptions::default()).expect("subscribe");
    let mut group = Group::join(&name, 1, &GroupOptions::default()).expect("join a group");
    let loan = publisher.loan().expect("loan");
    loan.write(0, b"before the fork").expect("write");
    loan.publish(15).expect("publish");

    let report = in_forked_child(|| {
        let mut report = Vec::new();
        forked(
            publisher.try_loan().map(drop),
            "Publisher::try_loan",
            &mut report,
        );
        forked(
            subscriber.try_receive().map(drop),
            "Subscriber::try_receive",
            &mut report,
        );
        forked(group.barrier(), "Group::barrier", &mut report);
        drop_in_child(&subscriber);
        drop_in_child(&publisher);
        drop_in_child(&group);
        report
    });
    assert!(report.is_empty(), "in the child: {}", report.join("; "));

    let control = hal_core::kit::os::private_path("channel", &name).expect("a path");
    assert!(
        control.exists(),
        "the child's drop closed the parent's channel"
    );
    let sample = subscriber.receive().expect("the parent receives");
    assert_eq!(sample.to_vec().expect("read"), b"before the fork");
    drop(sample);
    let loan = publisher.loan().expect("the parent loans");
    loan.publish(0).expect("the parent publishes");
    assert_eq!(
        group
            .all_gather(b"still a member")
            .expect("the parent's group"),
        vec![b"still a member".to_vec()]
    );
    drop((subscriber, publisher, group));
    assert!(!control.exists());
}

/// A forked child's copies of samples its parent holds in place: a release
/// of a detached one is [`Error::Forked`], and dropping one releases
/// nothing, so the publisher never overwrites bytes the parent still reads.
/// Both slots of the channel stay held through the child's attempts, and
/// come back once the parent releases them.
pub fn a_forked_child_cannot_release_the_parents_sample(dev: &dyn hal_core::dynamic::DynDevice) {
    use hal_core::channel::{ChannelOptions, Publisher, SubscribeOptions, Subscriber};

    let name = format!(
        "fork-release-{}-{:x}",
        std::process::id(),
        u64::from_le_bytes(
            hal_core::kit::os::random_id()[..8]
                .try_into()
                .expect("8 bytes")
        )
    );
    let mut publisher = Publisher::create(dev, &name, &ChannelOptions::default().slots(2))
        .expect("create a channel");
    let subscriber = Subscriber::open(dev, &name, &SubscribeOptions::default()).expect("subscribe");
    for bytes in [b"first", b"other"] {
        let loan = publisher.loan().expect("loan");
        loan.write(0, bytes).expect("write");
        loan.publish(5).expect("publish");
    }
    let held = subscriber.receive().expect("the first sample");
    let ticket = subscriber.receive().expect("the second sample").detach();
    assert!(
        matches!(publisher.try_loan(), Err(Error::Busy { .. })),
        "both slots are held before the fork"
    );

    let report = in_forked_child(|| {
        let mut report = Vec::new();
        // SAFETY: a ticket is plain data with no drop of its own; this is
        // the child's copy of the parent's, used once here.
        let copy = unsafe { std::ptr::read(&ticket) };
        forked(
            subscriber.release_ticket(copy),
            "Subscriber::release_ticket",
            &mut report,
        );
        drop_in_child(&held);
        report
    });
    assert!(report.is_empty(), "in the child: {}", report.join("; "));

    match publisher.try_loan() {
        Err(Error::Busy { .. }) => {}
        other => panic!(
            "the child released a slot the parent holds: a loan gave {:?}",
            other.map(|l| l.slot())
        ),
    }
    assert_eq!(
        held.to_vec().expect("read"),
        b"first",
        "the parent's sample"
    );
    drop(held);
    subscriber
        .release_ticket(ticket)
        .expect("the parent releases");
    let loan = publisher
        .try_loan()
        .expect("a slot back once the parent released");
    drop(loan);
    drop((subscriber, publisher));
}
