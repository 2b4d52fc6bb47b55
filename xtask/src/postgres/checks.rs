//! The checks run on each backend's server, and the benchmark.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::params::{PATIENCE, SESSIONS, SIZE_MB, SLICE};
use super::proc::{output, run, Res};
use super::server::{Info, Server};

/// FNV-1a, 64 bits, as `hal_pg_checksum()` computes it.
pub(super) fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

/// The checksum of a `size`-byte buffer holding the sessions' slices.
pub(super) fn expected_checksum(size: u64, sessions: usize) -> i64 {
    fnv1a((0..size).map(|i| {
        let slice = (i / SLICE as u64) as usize;
        if slice < sessions {
            (slice + 1) as u8
        } else {
            0
        }
    }))
}

pub(super) fn checks(root: &Path, server: &Server<'_>, backend: &str) -> Res<String> {
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
    privileges(server)?;
    let _ = root;
    Ok(report)
}

/// The postmaster never loads a vendor runtime and starts no thread: it only
/// forks the processes that use hal.
pub(super) fn postmaster_is_clean(server: &Server<'_>) -> Res<()> {
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
pub(super) const SESSION_SQL: &str = r#"
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
pub(super) fn sessions(server: &Server<'_>) -> Res<Vec<u64>> {
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

pub(super) fn parse<T: std::str::FromStr>(text: &str) -> Res<T>
where
    T::Err: std::fmt::Display,
{
    text.trim()
        .parse()
        .map_err(|e| format!("{:?} is not a number: {e}", text.trim()))
}

/// A parallel query whose workers read the buffer: each worker is a
/// process of its own, which imports on its first call.
pub(super) fn parallel_query(server: &Server<'_>) -> Res<()> {
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
pub(super) fn holding_session(server: &Server<'_>, name: &str) -> Res<(Child, u32)> {
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

pub(super) fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

pub(super) fn wait_for(what: &str, mut done: impl FnMut() -> Res<bool>) -> Res<()> {
    let deadline = Instant::now() + PATIENCE;
    while !done()? {
        if Instant::now() > deadline {
            return Err(format!("{what}: still not so after {PATIENCE:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

pub(super) fn shm_names() -> Vec<String> {
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
pub(super) fn terminated_session(server: &Server<'_>) -> Res<()> {
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
pub(super) fn worker_stopped(server: &Server<'_>) -> Res<()> {
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

pub(super) fn wait_new_worker(server: &Server<'_>, old: &Info) -> Res<Info> {
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

pub(super) fn first_line<'e>(text: &'e str, marker: &str) -> &'e str {
    text.lines()
        .find(|l| l.contains(marker))
        .unwrap_or(text)
        .trim()
}

/// The worker killed with SIGKILL while a session holds an import:
/// PostgreSQL's crash recovery ends the session with an error and starts a
/// new worker; the next session works with the new buffer.
pub(super) fn worker_killed(server: &Server<'_>) -> Res<()> {
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
pub(super) fn benchmark(server: &Server<'_>, backend: &str) -> Res<String> {
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

/// The extension's functions, as `GRANT` and `REVOKE` name them.
const FUNCTIONS: [&str; 4] = [
    "hal_pg_write(bigint, bytea)",
    "hal_pg_read(bigint, integer)",
    "hal_pg_checksum()",
    "hal_pg_info()",
];

/// The functions are not granted to `PUBLIC`: a role without the grant is
/// refused each of them (permission denied), and a role granted them
/// writes and reads the buffer.
fn privileges(server: &Server<'_>) -> Res<()> {
    const STRANGER: &str = "hal_pg_check_stranger";
    const GRANTED: &str = "hal_pg_check_user";
    server.sql(&format!(
        "CREATE ROLE {STRANGER} LOGIN; CREATE ROLE {GRANTED} LOGIN; \
         GRANT EXECUTE ON FUNCTION {} TO {GRANTED};",
        FUNCTIONS.join(", ")
    ))?;
    let calls = [
        ("hal_pg_write", "SELECT hal_pg_write(0, '\\x2a'::bytea)"),
        ("hal_pg_read", "SELECT hal_pg_read(0, 1)"),
        ("hal_pg_checksum", "SELECT hal_pg_checksum()"),
        ("hal_pg_info", "SELECT hal_pg_info()"),
    ];
    for (function, call) in calls {
        match output(server.psql_as(STRANGER).arg("-c").arg(call)) {
            Ok(out) => {
                return Err(format!(
                    "a role without the grant ran {function}: `{call}` answered {}",
                    out.trim()
                ))
            }
            Err(e) if e.contains(&format!("permission denied for function {function}")) => {}
            Err(e) => {
                return Err(format!(
                    "`{call}` as {STRANGER}: {e}, not permission denied"
                ))
            }
        }
    }
    let before = server.sql("SELECT hal_pg_read(0, 1)")?;
    let wrote = output(
        server
            .psql_as(GRANTED)
            .arg("-c")
            .arg("SELECT hal_pg_write(0, '\\x2a'::bytea)")
            .arg("-c")
            .arg("SELECT hal_pg_read(0, 1)"),
    )?;
    if wrote.trim() != "\\x2a" {
        return Err(format!(
            "the granted role wrote \\x2a and read back `{}`",
            wrote.trim()
        ));
    }
    for call in ["SELECT hal_pg_checksum()", "SELECT hal_pg_info()"] {
        output(server.psql_as(GRANTED).arg("-c").arg(call))
            .map_err(|e| format!("`{call}` as {GRANTED}, granted: {e}"))?;
    }
    // The byte as it was, for whatever runs after.
    server.sql(&format!(
        "SELECT hal_pg_write(0, '{}'::bytea)",
        before.trim()
    ))?;
    println!(
        "ok: a role without the grant is refused every function (permission denied); a granted role writes and reads"
    );
    Ok(())
}
