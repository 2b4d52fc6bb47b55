//! 09: memory and a notify across machines, over UCX.
//!
//! ```text
//! cargo run -p hal --features ucx --example 09_remote              # both sides on 127.0.0.1
//! cargo run -p hal --features ucx --example 09_remote -- 192.0.2.1 # listen on this address
//! ```
//!
//! The exporter fills 4 MiB of CPU shared memory, exports it with a node
//! (UCX, loaded at run time) and starts the importer (this program again,
//! with `--importer TEXT`), which could as well run on another host: the
//! `hal1r.` text is all it needs. The importer reads the whole buffer and
//! checks it, writes its answer into the buffer and signals, in that order,
//! with one call; the exporter wakes, checks the answer in its own memory,
//! and exits 0 only if every check passed. `UCX_TLS=tcp` keeps UCX on its
//! TCP transport, as between two hosts.

use std::net::SocketAddr;
use std::process::{Command, ExitCode};
use std::time::Duration;

use hal::cpu_shm::CpuShm;
use hal::remote::{Node, RemoteOptions};
use hal::{AllocDesc, Device, Memory};

const SIZE: usize = 4 << 20;
const ANSWER_AT: u64 = 1 << 20;
const ANSWER: &[u8] = b"read 4 MiB, all of them right";

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [flag, listen, text] if flag == "--importer" => importer(listen, text),
        [] => exporter("127.0.0.1"),
        [ip] => exporter(ip),
        _ => Err("usage: 09_remote [LISTEN_IP]".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("09_remote ({}): {e}", std::process::id());
            ExitCode::FAILURE
        }
    }
}

fn pattern() -> Vec<u8> {
    (0..SIZE).map(|i| (i % 253) as u8).collect()
}

fn exporter(ip: &str) -> Res<()> {
    let device = CpuShm::new().host();
    let buffer = device.allocate(&AllocDesc::host(SIZE as u64))?;
    buffer.write(0, &pattern())?;
    let node = Node::bind(SocketAddr::new(ip.parse()?, 0))?;
    let export = node.export(&buffer, RemoteOptions::default())?;
    println!("exporter: {} on {}", node.address(), node.ucx());
    let status = Command::new(std::env::current_exe()?)
        .args(["--importer", ip, &export.text()])
        .status()?;
    if !status.success() {
        return Err(format!("the importer failed: {status}").into());
    }
    // The importer's write is in this memory before its signal.
    export.wait_signal(Duration::from_secs(30))?;
    let mut got = vec![0u8; ANSWER.len()];
    buffer.read(ANSWER_AT, &mut got)?;
    if got != ANSWER {
        return Err("the importer's answer is not in the buffer".into());
    }
    println!(
        "exporter: the importer wrote {:?}",
        String::from_utf8_lossy(&got)
    );
    export.wait_unused(Duration::from_secs(30))?;
    Ok(())
}

fn importer(ip: &str, text: &str) -> Res<()> {
    let node = Node::bind(SocketAddr::new(ip.parse()?, 0))?;
    let remote = node.connect(text)?;
    let started = std::time::Instant::now();
    let mut all = vec![0u8; remote.len() as usize];
    remote.read(0, &mut all)?;
    let took = started.elapsed();
    if all != pattern() {
        return Err("the bytes read differ from the exporter's".into());
    }
    println!("importer: read {} bytes in {took:?}", all.len());
    remote.write_signal(ANSWER_AT, ANSWER)?;
    Ok(())
}
