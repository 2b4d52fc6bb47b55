//! Finding the server's programs, the user it runs as, its scratch folder,
//! and building what it loads.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::proc::{copy, output, run, Res};

/// The server's programs and headers.
pub(super) struct PgConfig {
    pub(super) bindir: PathBuf,
    pub(super) pg_config: PathBuf,
    pub(super) version: String,
}

impl PgConfig {
    pub(super) fn find() -> Res<PgConfig> {
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

    pub(super) fn bin(&self, name: &str) -> PathBuf {
        self.bindir.join(name)
    }
}

/// Debian installs each server version under /usr/lib/postgresql/N.
pub(super) fn newest_debian_pg_config() -> Option<PathBuf> {
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

pub(super) fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The user the server runs as: PostgreSQL refuses to run as root, so as
/// root the `postgres` account (or `nobody`); otherwise this user.
pub(super) struct ServerUser {
    /// `(uid, gid)` to switch to; `None` when not root.
    pub(super) ids: Option<(u32, u32)>,
    pub(super) name: String,
}

impl ServerUser {
    pub(super) fn pick() -> Res<ServerUser> {
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
    pub(super) fn command(&self, program: &Path) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(program);
        if let Some((uid, gid)) = self.ids {
            cmd.uid(uid).gid(gid);
            cmd.env("HOME", "/tmp").env("USER", &self.name);
        }
        cmd
    }

    pub(super) fn own(&self, path: &Path) -> Res<()> {
        if let Some((uid, gid)) = self.ids {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", path.display()))?;
        }
        Ok(())
    }
}

/// The temporary folder everything lives in; removed on drop.
pub(super) struct Scratch {
    pub(super) path: PathBuf,
}

impl Scratch {
    pub(super) fn new(user: &ServerUser) -> Res<Scratch> {
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

pub(super) fn build(root: &Path, cargo: &str) -> Res<()> {
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
pub(super) struct Extension {
    pub(super) library: PathBuf,
    pub(super) sql: String,
    pub(super) standin: PathBuf,
    pub(super) halctl: PathBuf,
}

pub(super) fn build_extension(
    root: &Path,
    cargo: &str,
    pg: &PgConfig,
    scratch: &Scratch,
) -> Res<Extension> {
    let src = root.join("examples/postgres/hal_pg");
    let dir = scratch.path.join("ext");
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).map_err(|e| format!("{}: {e}", lib.display()))?;
    for f in ["hal_pg.c", "Makefile", "hal_pg.control", "hal_pg--0.1.sql"] {
        copy(&src.join(f), &dir.join(f))?;
    }
    // Where `build` built them, CARGO_TARGET_DIR included: never a stale
    // copy under the workspace's own target/.
    let built = crate::target_dir(root, cargo).join("release");
    // The server's user reads the libraries from here, whatever the
    // permissions of the build tree.
    // The link name, and the soname the extension's library asks for.
    copy(&built.join("libhal_ipc.so"), &lib.join("libhal_ipc.so"))?;
    copy(&built.join("libhal_ipc.so"), &lib.join("libhal_ipc.so.1"))?;
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
