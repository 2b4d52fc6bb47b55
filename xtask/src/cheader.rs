//! `cargo xtask cheader [--check]`: the C header `include/hal.h` generated
//! by cbindgen from the hal-ffi crate (its settings: `hal-ffi/cbindgen.toml`),
//! or with `--check` compared with the checked-in file (exit 1 when they
//! differ). cbindgen's output is stable for a given cbindgen version, which
//! `Cargo.lock` pins.

use std::path::Path;
use std::process::ExitCode;

/// The crate the header comes from, relative to the workspace root.
const CRATE: &str = "hal-ffi";
/// The generated header, relative to the workspace root.
const OUTPUT: &str = "include/hal.h";

/// Generate the header's text.
fn generate(root: &Path) -> Result<String, String> {
    let dir = root.join(CRATE);
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .map_err(|e| format!("reading {CRATE}/cbindgen.toml: {e}"))?;
    let bindings = cbindgen::Builder::new()
        .with_crate(&dir)
        .with_config(config)
        .generate()
        .map_err(|e| format!("cbindgen on {CRATE}: {e}"))?;
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).map_err(|e| format!("cbindgen wrote something not UTF-8: {e}"))
}

/// The command: write the header, or with `check` compare it.
pub(crate) fn cheader_cmd(root: &Path, args: &[String]) -> ExitCode {
    let check = match args {
        [] => false,
        [a] if a == "--check" => true,
        _ => {
            eprintln!("xtask cheader: takes only --check");
            return ExitCode::from(2);
        }
    };
    let fresh = match generate(root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("xtask cheader: {e}");
            return ExitCode::from(1);
        }
    };
    let out = root.join(OUTPUT);
    if check {
        let old = std::fs::read_to_string(&out).unwrap_or_default();
        if old != fresh {
            eprintln!(
                "xtask cheader --check: {OUTPUT} differs from a fresh generation from {CRATE}; \
                 run `cargo xtask cheader` and commit the result"
            );
            return ExitCode::from(1);
        }
        println!("{OUTPUT} matches {CRATE}");
        return ExitCode::SUCCESS;
    }
    if let Some(dir) = out.parent() {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("xtask cheader: creating {}: {e}", dir.display());
            return ExitCode::from(1);
        }
    }
    match std::fs::write(&out, fresh) {
        Ok(()) => {
            println!("wrote {OUTPUT}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask cheader: writing {}: {e}", out.display());
            ExitCode::from(1)
        }
    }
}
