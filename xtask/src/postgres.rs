//! `cargo xtask postgres`: the hal_pg extension (`examples/postgres/hal_pg`)
//! on a real PostgreSQL server.
//!
//! It installs the server headers when they are missing (Debian's
//! `postgresql-server-dev-N`, as root), builds `libhal_ipc` (crate `hal-ffi`),
//! `halctl` and the stand-in `libcuda.so.1`, builds the extension with PGXS
//! in a temporary folder, and for each backend (cpu-shm, then cuda-uvm over
//! the stand-in driver) creates a cluster there as an unprivileged user,
//! starts it on a Unix socket in that folder (no TCP port), runs the checks
//! below, stops the server and removes everything:
//!
//! - the postmaster holds no vendor runtime and no thread of hal's;
//! - 16 concurrent sessions each write their own slice and read every
//!   other's, and the checksum of the buffer is the one computed here;
//! - a parallel query whose workers read the buffer;
//! - `pg_terminate_backend` of a session holding an import: its lease is
//!   gone and nothing is left in `/dev/shm` (`halctl shm ls`);
//! - the worker stopped (SIGTERM): a call gives a clear SQL error, and once
//!   the postmaster has started a new worker, the next call imports the new
//!   buffer;
//! - the worker killed (SIGKILL) mid-run: PostgreSQL's crash recovery ends
//!   the sessions with an error, restarts the worker, and the next session
//!   works with the new buffer;
//! - the benchmark: `hal_pg_read` of 1 MiB against a `SELECT` of the same
//!   bytes from an unlogged table in shared buffers, in the same run (a
//!   ratio of medians, printed; not an assertion).
//! - the functions are not granted to `PUBLIC`: a role without the grant
//!   is refused each of them (permission denied), a role granted
//!   `EXECUTE` on them writes and reads the buffer.

use std::path::Path;
use std::process::ExitCode;

mod checks;
mod params;
mod proc;
mod server;
mod setup;

use checks::checks;
use proc::Res;
use server::Server;
use setup::{build, build_extension, PgConfig, Scratch, ServerUser};

/// `cargo xtask postgres [--backend NAME]...`.
pub(crate) fn postgres_cmd(root: &Path, cargo: &str, args: &[String]) -> ExitCode {
    let mut backends = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), it.next()) {
            ("--backend", Some(b)) if b == "cpu-shm" || b == "cuda-uvm" => backends.push(b.clone()),
            _ => {
                eprintln!(
                    "xtask postgres: usage: cargo xtask postgres [--backend cpu-shm|cuda-uvm]..."
                );
                return ExitCode::from(2);
            }
        }
    }
    if backends.is_empty() {
        backends = vec!["cpu-shm".into(), "cuda-uvm".into()];
    }
    match run_all(root, cargo, &backends) {
        Ok(report) => {
            println!("{report}");
            println!(
                "xtask postgres: every check passed on {}",
                backends.join(", ")
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask postgres: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_all(root: &Path, cargo: &str, backends: &[String]) -> Res<String> {
    let pg = PgConfig::find()?;
    println!(
        "postgres: {} (binaries in {})",
        pg.version,
        pg.bindir.display()
    );
    build(root, cargo)?;
    let user = ServerUser::pick()?;
    let scratch = Scratch::new(&user)?;
    let ext = build_extension(root, cargo, &pg, &scratch)?;
    let mut report = String::new();
    for backend in backends {
        println!("\n==> hal_pg on {backend}");
        let data = scratch.path.join(backend);
        std::fs::create_dir(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        user.own(&data)?;
        let server = Server::start(&pg, &user, &ext, &data, backend)?;
        let result = checks(root, &server, backend);
        let log = server.log_tail();
        let stopped = server.stop();
        match result {
            Ok(lines) => {
                stopped?;
                report.push_str(&lines);
            }
            Err(e) => {
                return Err(format!(
                    "{backend}: {e}\n--- server log (last lines)\n{log}"
                ))
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::checks::{expected_checksum, fnv1a};
    use super::params::SLICE;
    use super::server::Info;

    #[test]
    fn info_parses_every_field_and_names_a_missing_one() {
        let i = Info::parse(
            "backend=cpu-shm size=16777216 importers=3 worker_pid=42 generation=99 imports=7 first_import_us=120\n",
        )
        .unwrap();
        assert_eq!(
            (
                i.backend.as_str(),
                i.size,
                i.importers,
                i.worker_pid,
                i.generation,
                i.imports,
                i.first_import_us
            ),
            ("cpu-shm", 16 << 20, 3, 42, 99, 7, 120)
        );
        let e = Info::parse("backend=cpu-shm size=1").unwrap_err();
        assert!(e.contains("importers"), "{e}");
    }

    #[test]
    fn the_expected_checksum_is_fnv1a_of_the_slices() {
        // FNV-1a of nothing is its offset basis; of one zero byte, a known value.
        assert_eq!(fnv1a([]), 0xcbf2_9ce4_8422_2325_u64 as i64);
        assert_eq!(fnv1a([0u8]), 0xaf63_bd4c_8601_b7df_u64 as i64);
        let two = expected_checksum(2 * SLICE as u64 + 3, 2);
        let bytes = std::iter::repeat_n(1u8, SLICE)
            .chain(std::iter::repeat_n(2u8, SLICE))
            .chain([0, 0, 0]);
        assert_eq!(two, fnv1a(bytes));
    }
}
