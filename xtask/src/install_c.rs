//! `cargo xtask install-c --prefix DIR [--debug]`: libhal_ipc built in
//! release mode (or the debug profile with `--debug`) and installed for C
//! and C++ programs:
//!
//! ```text
//! DIR/lib/libhal_ipc.so.1          the shared library (soname libhal_ipc.so.1)
//! DIR/lib/libhal_ipc.so.1.debug    its line tables (release), for gdb and backtraces
//! DIR/lib/libhal_ipc.so            -> libhal_ipc.so.1, for -lhal_ipc
//! DIR/lib/libhal_ipc.a             the static library
//! DIR/include/hal-ipc/hal.h        the header (`#include <hal.h>` with -IDIR/include/hal-ipc)
//! DIR/lib/pkgconfig/hal-ipc.pc     pkg-config --cflags --libs hal-ipc
//! ```
//!
//! The names are `hal-ipc`'s, not `hal`'s: `libhal` and `hal.pc` belong to
//! freedesktop's old HAL library, still installed on some systems; the
//! header keeps its name in a folder of its own. `hal-ipc.pc` links with
//! `-Wl,-rpath,DIR/lib`, so a program built with it finds
//! `libhal_ipc.so.1` under any prefix. When DIR/lib is a folder the
//! dynamic loader searches anyway (its own, or one listed in
//! `/etc/ld.so.conf`, like `/usr/local/lib`), the command runs `ldconfig`
//! as root, or prints that command for the user to run; otherwise it prints
//! how a program finds the library.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The shared library under its soname.
const SONAME: &str = "libhal_ipc.so.1";
/// The shared library as cargo builds it, and its link name (`-lhal_ipc`).
const SHARED: &str = "libhal_ipc.so";
/// The static library.
const STATIC: &str = "libhal_ipc.a";
/// The pkg-config file (`pkg-config hal-ipc`).
const PC: &str = "hal-ipc.pc";
/// The header's folder under `include/`, which the pkg-config file's
/// `Cflags` name, so that programs keep writing `#include <hal.h>`.
const HEADER_DIR: &str = "hal-ipc";

/// The pkg-config file for `prefix`, from `hal-ffi/hal-ipc.pc.in`.
fn pc_text(root: &Path, prefix: &Path) -> Result<String, String> {
    let template = std::fs::read_to_string(root.join("hal-ffi/hal-ipc.pc.in"))
        .map_err(|e| format!("reading hal-ffi/hal-ipc.pc.in: {e}"))?;
    Ok(template
        .replace("@PREFIX@", &prefix.to_string_lossy())
        .replace("@VERSION@", env!("CARGO_PKG_VERSION")))
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))
}

fn install(root: &Path, cargo: &str, prefix: &Path, debug: bool) -> Result<(), String> {
    let mut args = vec!["build", "-p", "hal-ffi", "--lib"];
    if !debug {
        args.push("--release");
    }
    println!("+ {cargo} {}", args.join(" "));
    let status = Command::new(cargo)
        .args(&args)
        .current_dir(root)
        .status()
        .map_err(|e| format!("starting cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build failed: {status}"));
    }
    let target = crate::target_dir(root, cargo).join(if debug { "debug" } else { "release" });
    let prefix = if prefix.is_absolute() {
        prefix.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("the current folder: {e}"))?
            .join(prefix)
    };
    let lib = prefix.join("lib");
    let include = prefix.join("include").join(HEADER_DIR);
    let pkgconfig = lib.join("pkgconfig");
    for dir in [&lib, &include, &pkgconfig] {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    copy(&target.join(SHARED), &lib.join(SONAME))?;
    let link = lib.join(SHARED);
    if link.symlink_metadata().is_ok() {
        std::fs::remove_file(&link).map_err(|e| format!("replacing {}: {e}", link.display()))?;
    }
    std::os::unix::fs::symlink(SONAME, &link)
        .map_err(|e| format!("linking {}: {e}", link.display()))?;
    copy(&target.join(STATIC), &lib.join(STATIC))?;
    let debug_file = lib.join(format!("{SONAME}.debug"));
    if debug {
        // The debug profile's libraries keep their line tables; a release
        // install's debug file would describe another build.
        let _ = std::fs::remove_file(&debug_file);
    } else {
        split_debug_information(&lib, &debug_file)?;
    }
    copy(&root.join("include/hal.h"), &include.join("hal.h"))?;
    std::fs::write(pkgconfig.join(PC), pc_text(root, &prefix)?)
        .map_err(|e| format!("writing {PC}: {e}"))?;
    let mut installed = vec![lib.join(SONAME), link, lib.join(STATIC)];
    if !debug {
        installed.push(debug_file);
    }
    installed.extend([include.join("hal.h"), pkgconfig.join(PC)]);
    for path in installed {
        let size = std::fs::symlink_metadata(&path).map_or(0, |m| m.len());
        println!("installed {} ({size} bytes)", path.display());
    }
    tell_the_loader(&lib)
}

/// The release build's line tables (the workspace's crates keep them, so
/// that a backtrace names files and lines) leave the installed libraries:
/// the shared library's go to `libhal_ipc.so.1.debug` beside it, which gdb and
/// Rust's backtraces find through the `.gnu_debuglink` section the stripped
/// library keeps; the static library's are dropped (a program linked with
/// it still names hal's functions in a backtrace, without lines). Symbol
/// tables stay in both.
fn split_debug_information(lib: &Path, debug_file: &Path) -> Result<(), String> {
    let so = lib.join(SONAME);
    let link = format!("--add-gnu-debuglink={}", debug_file.display());
    let archive = lib.join(STATIC);
    let steps: [(&str, Vec<&std::ffi::OsStr>); 3] = [
        (
            "objcopy",
            vec![
                "--only-keep-debug".as_ref(),
                so.as_os_str(),
                debug_file.as_os_str(),
            ],
        ),
        (
            "objcopy",
            vec!["--strip-debug".as_ref(), link.as_ref(), so.as_os_str()],
        ),
        ("strip", vec!["--strip-debug".as_ref(), archive.as_os_str()]),
    ];
    for (tool, args) in steps {
        let shown: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
        println!("+ {tool} {}", shown.join(" "));
        let status = Command::new(tool)
            .args(&args)
            .status()
            .map_err(|e| format!("running {tool} (binutils, which cc links with, has it): {e}"))?;
        if !status.success() {
            return Err(format!("{tool} failed: {status}"));
        }
    }
    Ok(())
}

/// Make `lib`'s `libhal_ipc.so.1` findable at run time, or say how a
/// program finds it: `ldconfig` for a folder the dynamic loader searches,
/// the rpath `hal-ipc.pc` links with for any other.
fn tell_the_loader(lib: &Path) -> Result<(), String> {
    let searched = loader_dirs();
    if !searched.iter().any(|dir| same_dir(dir, lib)) {
        println!(
            "\n{lib} is not a folder the dynamic loader searches. A program finds {SONAME} there\n\
             - when built with `pkg-config --cflags --libs hal-ipc` (PKG_CONFIG_PATH={lib}/pkgconfig):\n\
             \x20 {PC} links it with -Wl,-rpath,{lib};\n\
             - otherwise, when linked with -Wl,-rpath,{lib} or run with LD_LIBRARY_PATH={lib}.",
            lib = lib.display()
        );
        return Ok(());
    }
    if !is_root() {
        println!(
            "\n{} is a folder the dynamic loader searches, through the cache ldconfig\n\
             writes: run, as root,\n\
             \x20 sudo ldconfig\n\
             so that programs find {SONAME} there.",
            lib.display()
        );
        return Ok(());
    }
    let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .unwrap_or("ldconfig");
    println!("+ {ldconfig}");
    match Command::new(ldconfig).status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!(
            "{ldconfig} failed ({status}): programs may not find {} until it runs",
            lib.join(SONAME).display()
        )),
        Err(e) => Err(format!(
            "running {ldconfig}: {e}; run `ldconfig` as root so that programs find {}",
            lib.join(SONAME).display()
        )),
    }
}

/// Whether this process runs as root (its effective user id is 0).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            // Real, effective, saved, file system.
            line.split_whitespace().nth(2).map(|uid| uid == "0")
        })
        .unwrap_or(false)
}

/// Two folders are the same when they resolve to the same place (`/lib` is
/// `/usr/lib` where `/lib` is a link), or have the same text when either
/// does not resolve.
fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The folders the dynamic loader searches for a library no rpath or
/// `LD_LIBRARY_PATH` points at: its built-in ones (glibc's, with Debian's
/// multiarch folders) and those `/etc/ld.so.conf` lists, directly or
/// through its `include` lines, which `ldconfig` puts in its cache.
fn loader_dirs() -> Vec<PathBuf> {
    let triple = format!("{}-linux-gnu", std::env::consts::ARCH);
    let mut dirs: Vec<PathBuf> = ["/lib", "/usr/lib", "/lib64", "/usr/lib64"]
        .iter()
        .map(PathBuf::from)
        .chain([
            Path::new("/lib").join(&triple),
            Path::new("/usr/lib").join(&triple),
        ])
        .collect();
    ld_so_conf(Path::new("/etc/ld.so.conf"), 0, &mut dirs);
    dirs
}

/// The folders `file` (in `ld.so.conf`'s syntax) lists, appended to `out`:
/// one or more per line (separated by spaces, tabs, commas or colons), `#`
/// comments, `include PATTERN` (a glob, relative to `file`'s folder unless
/// absolute) and `hwcap` lines (ignored).
fn ld_so_conf(file: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    let Ok(text) = std::fs::read_to_string(file) else {
        return;
    };
    if depth > 8 {
        return;
    }
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split([' ', '\t', ',', ':']).filter(|w| !w.is_empty());
        match words.next() {
            None | Some("hwcap") => {}
            Some("include") => {
                for pattern in words {
                    let base = file.parent().unwrap_or(Path::new("/"));
                    for included in glob(&base.join(pattern)) {
                        ld_so_conf(&included, depth + 1, out);
                    }
                }
            }
            Some(first) => out.extend(std::iter::once(first).chain(words).map(PathBuf::from)),
        }
    }
}

/// The files `pattern` names, sorted: its last component may hold `*` and
/// `?` wildcards (as `include /etc/ld.so.conf.d/*.conf` does).
fn glob(pattern: &Path) -> Vec<PathBuf> {
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
        return Vec::new();
    };
    let name = name.to_string_lossy();
    if !name.contains(['*', '?']) {
        return vec![pattern.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| wildcard(name.as_bytes(), e.file_name().as_encoded_bytes()))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// Whether `text` matches `pattern`, where `*` is any run of bytes and `?`
/// any one byte; a leading `.` is matched only by a `.`, as a shell glob.
fn wildcard(pattern: &[u8], text: &[u8]) -> bool {
    if text.first() == Some(&b'.') && pattern.first() != Some(&b'.') {
        return false;
    }
    fn matches(p: &[u8], t: &[u8]) -> bool {
        match (p.split_first(), t.split_first()) {
            (None, _) => t.is_empty(),
            (Some((b'*', rest)), _) => (0..=t.len()).any(|i| matches(rest, &t[i..])),
            (Some((b'?', rest)), Some((_, t_rest))) => matches(rest, t_rest),
            (Some((c, rest)), Some((d, t_rest))) => c == d && matches(rest, t_rest),
            (Some(_), None) => false,
        }
    }
    matches(pattern, text)
}

/// The command.
pub(crate) fn install_c_cmd(root: &Path, cargo: &str, args: &[String]) -> ExitCode {
    let (prefix, debug) = match args {
        [flag, dir] if flag == "--prefix" => (PathBuf::from(dir), false),
        [flag, dir, d] if flag == "--prefix" && d == "--debug" => (PathBuf::from(dir), true),
        _ => {
            eprintln!("xtask install-c: usage: cargo xtask install-c --prefix DIR [--debug]");
            return ExitCode::from(2);
        }
    };
    match install(root, cargo, &prefix, debug) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask install-c: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_as_a_shell_glob() {
        assert!(wildcard(b"*.conf", b"libc.conf"));
        assert!(!wildcard(b"*.conf", b".hidden.conf"));
        assert!(!wildcard(b"*.conf", b"libc.conf~"));
        assert!(wildcard(b"lib?.conf", b"libc.conf"));
        assert!(wildcard(b"*", b"x"));
        assert!(!wildcard(b"a*b", b"ac"));
    }

    #[test]
    fn ld_so_conf_lists_its_folders_and_those_of_its_includes() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("ld.so.conf.d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(
            dir.path().join("ld.so.conf"),
            "# comment\n/opt/a/lib  # trailing\ninclude ld.so.conf.d/*.conf\nhwcap 0 x\n/opt/b:/opt/c\n",
        )
        .unwrap();
        std::fs::write(d.join("libc.conf"), "/usr/local/lib\n").unwrap();
        std::fs::write(d.join("x.conf.bak"), "/never\n").unwrap();
        let mut out = Vec::new();
        ld_so_conf(&dir.path().join("ld.so.conf"), 0, &mut out);
        let want: Vec<PathBuf> = ["/opt/a/lib", "/usr/local/lib", "/opt/b", "/opt/c"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(out, want);
    }

    #[test]
    fn the_loaders_own_folders_are_searched_and_a_temporary_one_is_not() {
        let dirs = loader_dirs();
        assert!(dirs.iter().any(|d| same_dir(d, Path::new("/usr/lib"))));
        // Debian lists /usr/local/lib in /etc/ld.so.conf.d/libc.conf.
        let listed = std::fs::read_to_string("/etc/ld.so.conf.d/libc.conf")
            .is_ok_and(|t| t.lines().any(|l| l.trim() == "/usr/local/lib"));
        if listed {
            assert!(dirs.iter().any(|d| d == Path::new("/usr/local/lib")));
        }
        let tmp = tempfile::tempdir().unwrap();
        assert!(!dirs.iter().any(|d| same_dir(d, tmp.path())));
    }
}
