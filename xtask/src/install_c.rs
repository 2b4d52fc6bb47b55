//! `cargo xtask install-c --prefix DIR [--debug]`: libhal built in release
//! mode (or the debug profile with `--debug`) and installed for C and C++
//! programs:
//!
//! ```text
//! DIR/lib/libhal.so.1          the shared library (soname libhal.so.1)
//! DIR/lib/libhal.so            -> libhal.so.1, for -lhal
//! DIR/lib/libhal.a             the static library
//! DIR/include/hal.h            the header
//! DIR/lib/pkgconfig/hal.pc     pkg-config --cflags --libs hal
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The file names: the shared library under its soname.
const SONAME: &str = "libhal.so.1";

/// The pkg-config file for `prefix`, from `hal-ffi/hal.pc.in`.
fn pc_text(root: &Path, prefix: &Path) -> Result<String, String> {
    let template = std::fs::read_to_string(root.join("hal-ffi/hal.pc.in"))
        .map_err(|e| format!("reading hal-ffi/hal.pc.in: {e}"))?;
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
    let include = prefix.join("include");
    let pkgconfig = lib.join("pkgconfig");
    for dir in [&lib, &include, &pkgconfig] {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    copy(&target.join("libhal.so"), &lib.join(SONAME))?;
    let link = lib.join("libhal.so");
    if link.symlink_metadata().is_ok() {
        std::fs::remove_file(&link).map_err(|e| format!("replacing {}: {e}", link.display()))?;
    }
    std::os::unix::fs::symlink(SONAME, &link)
        .map_err(|e| format!("linking {}: {e}", link.display()))?;
    copy(&target.join("libhal.a"), &lib.join("libhal.a"))?;
    copy(&root.join("include/hal.h"), &include.join("hal.h"))?;
    std::fs::write(pkgconfig.join("hal.pc"), pc_text(root, &prefix)?)
        .map_err(|e| format!("writing hal.pc: {e}"))?;
    for path in [
        lib.join(SONAME),
        link,
        lib.join("libhal.a"),
        include.join("hal.h"),
        pkgconfig.join("hal.pc"),
    ] {
        println!("installed {}", path.display());
    }
    Ok(())
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
