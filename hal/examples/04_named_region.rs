//! 04: a named CPU shared-memory region, found by its name.
//!
//! ```text
//! cargo run -p hal-ipc --example 04_named_region
//! ```
//!
//! A named region is a POSIX shared memory object (`/dev/shm/NAME`): any
//! process of the same user that knows the name opens it, including C
//! programs (`shm_open`) and Python (`multiprocessing.shared_memory`). No
//! handle and no descriptor passing: the name is the whole rendezvous.
//!
//! The producer creates the region exclusively (creating a name that exists
//! fails; opening is a separate call), fills it and starts a consumer (this
//! program again, with `--consumer NAME SIZE`). The consumer opens the region
//! by name, checks every byte and writes an answer. When the producer's
//! allocation drops, the name is removed (unless it was created with
//! `NamedOptions::keep`), so nothing is left in `/dev/shm`; regions left by
//! a crashed creator are listed by `halctl shm ls` and removed by
//! `halctl shm gc`.

use std::process::{Command, ExitCode};

use hal::cpu_shm::{self, CpuShm, NamedOptions};
use hal::{Error, Memory};

const SIZE: u64 = 256 << 10;
const ANSWER: &[u8] = b"the consumer opened it by name";

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [flag, name, size] if flag == "--consumer" => size
            .parse()
            .map_err(Into::into)
            .and_then(|size| consumer(name, size)),
        _ => producer(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("04_named_region ({}): {e}", std::process::id());
            ExitCode::FAILURE
        }
    }
}

/// The byte at offset `i`.
fn pattern(i: u64) -> u8 {
    (i % 253) as u8
}

fn producer() -> Res<()> {
    let device = CpuShm::new().host();
    // A name of our own: two runs at once must not collide.
    let name = format!(
        "hal-example-04-{}-{}",
        std::process::id(),
        hal::kit::os::hex(&hal::kit::os::random_id()[..4])
    );
    let region = device.create_named(&name, SIZE, &NamedOptions::default())?;
    println!(
        "producer: created /dev/shm/{name} ({SIZE} bytes, region id {:#018x})",
        cpu_shm::region_id(&name)
    );
    match device.create_named(&name, SIZE, &NamedOptions::default()) {
        Err(Error::AlreadyExists { .. }) => println!("producer: a second create is refused"),
        other => return Err(format!("a second create should fail, got {other:?}").into()),
    }

    let data: Vec<u8> = (0..SIZE).map(pattern).collect();
    region.write(0, &data)?;

    let output = Command::new(std::env::current_exe()?)
        .args(["--consumer", &name, &SIZE.to_string()])
        .output()?;
    print!("{}", String::from_utf8_lossy(&output.stdout));
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    if !output.status.success() {
        return Err(format!("the consumer failed: {}", output.status).into());
    }
    let mut answer = vec![0u8; ANSWER.len()];
    region.read(0, &mut answer)?;
    if answer != ANSWER {
        return Err("the consumer's answer is not in the region".into());
    }

    drop(region);
    match cpu_shm::open_named(&name, None) {
        Err(Error::NotFound { .. }) => {
            println!("producer: answer verified; the name is gone after the drop")
        }
        other => return Err(format!("the name should be gone, got {other:?}").into()),
    }
    Ok(())
}

fn consumer(name: &str, size: u64) -> Res<()> {
    // The size is checked before anything is mapped.
    let region = cpu_shm::open_named(name, Some(size))?;
    let mut data = vec![0u8; size as usize];
    region.read(0, &mut data)?;
    if let Some(bad) = (0..).zip(&data).position(|(i, &b)| b != pattern(i)) {
        return Err(format!("byte {bad} is not what the producer wrote").into());
    }
    region.write(0, ANSWER)?;
    println!(
        "consumer {}: opened {name} by name, {size} bytes verified",
        std::process::id()
    );
    Ok(())
}
