//! A PostgreSQL server started on a Unix socket in the scratch folder, and
//! what `hal_pg_info()` says of it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::params::{PATIENCE, SIZE_MB};
use super::proc::{append, output, run, Res};
use super::setup::{Extension, PgConfig, ServerUser};

/// A running server, stopped on drop.
pub(super) struct Server<'a> {
    pub(super) pg: &'a PgConfig,
    pub(super) user: &'a ServerUser,
    pub(super) data: PathBuf,
    pub(super) socket: PathBuf,
    pub(super) halctl: PathBuf,
    pub(super) env: Vec<(String, String)>,
    pub(super) stopped: bool,
}

impl<'a> Server<'a> {
    pub(super) fn start(
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

    pub(super) fn log(&self) -> PathBuf {
        self.data.with_file_name("server.log")
    }

    pub(super) fn log_tail(&self) -> String {
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

    pub(super) fn postmaster_pid(&self) -> Res<u32> {
        let pidfile = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .map_err(|e| format!("postmaster.pid: {e}"))?;
        pidfile
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| "postmaster.pid has no pid".into())
    }

    /// A `psql` command connected to the server as its superuser.
    pub(super) fn psql(&self) -> Command {
        self.psql_as("postgres")
    }

    /// A `psql` command connected to the server as `role`.
    pub(super) fn psql_as(&self, role: &str) -> Command {
        let mut cmd = Command::new(self.pg.bin("psql"));
        cmd.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-U",
            role,
            "-d",
            "postgres",
            "-h",
        ])
        .arg(&self.socket);
        cmd
    }

    /// Run `sql` in a new session; its output.
    pub(super) fn sql(&self, sql: &str) -> Res<String> {
        output(self.psql().arg("-c").arg(sql))
    }

    /// Run `sql` until it succeeds, for up to [`PATIENCE`].
    pub(super) fn sql_eventually(&self, sql: &str) -> Res<String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self.sql(sql) {
                Ok(out) => return Ok(out),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    pub(super) fn info(&self) -> Res<Info> {
        Info::parse(&self.sql_eventually("SELECT hal_pg_info()")?)
    }

    pub(super) fn stop(mut self) -> Res<()> {
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
pub(super) struct Info {
    pub(super) backend: String,
    pub(super) size: u64,
    pub(super) importers: u64,
    pub(super) worker_pid: u32,
    pub(super) generation: u64,
    pub(super) imports: u64,
    pub(super) first_import_us: u64,
}

impl Info {
    pub(super) fn parse(text: &str) -> Res<Info> {
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
