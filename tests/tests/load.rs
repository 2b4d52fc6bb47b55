//! Load: many processes importing and closing the same and different
//! handles at once, with notifies flowing, then counting what is left.
//!
//! An exporter process makes one shared region (three pages of a known
//! pattern and a page of per-worker stamp slots), eight more regions of
//! their own patterns, and two notifies per worker, exports them all, and
//! starts the workers. Each worker, in every cycle, imports the shared
//! region from its handle text (the exporter's broker serves the
//! descriptors), checks every byte, writes its stamp and reads it back,
//! closes it, imports one of the eight others, checks it and closes it; every
//! tenth cycle it signals the exporter and waits for its answer. Afterwards
//! every worker's and the exporter's descriptor and mapping counts are back
//! to their starting values, no importer is counted any more, and every
//! byte is what it should be.
//!
//! The full size runs in every default run: on a two-core machine a debug
//! build takes about 4 seconds (a release build,
//! `cargo test -p hal-tests --release --test load`, less).

use hal_core::DeviceExt;
mod reliability;

use std::time::{Duration, Instant};

use hal_core::exchange;
use hal_core::{
    AllocDesc, Allocation, Device, ExportOptions, ImportOptions, Memory, Notify, SharedHandle,
    WaitOptions,
};
use hal_cpu_shm::CpuShm;
use reliability::*;

/// Regions the workers take turns on ("different handles").
const OTHERS: u32 = 8;
/// Pages of pattern in the shared region; one more page holds the stamps.
const SHARED_PAGES: u64 = 3;
/// A ping-pong with the exporter every this many cycles.
const PING_EVERY: u32 = 10;

#[test]
fn load_32_processes_x_1000_cycles() {
    run_load(32, 1000);
}

fn run_load(workers: u32, cycles: u32) {
    let start = Instant::now();
    let kid = Kid::spawn(
        "exporter",
        &[
            ("workers", workers.to_string()),
            ("cycles", cycles.to_string()),
        ],
    );
    let prefix = format!("hal-rel-{}-", kid.pid());
    let _sweep = ShmSweep(prefix.clone());
    let out = kid.finish();
    assert_no_shm(&prefix);
    for line in out.lines().filter(|l| l.starts_with("note: ")) {
        eprintln!("{}", &line[6..]);
    }
    eprintln!(
        "{workers} processes x {cycles} cycles: {:.2?} in all",
        start.elapsed()
    );
}

/// The child entry point: a role in a child process its parent started.
#[test]
#[ignore = "child entry point: run by its parent"]
fn __child() {
    let role = child_role();
    match role.as_str() {
        "exporter" => exporter(),
        "worker" => worker(),
        other => panic!("unknown role {other}"),
    }
}

fn wait_opts() -> WaitOptions {
    WaitOptions {
        timeout: Some(LONG),
        spin: Duration::from_micros(20),
    }
}

fn shared_expected(page: u64) -> Vec<u8> {
    pattern(1, (SHARED_PAGES * page) as usize)
}

fn other_expected(k: u32, len: u64) -> Vec<u8> {
    pattern(100 + k, len as usize)
}

fn exporter() {
    let workers: u32 = arg_as("workers");
    let cycles: u32 = arg_as("cycles");
    let d = CpuShm::new().host();
    let page = d.info().page_size();
    let shared = d
        .allocate(&AllocDesc::host((SHARED_PAGES + 1) * page))
        .unwrap();
    shared.write(0, &shared_expected(page)).unwrap();
    let shared_ex = d.export_memory(&shared, &ExportOptions::default()).unwrap();
    let others: Vec<_> = (0..OTHERS)
        .map(|k| {
            let a = d.allocate(&AllocDesc::host(2 * page)).unwrap();
            a.write(0, &other_expected(k, a.len())).unwrap();
            let ex = d.export_memory(&a, &ExportOptions::default()).unwrap();
            (a, ex)
        })
        .collect();
    let others_text = others
        .iter()
        .map(|(_, ex)| ex.to_text())
        .collect::<Vec<_>>()
        .join(" ");
    let pings: Vec<_> = (0..workers)
        .map(|_| {
            let up = d.create_notify().unwrap();
            let down = d.create_notify().unwrap();
            let up_ex = d.export_notify(&up, &ExportOptions::default()).unwrap();
            let down_ex = d.export_notify(&down, &ExportOptions::default()).unwrap();
            (up, down, up_ex, down_ex)
        })
        .collect();
    // Warm-up: one import through this process's own broker.
    let m = d
        .import_memory(
            SharedHandle::from(exchange::decode(&shared_ex.to_text()).unwrap()),
            &ImportOptions::default(),
        )
        .unwrap();
    drop(m);
    let census = Census::take();

    let started = Instant::now();
    let mut kids: Vec<Kid> = (0..workers)
        .map(|w| {
            let (_, _, up_ex, down_ex) = &pings[w as usize];
            Kid::spawn(
                "worker",
                &[
                    ("index", w.to_string()),
                    ("cycles", cycles.to_string()),
                    ("shared", shared_ex.to_text()),
                    ("others", others_text.clone()),
                    ("up", up_ex.to_text()),
                    ("down", down_ex.to_text()),
                ],
            )
        })
        .collect();
    let pongs = std::thread::scope(|s| {
        let answerers: Vec<_> = pings
            .iter()
            .map(|(up, down, _, _)| {
                s.spawn(move || {
                    for _ in 0..cycles / PING_EVERY {
                        up.wait(wait_opts()).expect("a worker's ping");
                        down.signal().unwrap();
                    }
                    cycles / PING_EVERY
                })
            })
            .collect();
        for k in &mut kids {
            k.expect("started");
        }
        for k in &mut kids {
            k.tell("go");
        }
        for k in &mut kids {
            assert_eq!(k.expect("done"), cycles.to_string());
        }
        answerers
            .into_iter()
            .map(|a| a.join().unwrap())
            .sum::<u32>()
    });
    let elapsed = started.elapsed();
    // Every worker's counts came back (each checked its own before "done").
    for k in kids {
        k.finish();
    }
    // No importer is counted any more, and every byte is as it should be.
    assert_eq!(shared.importers().unwrap(), 0);
    let mut bytes = vec![0u8; (SHARED_PAGES * page) as usize];
    shared.read(0, &mut bytes).unwrap();
    assert!(
        bytes == shared_expected(page),
        "the shared region is corrupted"
    );
    for w in 0..workers {
        let mut stamp = [0u8; 8];
        shared
            .read(SHARED_PAGES * page + u64::from(w) * 8, &mut stamp)
            .unwrap();
        assert_eq!(
            u64::from_le_bytes(stamp),
            u64::from(cycles),
            "worker {w}'s stamp"
        );
    }
    for (k, (a, _)) in others.iter().enumerate() {
        assert_eq!(a.importers().unwrap(), 0);
        let mut bytes = vec![0u8; a.len() as usize];
        a.read(0, &mut bytes).unwrap();
        assert!(
            bytes == other_expected(k as u32, a.len()),
            "region {k} is corrupted"
        );
    }
    census.assert_back("the exporter after the load");
    let imports = u64::from(workers) * u64::from(cycles) * 2;
    eprintln!(
        "note: {imports} imports and closes and {pongs} notify round trips by {workers} \
         processes in {elapsed:.2?} ({:.0} imports/s)",
        imports as f64 / elapsed.as_secs_f64()
    );
    drop(pings);
    drop(others);
    drop(shared_ex);
}

fn worker() {
    let w: u32 = arg_as("index");
    let cycles: u32 = arg_as("cycles");
    let shared_text = arg("shared");
    let others: Vec<String> = arg("others").split(' ').map(str::to_string).collect();
    let d = CpuShm::new().host();
    let page = d.info().page_size();
    let import = |text: &str| {
        d.import_memory(
            SharedHandle::from(exchange::decode(text).unwrap()),
            &ImportOptions::default(),
        )
        .unwrap()
    };
    let notify = |key: &str| {
        d.import_notify(
            SharedHandle::from(exchange::decode(&arg(key)).unwrap()),
            &ImportOptions::default(),
        )
        .unwrap()
    };
    let (up, down) = (notify("up"), notify("down"));
    let expected_shared = shared_expected(page);
    let expected_others: Vec<Vec<u8>> = (0..OTHERS).map(|k| other_expected(k, 2 * page)).collect();
    // Warm-up round, then the census this worker must come back to.
    drop(import(&shared_text));
    drop(import(&others[0]));
    let census = Census::take();
    say("started", "");
    assert_eq!(hear(), "go");
    let mut buf = vec![0u8; expected_shared.len()];
    let slot = SHARED_PAGES * page + u64::from(w) * 8;
    for c in 0..cycles {
        let m = import(&shared_text);
        m.read(0, &mut buf).unwrap();
        assert!(
            buf == expected_shared,
            "worker {w}, cycle {c}: the shared region differs"
        );
        let stamp = u64::from(c + 1).to_le_bytes();
        m.write(slot, &stamp).unwrap();
        let mut back = [0u8; 8];
        m.read(slot, &mut back).unwrap();
        assert_eq!(
            back, stamp,
            "worker {w}, cycle {c}: its stamp was overwritten"
        );
        drop(m);
        let k = ((w + c) % OTHERS) as usize;
        let m = import(&others[k]);
        let mut got = vec![0u8; m.len() as usize];
        m.read(0, &mut got).unwrap();
        assert!(
            got == expected_others[k],
            "worker {w}, cycle {c}: region {k} differs"
        );
        drop(m);
        if c % PING_EVERY == PING_EVERY - 1 {
            up.signal().unwrap();
            down.wait(wait_opts()).expect("the exporter's answer");
        }
    }
    census.assert_back(&format!("worker {w} after {cycles} cycles"));
    say("done", cycles);
}
