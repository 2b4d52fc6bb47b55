//! `cargo xtask postgres`: the hal_pg extension (`examples/postgres/hal_pg`)
//! on a real PostgreSQL server.
//!
//! It installs the server headers when they are missing (Debian's
//! `postgresql-server-dev-N`, as root), builds `libhal` (crate `hal-ffi`),
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

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Sessions that write and read the buffer at once.
const SESSIONS: usize = 16;
/// Bytes of each session's slice.
const SLICE: usize = 64 * 1024;
/// The buffer's size, MiB.
const SIZE_MB: u64 = 16;
/// How long a step may wait for the server.
const PATIENCE: Duration = Duration::from_secs(60);

type Res<T> = Result<T, String>;

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
    let ext = build_extension(root, &pg, &scratch)?;
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

/// The server's programs and headers.
struct PgConfig {
    bindir: PathBuf,
    pg_config: PathBuf,
    version: String,
}

impl PgConfig {
    fn find() -> Res<PgConfig> {
        let candidates = std::env::var_os("PG_CONFIG")
            .map(PathBuf::from)
            .into_iter()
            .chain(std::iter::once(PathBuf::from("pg_config")))
            .chain(newest_debian_pg_config());
        let pg_config = candidates
            .into_iter()
            .find(|p| output(Command::new(p).arg("--version")).is_ok())
            .ok_or(
                "no pg_config: install the PostgreSQL server (Debian: apt-get install postgresql)",
            )?;
        let ask = |flag: &str| output(Command::new(&pg_config).arg(flag));
        let version = ask("--version")?.trim().to_string();
        let bindir = PathBuf::from(ask("--bindir")?.trim());
        let includes = PathBuf::from(ask("--includedir-server")?.trim());
        if !includes.join("postgres.h").is_file() {
            let major = version
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.split('.').next())
                .unwrap_or("15")
                .to_string();
            let package = format!("postgresql-server-dev-{major}");
            if !is_root() {
                return Err(format!(
                    "the server headers are missing ({} has no postgres.h): install {package}",
                    includes.display()
                ));
            }
            println!("$ apt-get install -y -qq {package}");
            if run(Command::new("apt-get").args(["install", "-y", "-qq", &package])).is_err() {
                run(Command::new("apt-get").args(["update", "-qq"]))?;
                run(Command::new("apt-get").args(["install", "-y", "-qq", &package]))?;
            }
        }
        Ok(PgConfig {
            bindir,
            pg_config,
            version,
        })
    }

    fn bin(&self, name: &str) -> PathBuf {
        self.bindir.join(name)
    }
}

/// Debian installs each server version under /usr/lib/postgresql/N.
fn newest_debian_pg_config() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.parse::<u32>().ok()?;
            let p = e.path().join("bin/pg_config");
            p.is_file().then_some((n, p))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p)
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The user the server runs as: PostgreSQL refuses to run as root, so as
/// root the `postgres` account (or `nobody`); otherwise this user.
struct ServerUser {
    /// `(uid, gid)` to switch to; `None` when not root.
    ids: Option<(u32, u32)>,
    name: String,
}

impl ServerUser {
    fn pick() -> Res<ServerUser> {
        if !is_root() {
            return Ok(ServerUser {
                ids: None,
                name: std::env::var("USER").unwrap_or_else(|_| "this user".into()),
            });
        }
        let passwd =
            std::fs::read_to_string("/etc/passwd").map_err(|e| format!("/etc/passwd: {e}"))?;
        for wanted in ["postgres", "nobody"] {
            for line in passwd.lines() {
                let f: Vec<&str> = line.split(':').collect();
                if f.len() > 3 && f[0] == wanted {
                    if let (Ok(uid), Ok(gid)) = (f[2].parse(), f[3].parse()) {
                        return Ok(ServerUser {
                            ids: Some((uid, gid)),
                            name: wanted.into(),
                        });
                    }
                }
            }
        }
        Err(
            "running as root, and neither a postgres nor a nobody account exists to run the server"
                .into(),
        )
    }

    /// A command run as the server's user.
    fn command(&self, program: &Path) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(program);
        if let Some((uid, gid)) = self.ids {
            cmd.uid(uid).gid(gid);
            cmd.env("HOME", "/tmp").env("USER", &self.name);
        }
        cmd
    }

    fn own(&self, path: &Path) -> Res<()> {
        if let Some((uid, gid)) = self.ids {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", path.display()))?;
        }
        Ok(())
    }
}

/// The temporary folder everything lives in; removed on drop.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new(user: &ServerUser) -> Res<Scratch> {
        // The server's user must reach it: the first temporary folder
        // others may enter (this machine's /tmp may be private to root).
        use std::os::unix::fs::PermissionsExt;
        let base = [std::env::temp_dir(), PathBuf::from("/var/tmp")]
            .into_iter()
            .find(|d| {
                user.ids.is_none()
                    || std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0)
            })
            .ok_or(
                "no temporary folder the server's user may enter (/tmp and /var/tmp are private)",
            )?;
        let path = base.join(format!("hal-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let scratch = Scratch { path };
        std::fs::set_permissions(&scratch.path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", scratch.path.display()))?;
        user.own(&scratch.path)?;
        Ok(scratch)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn build(root: &Path, cargo: &str) -> Res<()> {
    // Release: the benchmark measures the library as it is shipped.
    let args = [
        "build",
        "--release",
        "-p",
        "hal-ffi",
        "-p",
        "halctl",
        "-p",
        "hal-mock-libcuda",
    ];
    println!("$ cargo {}", args.join(" "));
    run(Command::new(cargo).args(args).current_dir(root))
}

/// What the build left for the server: the extension's library and SQL.
struct Extension {
    library: PathBuf,
    sql: String,
    standin: PathBuf,
    halctl: PathBuf,
}

fn build_extension(root: &Path, pg: &PgConfig, scratch: &Scratch) -> Res<Extension> {
    let src = root.join("examples/postgres/hal_pg");
    let dir = scratch.path.join("ext");
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).map_err(|e| format!("{}: {e}", lib.display()))?;
    for f in ["hal_pg.c", "Makefile", "hal_pg.control", "hal_pg--0.1.sql"] {
        copy(&src.join(f), &dir.join(f))?;
    }
    let built = root.join("target/release");
    // The server's user reads the libraries from here, whatever the
    // permissions of the build tree.
    // The link name, and the soname the extension's library asks for.
    copy(&built.join("libhal.so"), &lib.join("libhal.so"))?;
    copy(&built.join("libhal.so"), &lib.join("libhal.so.1"))?;
    let standin = lib.join("libcuda-standin.so");
    copy(&built.join("libhal_mock_libcuda.so"), &standin)?;
    let include = root.join("include");
    let mut make = Command::new("make");
    make.current_dir(&dir)
        .arg(format!("PG_CONFIG={}", pg.pg_config.display()))
        .arg(format!("HAL_INCLUDE={}", include.display()))
        .arg(format!("HAL_LIBDIR={}", lib.display()))
        // No LLVM bitcode for the JIT: clang is not needed.
        .arg("with_llvm=no");
    println!("$ make -C {} ...", dir.display());
    run(&mut make)?;
    let library = dir.join("hal_pg.so");
    let sql = std::fs::read_to_string(dir.join("hal_pg--0.1.sql"))
        .map_err(|e| format!("hal_pg--0.1.sql: {e}"))?
        .lines()
        .filter(|l| !l.starts_with("\\echo"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("MODULE_PATHNAME", &library.display().to_string());
    Ok(Extension {
        library,
        sql,
        standin,
        halctl: built.join("halctl"),
    })
}

/// A running server, stopped on drop.
struct Server<'a> {
    pg: &'a PgConfig,
    user: &'a ServerUser,
    data: PathBuf,
    socket: PathBuf,
    halctl: PathBuf,
    env: Vec<(String, String)>,
    stopped: bool,
}

impl<'a> Server<'a> {
    fn start(
        pg: &'a PgConfig,
        user: &'a ServerUser,
        ext: &Extension,
        dir: &Path,
        backend: &str,
    ) -> Res<Server<'a>> {
        let data = dir.join("data");
        run(user
            .command(&pg.bin("initdb"))
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(&data)
            .stdout(Stdio::null()))?;
        let mut conf = String::new();
        let _ = writeln!(conf, "listen_addresses = ''");
        let _ = writeln!(conf, "unix_socket_directories = '{}'", dir.display());
        let _ = writeln!(
            conf,
            "shared_preload_libraries = '{}'",
            ext.library.display()
        );
        let _ = writeln!(conf, "hal_pg.backend = '{backend}'");
        let _ = writeln!(conf, "hal_pg.size_mb = {SIZE_MB}");
        let _ = writeln!(conf, "hal_pg.restart_seconds = 3");
        let _ = writeln!(conf, "max_connections = 64");
        let _ = writeln!(conf, "max_worker_processes = 16");
        let _ = writeln!(conf, "max_parallel_workers = 8");
        let _ = writeln!(conf, "fsync = off");
        let _ = writeln!(conf, "shared_buffers = 32MB");
        append(&data.join("postgresql.conf"), &conf)?;
        let env = if backend == "cuda-uvm" {
            vec![(
                "HAL_CUDA_LIBRARY".to_string(),
                ext.standin.display().to_string(),
            )]
        } else {
            Vec::new()
        };
        let mut server = Server {
            pg,
            user,
            data,
            socket: dir.to_path_buf(),
            halctl: ext.halctl.clone(),
            env,
            stopped: true,
        };
        let mut start = user.command(&pg.bin("pg_ctl"));
        start
            .args(["-w", "-t", "60", "-l"])
            .arg(server.log())
            .arg("-D")
            .arg(&server.data)
            .arg("start")
            .stdout(Stdio::null());
        for (k, v) in &server.env {
            start.env(k, v);
        }
        if let Err(e) = run(&mut start) {
            return Err(format!("{e}\n--- server log\n{}", server.log_tail()));
        }
        server.stopped = false;
        server.sql(&ext.sql)?;
        Ok(server)
    }

    fn log(&self) -> PathBuf {
        self.data.with_file_name("server.log")
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log()).unwrap_or_default();
        // The start (the worker's own lines) and the end; a retried
        // statement's lines only once.
        let mut seen = std::collections::HashSet::new();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| seen.insert(l.splitn(5, ' ').nth(4).unwrap_or(l)))
            .collect();
        if lines.len() <= 60 {
            return lines.join("\n");
        }
        format!(
            "{}\n[...]\n{}",
            lines[..30].join("\n"),
            lines[lines.len() - 30..].join("\n")
        )
    }

    fn postmaster_pid(&self) -> Res<u32> {
        let pidfile = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .map_err(|e| format!("postmaster.pid: {e}"))?;
        pidfile
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| "postmaster.pid has no pid".into())
    }

    /// A `psql` command connected to the server.
    fn psql(&self) -> Command {
        let mut cmd = Command::new(self.pg.bin("psql"));
        cmd.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-h",
        ])
        .arg(&self.socket);
        cmd
    }

    /// Run `sql` in a new session; its output.
    fn sql(&self, sql: &str) -> Res<String> {
        output(self.psql().arg("-c").arg(sql))
    }

    /// Run `sql` until it succeeds, for up to [`PATIENCE`].
    fn sql_eventually(&self, sql: &str) -> Res<String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.sql(sql) {
                Ok(out) => return Ok(out),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn info(&self) -> Res<Info> {
        Info::parse(&self.sql_eventually("SELECT hal_pg_info()")?)
    }

    fn stop(mut self) -> Res<()> {
        self.stopped = true;
        run(self
            .user
            .command(&self.pg.bin("pg_ctl"))
            .args(["-w", "-t", "60", "-m", "fast", "-D"])
            .arg(&self.data)
            .arg("stop")
            .stdout(Stdio::null()))
    }
}

impl Drop for Server<'_> {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self
                .user
                .command(&self.pg.bin("pg_ctl"))
                .args(["-w", "-m", "immediate", "-D"])
                .arg(&self.data)
                .arg("stop")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// What `hal_pg_info()` says.
#[derive(Debug, Clone)]
struct Info {
    backend: String,
    size: u64,
    importers: u64,
    worker_pid: u32,
    generation: u64,
    imports: u64,
    first_import_us: u64,
}

impl Info {
    fn parse(text: &str) -> Res<Info> {
        let field = |key: &str| -> Res<&str> {
            text.split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .ok_or_else(|| format!("hal_pg_info() has no {key}: {text:?}"))
        };
        let num = |key: &str| -> Res<u64> {
            field(key)?
                .parse()
                .map_err(|e| format!("hal_pg_info() {key}: {e} in {text:?}"))
        };
        Ok(Info {
            backend: field("backend")?.to_string(),
            size: num("size")?,
            importers: num("importers")?,
            worker_pid: num("worker_pid")? as u32,
            generation: num("generation")?,
            imports: num("imports")?,
            first_import_us: num("first_import_us")?,
        })
    }
}

/// FNV-1a, 64 bits, as `hal_pg_checksum()` computes it.
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

/// The checksum of a `size`-byte buffer holding the sessions' slices.
fn expected_checksum(size: u64, sessions: usize) -> i64 {
    fnv1a((0..size).map(|i| {
        let slice = (i / SLICE as u64) as usize;
        if slice < sessions {
            (slice + 1) as u8
        } else {
            0
        }
    }))
}

fn checks(root: &Path, server: &Server<'_>, backend: &str) -> Res<String> {
    let mut report = String::new();
    let info = server.info()?;
    if info.backend != backend {
        return Err(format!("the buffer is on {}, not {backend}", info.backend));
    }
    if info.size != SIZE_MB << 20 {
        return Err(format!(
            "the buffer has {} bytes, not {}",
            info.size,
            SIZE_MB << 20
        ));
    }
    println!(
        "ok: worker {} published a {}-byte buffer on {backend}",
        info.worker_pid, info.size
    );
    postmaster_is_clean(server)?;
    println!("ok: the postmaster holds no vendor runtime and runs one thread");

    let first_use = sessions(server)?;
    let checksum: i64 = parse(&server.sql("SELECT hal_pg_checksum()")?)?;
    let want = expected_checksum(info.size, SESSIONS);
    if checksum != want {
        return Err(format!(
            "hal_pg_checksum() is {checksum}, computed here {want}"
        ));
    }
    println!(
        "ok: {SESSIONS} sessions wrote their slices and read every other's; the checksum matches"
    );
    let mut sorted = first_use.clone();
    sorted.sort_unstable();
    let _ = writeln!(
        report,
        "{{\"backend\":\"{backend}\",\"measure\":\"first import per session\",\"sessions\":{SESSIONS},\"median_us\":{},\"max_us\":{}}}",
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );

    parallel_query(server)?;
    terminated_session(server)?;
    worker_stopped(server)?;
    worker_killed(server)?;
    let _ = writeln!(report, "{}", benchmark(server, backend)?);
    let _ = root;
    Ok(report)
}

/// The postmaster never loads a vendor runtime and starts no thread: it only
/// forks the processes that use hal.
fn postmaster_is_clean(server: &Server<'_>) -> Res<()> {
    let pid = server.postmaster_pid()?;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map_err(|e| format!("/proc/{pid}/maps: {e}"))?;
    for vendor in ["libcuda", "libascendcl", "libhal_mock"] {
        if maps.contains(vendor) {
            return Err(format!("the postmaster ({pid}) has {vendor} mapped"));
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .map(str::trim)
        .unwrap_or("?");
    if threads != "1" {
        return Err(format!("the postmaster ({pid}) runs {threads} threads"));
    }
    Ok(())
}

/// Each session's script: write its slice, wait until every slice is
/// written, compare every slice, then say how long its first import took.
const SESSION_SQL: &str = r#"
SELECT hal_pg_write(:id * SLICE, decode(repeat(lpad(to_hex(:id + 1), 2, '0'), SLICE), 'hex'));
DO $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '60 seconds';
    complete boolean;
BEGIN
    LOOP
        complete := true;
        FOR s IN 0..(SESSIONS - 1) LOOP
            IF hal_pg_read(s * SLICE, SLICE) <> decode(repeat(lpad(to_hex(s + 1), 2, '0'), SLICE), 'hex') THEN
                complete := false;
            END IF;
        END LOOP;
        EXIT WHEN complete;
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'not every slice was written within 60 s';
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
END
$$;
SELECT hal_pg_info();
"#;

/// 16 sessions at once; the first-import time of each, in microseconds.
fn sessions(server: &Server<'_>) -> Res<Vec<u64>> {
    let script = SESSION_SQL
        .replace("SESSIONS", &SESSIONS.to_string())
        .replace("SLICE", &SLICE.to_string());
    let children: Vec<Res<Child>> = (0..SESSIONS)
        .map(|id| {
            server
                .psql()
                .arg("-c")
                .arg(script.replace(":id", &id.to_string()))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("psql: {e}"))
        })
        .collect();
    let mut first_use = Vec::new();
    for (id, child) in children.into_iter().enumerate() {
        let out = child?
            .wait_with_output()
            .map_err(|e| format!("psql: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "session {id}: {}{}",
                text,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let info = text
            .lines()
            .rev()
            .find(|l| l.starts_with("backend="))
            .ok_or_else(|| format!("session {id} printed no info: {text}"))?;
        first_use.push(Info::parse(info)?.first_import_us);
    }
    Ok(first_use)
}

fn parse<T: std::str::FromStr>(text: &str) -> Res<T>
where
    T::Err: std::fmt::Display,
{
    text.trim()
        .parse()
        .map_err(|e| format!("{:?} is not a number: {e}", text.trim()))
}

/// A parallel query whose workers read the buffer: each worker is a
/// process of its own, which imports on its first call.
fn parallel_query(server: &Server<'_>) -> Res<()> {
    server.sql(
        "CREATE TABLE hal_pg_rows AS SELECT g AS i FROM generate_series(0, 99999) g;
         ALTER TABLE hal_pg_rows SET (parallel_workers = 4);
         ANALYZE hal_pg_rows;",
    )?;
    let before = server.info()?.imports;
    let settings = "SET max_parallel_workers_per_gather = 4; SET parallel_setup_cost = 0;
         SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;
         SET parallel_leader_participation = off;";
    let query = format!(
        "SELECT sum(get_byte(hal_pg_read((i % {SESSIONS}) * {SLICE}, 1), 0)) FROM hal_pg_rows"
    );
    let plan = server.sql(&format!(
        "{settings} EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {query}"
    ))?;
    let launched: u64 = plan
        .lines()
        .find_map(|l| l.trim().strip_prefix("Workers Launched:"))
        .map(parse)
        .transpose()?
        .unwrap_or(0);
    if launched == 0 {
        return Err(format!("the query ran no parallel worker:\n{plan}"));
    }
    let sum: u64 = parse(&server.sql(&format!("{settings} {query}"))?)?;
    // Row i reads the first byte of slice i % 16, which holds i % 16 + 1.
    let want: u64 = (0..100_000u64).map(|i| i % SESSIONS as u64 + 1).sum();
    if sum != want {
        return Err(format!("the parallel sum is {sum}, not {want}"));
    }
    let after = server.info()?.imports;
    if after < before + launched {
        return Err(format!(
            "{launched} parallel workers ran, but the imports went from {before} to {after}"
        ));
    }
    println!("ok: a parallel query with {launched} workers read the buffer (imports {before} -> {after})");
    Ok(())
}

/// A session that holds an import and waits: its backend's pid.
fn holding_session(server: &Server<'_>, name: &str) -> Res<(Child, u32)> {
    let child = server
        .psql()
        .env("PGAPPNAME", name)
        .arg("-c")
        .arg("SELECT hal_pg_read(0, 1); SELECT pg_sleep(300);")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("psql: {e}"))?;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let pid = server.sql(&format!(
            "SELECT pid FROM pg_stat_activity WHERE application_name = '{name}' AND wait_event = 'PgSleep'"
        ))?;
        if let Ok(pid) = parse::<u32>(&pid) {
            return Ok((child, pid));
        }
        if Instant::now() > deadline {
            return Err(format!("the session {name} did not start"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

fn wait_for(what: &str, mut done: impl FnMut() -> Res<bool>) -> Res<()> {
    let deadline = Instant::now() + PATIENCE;
    while !done()? {
        if Instant::now() > deadline {
            return Err(format!("{what}: still not so after {PATIENCE:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn shm_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `pg_terminate_backend` of a session holding an import: its lease goes
/// with it, and nothing of it stays in /dev/shm.
fn terminated_session(server: &Server<'_>) -> Res<()> {
    let shm_before = shm_names();
    let (mut child, pid) = holding_session(server, "hal_pg_victim")?;
    // The worker counts the victim among the importers.
    wait_for("the victim's import is counted", || {
        Ok(server.info()?.importers >= 1)
    })?;
    server.sql(&format!("SELECT pg_terminate_backend({pid})"))?;
    wait_for("the terminated backend exits", || Ok(gone(pid)))?;
    let _ = child.wait();
    // The importers settle to the probing session alone (at most one).
    wait_for("the terminated backend's lease is gone", || {
        Ok(server.info()?.importers <= 1)
    })?;
    let leftover: Vec<String> = shm_names()
        .into_iter()
        .filter(|n| !shm_before.contains(n))
        .collect();
    if !leftover.is_empty() {
        return Err(format!("left in /dev/shm: {leftover:?}"));
    }
    let ls = output(Command::new(&server.halctl).args(["shm", "ls"]))?;
    if ls.contains(&format!("pid {pid}")) || ls.contains(&format!("{pid} ")) && ls.contains("dead")
    {
        return Err(format!(
            "halctl shm ls still lists the terminated backend {pid}:\n{ls}"
        ));
    }
    println!(
        "ok: pg_terminate_backend({pid}) left nothing behind (halctl shm ls: {} lines)",
        ls.lines().count()
    );
    Ok(())
}

/// The worker stopped with SIGTERM: a call says so, then the restarted
/// worker's buffer is imported afresh.
fn worker_stopped(server: &Server<'_>) -> Res<()> {
    let old = server.info()?;
    run(Command::new("kill").args(["-TERM", &old.worker_pid.to_string()]))?;
    wait_for("the stopped worker exits", || Ok(gone(old.worker_pid)))?;
    match server.sql("SELECT hal_pg_read(0, 1)") {
        Ok(out) => return Err(format!("a read with no worker answered {out:?}")),
        Err(e) if e.contains("background worker is not running") => {
            println!(
                "ok: with the worker stopped, a call says: {}",
                first_line(&e, "ERROR")
            );
        }
        Err(e) => return Err(format!("a read with no worker failed otherwise: {e}")),
    }
    let new = wait_new_worker(server, &old)?;
    let checksum: i64 = parse(&server.sql("SELECT hal_pg_checksum()")?)?;
    if checksum != expected_checksum(new.size, 0) {
        return Err("the new worker's buffer is not a fresh one".into());
    }
    server.sql("SELECT hal_pg_write(0, '\\x2a'::bytea)")?;
    let byte = server.sql("SELECT get_byte(hal_pg_read(0, 1), 0)")?;
    if byte.trim() != "42" {
        return Err(format!("a write to the new buffer reads back {byte:?}"));
    }
    println!(
        "ok: worker {} took over (generation changed); the next calls used its buffer",
        new.worker_pid
    );
    Ok(())
}

fn wait_new_worker(server: &Server<'_>, old: &Info) -> Res<Info> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(info) = server.info() {
            if info.generation != old.generation && info.worker_pid != old.worker_pid {
                return Ok(info);
            }
        }
        if Instant::now() > deadline {
            return Err("no new worker published a buffer".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn first_line<'e>(text: &'e str, marker: &str) -> &'e str {
    text.lines()
        .find(|l| l.contains(marker))
        .unwrap_or(text)
        .trim()
}

/// The worker killed with SIGKILL while a session holds an import:
/// PostgreSQL's crash recovery ends the session with an error and starts a
/// new worker; the next session works with the new buffer.
fn worker_killed(server: &Server<'_>) -> Res<()> {
    let postmaster = server.postmaster_pid()?;
    let old = server.info()?;
    let (child, _pid) = holding_session(server, "hal_pg_bystander")?;
    run(Command::new("kill").args(["-KILL", &old.worker_pid.to_string()]))?;
    let out = child.wait_with_output().map_err(|e| format!("psql: {e}"))?;
    if out.status.success() {
        return Err("the session holding an import ran on through the crash".into());
    }
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    let new = wait_new_worker(server, &old)?;
    if server.postmaster_pid()? != postmaster {
        return Err("the postmaster itself restarted".into());
    }
    server.sql("SELECT hal_pg_write(8, '\\x07'::bytea)")?;
    let byte = server.sql("SELECT get_byte(hal_pg_read(8, 1), 0)")?;
    if byte.trim() != "7" {
        return Err(format!("a write after the crash reads back {byte:?}"));
    }
    println!(
        "ok: worker killed; the session ended with: {}; worker {} serves a new buffer",
        first_line(&said, "server"),
        new.worker_pid
    );
    Ok(())
}

/// `hal_pg_read` of 1 MiB against a SELECT of the same bytes from an
/// unlogged table in shared buffers: medians of 7 runs of 100 reads each.
fn benchmark(server: &Server<'_>, backend: &str) -> Res<String> {
    const MIB: usize = 1 << 20;
    const READS: u32 = 100;
    server.sql(&format!(
        "CREATE UNLOGGED TABLE hal_pg_blob (b bytea);
         ALTER TABLE hal_pg_blob ALTER COLUMN b SET STORAGE EXTERNAL;
         INSERT INTO hal_pg_blob SELECT decode(repeat('5a', {MIB}), 'hex');
         SELECT hal_pg_write(0, b) FROM hal_pg_blob;"
    ))?;
    let time = |expr: &str| -> Res<f64> {
        // Each read is detoasted or copied in full (get_byte takes the whole
        // value); the loop keeps the session's connection out of the figure.
        let sql = format!(
            "DO $$ DECLARE t0 timestamptz; n int := 0; BEGIN
               PERFORM {expr};
               t0 := clock_timestamp();
               FOR i IN 1..{READS} LOOP n := n + ({expr}); END LOOP;
               RAISE NOTICE 'us=%', extract(epoch FROM clock_timestamp() - t0) * 1e6 / {READS};
             END $$;"
        );
        let out = server
            .psql()
            .arg("-c")
            .arg(&sql)
            .output()
            .map_err(|e| format!("psql: {e}"))?;
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(format!("benchmark: {err}"));
        }
        err.lines()
            .find_map(|l| l.split("us=").nth(1))
            .ok_or_else(|| format!("benchmark printed no time: {err}"))
            .and_then(parse)
    };
    let hal_expr = format!("get_byte(hal_pg_read(0, {MIB}), {})", MIB - 1);
    let table_expr = format!("(SELECT get_byte(b, {}) FROM hal_pg_blob)", MIB - 1);
    let mut hal = Vec::new();
    let mut table = Vec::new();
    for _ in 0..7 {
        hal.push(time(&hal_expr)?);
        table.push(time(&table_expr)?);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (h, t) = (median(&mut hal), median(&mut table));
    println!(
        "bench: 1 MiB read: hal_pg_read {h:.1} us, unlogged table {t:.1} us, ratio {:.3}",
        h / t
    );
    Ok(format!(
        "{{\"backend\":\"{backend}\",\"measure\":\"1 MiB read\",\"hal_pg_read_us\":{h:.1},\"unlogged_table_us\":{t:.1},\"ratio\":{:.3}}}",
        h / t
    ))
}

fn copy(from: &Path, to: &Path) -> Res<()> {
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| format!("copy {} to {}: {e}", from.display(), to.display()))
}

fn append(path: &Path, text: &str) -> Res<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Run `cmd`, its output shown; an error unless it succeeds.
fn run(cmd: &mut Command) -> Res<()> {
    let status = cmd
        .status()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "{:?} {:?}: {status}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>()
        ))
    }
}

/// Run `cmd`; its standard output, or an error with its standard error.
fn output(cmd: &mut Command) -> Res<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
