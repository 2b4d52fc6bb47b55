//! `cargo xtask`: the project's own automation, in Rust with the standard
//! library only.
//!
//! ```text
//! cargo xtask ci          formatting, clippy (warnings are errors), the tests
//! cargo xtask matrix      each backend feature of `hal` alone, all together and none,
//!                         built and tested on the host, checked (`cargo check`, with
//!                         every crate and every feature) for every other installed
//!                         target (aarch64 for Kunpeng hosts); prints a table
//! cargo xtask circles [CRATE...]
//!                         import cycles between the files of each crate (or of
//!                         the crates named), and crate roots that do not deny
//!                         `unsafe_code`, and imports that run against a crate's
//!                         layers (hal-core: the contract a leaf, the kit below the
//!                         features); exit 1 on any
//! cargo xtask bindgen     regenerate hal-ascend's and hal-ucx's bindings (--check: verify them)
//! cargo xtask cheader     regenerate include/hal.h from hal-ffi (--check: verify it)
//! cargo xtask install-c --prefix DIR [--debug]
//!                         build libhal_ipc in release mode (--debug: the debug profile)
//!                         and install the library, the header and hal-ipc.pc under DIR
//! cargo xtask gpu-smoke [--rehearse]
//!                         build, in release mode, what a GPU machine runs against its
//!                         real driver (target/gpu-smoke/, with run.sh); --rehearse
//!                         then runs it here with the stand-in as the driver
//! cargo xtask postgres [--backend cpu-shm|cuda-uvm]...
//!                         the hal_pg extension on a real PostgreSQL server, on
//!                         each backend (default both)
//! ```
//!
//! Every command prints what it runs. Exit codes: 0 success, 1 a step
//! failed, 2 bad usage or a command that is not available yet.

// `unsafe` only in the modules that say so (`#[allow(unsafe_code)]`).
#![deny(unsafe_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

mod bindgen;
mod cheader;
mod circles;
mod gpu_smoke;
mod install_c;
mod postgres;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci         cargo fmt --check, cargo clippy --workspace --all-targets -D warnings,
             and the tests (cargo nextest run --workspace plus the doc tests when
             cargo-nextest is installed, else cargo test --workspace)
  matrix     for each backend feature set of the hal crate (cpu-shm, mock, both,
             none, cuda, ascend, all) and each installed target: on the host, build
             the library with exactly that feature set, then run its tests (and
             the same for halctl); on other targets (rustup target add
             aarch64-unknown-linux-gnu) cargo check them, and every crate of the
             workspace with every feature; print a table; non-zero exit if any failed
  circles [CRATE...]
             import cycles between the files of each workspace crate (or of the
             crates named): the `use crate::`, `crate::`, `super::` and `self::`
             paths of src/**/*.rs followed to the file that defines them (through
             re-exports; comments, strings and #[cfg(test)] modules skipped);
             prints each crate's files in layers, leaves first, and every cycle;
             also checks that every crate root denies unsafe_code (#![deny(unsafe_code)],
             the modules that need it allow it by name); and hal-core's layers: its
             contract's files import only each other (their import closure, in files
             and lines outside #[cfg(test)] items, is printed and stays under 4000
             lines) and the kit imports nothing from exchange, lease, channel or
             group, each import that breaks them named with file and line
             (XTASK_CONTRACT_FILES=1 also lists the closure's files with their lines);
             exit 1 on a cycle, a root that does not deny unsafe_code, or a broken layer
  bindgen    regenerate hal-ascend/src/ffi/bindings.rs from hal-ascend/include/acl_subset.h
             and hal-ucx/src/ffi/bindings.rs from UCX's ucp/api/ucp.h (libucx-dev, or the
             folder UCX_INCLUDE names); with --check, fail when a checked-in file differs
             from a fresh generation; both fail when hal-ascend's header declares a function
             the public CANN headers do not (hal-ascend/include/acl_names.txt)
  cheader    regenerate include/hal.h (the C header) from hal-ffi with cbindgen;
             with --check, fail when the checked-in file differs from a fresh generation
  install-c --prefix DIR [--debug]
             build hal-ffi in release mode (--debug: the debug profile) and install DIR/lib/libhal_ipc.so (with its
             soname), DIR/lib/libhal_ipc.a, DIR/include/hal-ipc/hal.h and DIR/lib/pkgconfig/hal-ipc.pc
  gpu-smoke  build in release mode, stripped, into target/gpu-smoke/: hal-cuda's test
             executables (its conformance suite switches to the real driver there),
             hal's examples, halctl, and run.sh, which a machine with an NVIDIA GPU and
             no Rust toolchain runs to write summary.txt, report.jsonl, bench.txt
             and logs.tar.gz (HAL_SMOKE_DEADLINE: seconds, default 480); with
             --rehearse, then run run.sh here with the stand-in libcuda as the driver
             (HAL_CUDA_LIBRARY) into target/gpu-smoke-rehearsal/, and fail unless
             every step passed and every test step ran tests
  postgres [--backend cpu-shm|cuda-uvm]...
             build libhal_ipc (hal-ffi), halctl and the stand-in libcuda, then the hal_pg
             extension (examples/postgres/hal_pg) with PGXS, installing the server
             headers when missing (as root); for each backend (default: cpu-shm, then
             cuda-uvm over the stand-in driver) create a cluster in a temporary folder
             as an unprivileged user, start it on a Unix socket there, run the checks
             (16 concurrent sessions, a parallel query, a terminated session, the
             worker stopped and killed, the postmaster clean of vendor runtimes), the
             1 MiB read benchmark, stop it and remove everything
  help       this text

environment: XTASK_STEP_TIMEOUT  seconds one cargo invocation may run (default 1800);
             a step that runs longer is stopped and counts as failed

exit codes: 0 success, 1 a step failed, 2 bad usage or a command not available yet";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if cmd == "circles" {
        return circles_cmd(&args[1..]);
    }
    if cmd == "bindgen" {
        return bindgen::bindgen_cmd(&root(), &args[1..]);
    }
    if cmd == "cheader" {
        return cheader::cheader_cmd(&root(), &args[1..]);
    }
    if cmd == "install-c" {
        return install_c::install_c_cmd(&root(), &cargo(), &args[1..]);
    }
    if cmd == "gpu-smoke" {
        return match args[1..] {
            [] => gpu_smoke::gpu_smoke(&root(), &cargo(), false),
            [ref flag] if flag == "--rehearse" => gpu_smoke::gpu_smoke(&root(), &cargo(), true),
            _ => {
                eprintln!("xtask: `gpu-smoke` takes only --rehearse\n\n{USAGE}");
                ExitCode::from(2)
            }
        };
    }
    if cmd == "postgres" {
        return postgres::postgres_cmd(&root(), &cargo(), &args[1..]);
    }
    if args.len() > 1 {
        eprintln!("xtask: `{cmd}` takes no arguments\n\n{USAGE}");
        return ExitCode::from(2);
    }
    match cmd.as_str() {
        "ci" => ci(),
        "matrix" => matrix(),
        "help" | "-h" | "--help" => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("xtask: unknown command `{other}`\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// `cargo xtask circles [CRATE...]`.
fn circles_cmd(names: &[String]) -> ExitCode {
    let root = root();
    let crates: Vec<PathBuf> = if names.is_empty() {
        // Crate folders at the root and one level below (hal-mock/libcuda).
        let list = |dir: &Path| -> Vec<PathBuf> {
            std::fs::read_dir(dir)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.path())
                        .filter(|p| p.is_dir())
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut all: Vec<PathBuf> = list(&root);
        let nested: Vec<PathBuf> = all.iter().flat_map(|p| list(p)).collect();
        all.extend(nested);
        all.retain(|p| p.join("Cargo.toml").is_file() && p.join("src").is_dir());
        all.sort();
        all
    } else {
        names.iter().map(|n| root.join(n)).collect()
    };
    let mut cycles = 0;
    for dir in crates {
        let name = dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        if !dir.join("src").is_dir() {
            eprintln!("xtask circles: `{name}` is not a crate folder of the workspace");
            return ExitCode::from(2);
        }
        let graph = match circles::graph(&dir) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("xtask circles: reading {}: {e}", dir.display());
                return ExitCode::from(2);
            }
        };
        let found = graph.cycles();
        let imports: usize = graph.edges.values().map(|d| d.len()).sum();
        println!(
            "{name}: {} files, {imports} imports between them, {}",
            graph.files.len(),
            match found.len() {
                0 => "no cycle".to_string(),
                1 => "1 cycle".to_string(),
                n => format!("{n} cycles"),
            }
        );
        for (i, layer) in graph.layers().iter().enumerate() {
            let names: Vec<&str> = layer.iter().map(|&f| graph.files[f].as_str()).collect();
            println!("  layer {i}: {}", names.join(" "));
        }
        for cycle in &found {
            let names: Vec<&str> = cycle.iter().map(|&f| graph.files[f].as_str()).collect();
            println!("  cycle: {}", names.join(" -> "));
        }
        cycles += found.len();
        if let Some(layers) = circles::layers_of(&name) {
            let contract = graph.contract(layers);
            let closure = graph.closure(&contract);
            let lines: usize = closure.iter().map(|&f| graph.lines[f]).sum();
            println!(
                "  contract: {} files; its import closure {} files, {lines} lines outside \
                 #[cfg(test)] items (budget {})",
                contract.len(),
                closure.len(),
                layers.contract_budget
            );
            if lines >= layers.contract_budget {
                println!(
                    "  the contract's import closure is over its budget of {} lines",
                    layers.contract_budget
                );
                cycles += 1;
            }
            if std::env::var_os("XTASK_CONTRACT_FILES").is_some() {
                for &f in &closure {
                    println!("    {} {}", graph.lines[f], graph.files[f]);
                }
            }
            for v in graph.violations(layers) {
                println!("  layer broken: {v}");
                cycles += 1;
            }
        }
        // `unsafe` stays where a module says so: every crate root denies it.
        for root_file in ["src/lib.rs", "src/main.rs"] {
            let path = dir.join(root_file);
            let Ok(code) = std::fs::read_to_string(&path) else {
                continue;
            };
            if !code.lines().any(|l| l.trim() == "#![deny(unsafe_code)]") {
                println!("  {root_file} does not deny unsafe_code (#![deny(unsafe_code)])");
                cycles += 1;
            }
        }
    }
    if cycles > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The workspace root (the parent of this crate's directory).
fn root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

/// The folder cargo builds into for the workspace at `root`, the one
/// place xtask looks for what it built: `CARGO_TARGET_DIR` when it is set
/// (relative to `root`, where xtask runs cargo), else `cargo metadata`'s
/// `target_directory` (which a `.cargo/config.toml`'s `build.target-dir`
/// changes), else `root/target`. A path joined to `root` instead would
/// find a stale build where cargo did not build.
pub(crate) fn target_dir(root: &Path, cargo: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return root.join(dir);
    }
    Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| metadata_target_directory(&String::from_utf8_lossy(&out.stdout)))
        .unwrap_or_else(|| root.join("target"))
}

/// The `target_directory` of `cargo metadata`'s JSON output.
fn metadata_target_directory(json: &str) -> Option<PathBuf> {
    const KEY: &str = "\"target_directory\":\"";
    let start = json.find(KEY)? + KEY.len();
    let mut path = String::new();
    let mut chars = json[start..].chars();
    loop {
        match chars.next()? {
            '"' => break,
            '\\' => match chars.next()? {
                '"' => path.push('"'),
                '\\' => path.push('\\'),
                '/' => path.push('/'),
                // A path with control characters: not worth decoding.
                _ => return None,
            },
            c => path.push(c),
        }
    }
    Some(PathBuf::from(path)).filter(|p| p.is_absolute())
}

/// How one cargo invocation ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Run {
    Ok,
    Failed,
    TimedOut,
}

/// How long one cargo invocation may run: `XTASK_STEP_TIMEOUT` seconds,
/// default 30 minutes. A hung test then fails its step instead of hanging
/// the whole run.
fn step_timeout() -> Duration {
    let secs = std::env::var("XTASK_STEP_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&s| s > 0)
        .unwrap_or(30 * 60);
    Duration::from_secs(secs)
}

/// Run `cargo args...` in the workspace root, echoing it first.
fn run_cargo(args: &[&str]) -> Run {
    println!("\n$ cargo {}", args.join(" "));
    let mut child = match Command::new(cargo()).args(args).current_dir(root()).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("xtask: could not run cargo: {e}");
            return Run::Failed;
        }
    };
    let limit = step_timeout();
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Run::Ok,
            Ok(Some(_)) => return Run::Failed,
            Ok(None) => {}
            Err(e) => {
                eprintln!("xtask: waiting for cargo: {e}");
                return Run::Failed;
            }
        }
        if Instant::now() >= deadline {
            eprintln!(
                "xtask: `cargo {}` ran past {} s (XTASK_STEP_TIMEOUT): stopping it",
                args.join(" "),
                limit.as_secs()
            );
            kill_tree(child.id());
            let _ = child.kill();
            let _ = child.wait();
            return Run::TimedOut;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The parent pid of `pid`, from `/proc/PID/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields resume after the command name's last ')': state, then ppid.
    stat.get(stat.rfind(')')? + 1..)?
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// SIGKILL `pid` and every process descended from it (cargo and the test
/// binaries it started).
fn kill_tree(pid: u32) {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            if let Some(p) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
                if let Some(pp) = parent_of(p) {
                    parent.insert(p, pp);
                }
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent.iter().filter(|(_, &pp)| pp == p).map(|(&c, _)| c));
        i += 1;
    }
    let pids: Vec<String> = tree.iter().map(u32::to_string).collect();
    let _ = Command::new("kill").arg("-KILL").args(&pids).status();
}

/// The stdout of `program args...` when it runs and succeeds (nothing echoed).
fn probe(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ci() -> ExitCode {
    let mut steps: Vec<(String, Run)> = Vec::new();
    let mut step = |name: &str, args: &[&str]| {
        let t = Instant::now();
        let run = run_cargo(args);
        steps.push((format!("{name} ({:.0} s)", t.elapsed().as_secs_f64()), run));
    };
    step("fmt", &["fmt", "--all", "--", "--check"]);
    step(
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    );
    if probe(&cargo(), &["nextest", "--version"]).is_some() {
        step("tests (nextest)", &["nextest", "run", "--workspace"]);
        // nextest does not run documentation examples.
        step("doc tests", &["test", "--workspace", "--doc"]);
    } else {
        println!("\n(cargo-nextest is not installed: running cargo test)");
        step("tests", &["test", "--workspace"]);
    }
    println!("\nxtask ci:");
    let mut failed = false;
    for (name, run) in &steps {
        println!("  {:<24} {}", name, outcome(*run).label());
        failed |= *run != Run::Ok;
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The host's target triple, from `rustc -vV`.
fn host_target() -> Option<String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    probe(&rustc, &["-vV"])?
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(|s| s.trim().to_string())
}

/// The installed targets (`rustup target list --installed`), host first; the
/// host alone when rustup is not there.
fn targets(host: &str) -> Vec<String> {
    let mut list = vec![host.to_string()];
    if let Some(out) = probe("rustup", &["target", "list", "--installed"]) {
        for t in out.lines().map(str::trim).filter(|t| !t.is_empty()) {
            if !list.iter().any(|x| x == t) {
                list.push(t.to_string());
            }
        }
    }
    list
}

/// The outcome of one build or test.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Failed,
    TimedOut,
    /// Not run: a cross target whose binaries cannot run here.
    NotRun,
    /// Not run because the build failed.
    Blocked,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "FAILED",
            Outcome::TimedOut => "TIMED OUT",
            Outcome::NotRun => "not run (cross)",
            Outcome::Blocked => "- (build failed)",
        }
    }
}

fn outcome(run: Run) -> Outcome {
    match run {
        Run::Ok => Outcome::Ok,
        Run::Failed => Outcome::Failed,
        Run::TimedOut => Outcome::TimedOut,
    }
}

struct Row {
    subject: String,
    target: String,
    build: Outcome,
    test: Outcome,
    secs: f64,
}

fn matrix() -> ExitCode {
    let Some(host) = host_target() else {
        eprintln!("xtask matrix: cannot tell the host target (rustc -vV failed)");
        return ExitCode::from(1);
    };
    // (label, the feature arguments of the hal crate)
    let sets: [(&str, &[&str]); 7] = [
        (
            "hal: cpu-shm",
            &["--no-default-features", "--features", "cpu-shm"],
        ),
        (
            "hal: mock",
            &["--no-default-features", "--features", "mock"],
        ),
        (
            "hal: cpu-shm,mock",
            &["--no-default-features", "--features", "cpu-shm,mock"],
        ),
        ("hal: no features", &["--no-default-features"]),
        (
            "hal: cuda",
            &["--no-default-features", "--features", "cuda"],
        ),
        (
            "hal: ascend",
            &["--no-default-features", "--features", "ascend"],
        ),
        ("hal: all features", &["--all-features"]),
    ];
    let mut rows = Vec::new();
    for target in targets(&host) {
        let native = target == host;
        // The host target is built without --target so that its artefacts
        // are shared with `cargo build` and `cargo xtask ci`.
        let target_args: Vec<&str> = if native {
            Vec::new()
        } else {
            vec!["--target", target.as_str()]
        };
        let mut subjects: Vec<(String, Vec<&str>)> = sets
            .iter()
            .map(|(label, feats)| {
                let mut a = vec!["-p", "hal-ipc"];
                a.extend_from_slice(feats);
                (label.to_string(), a)
            })
            .collect();
        // halctl always builds hal with cpu-shm and mock: once per target.
        subjects.push(("halctl".to_string(), vec!["-p", "halctl"]));
        if !native {
            // Every crate with every feature (a check: no linker for the
            // target is needed, and none is here).
            subjects.push((
                "workspace: all".to_string(),
                vec!["--workspace", "--all-features"],
            ));
        }
        for (subject, pkg_args) in subjects {
            let t = Instant::now();
            // The library (or binary) alone, so that the feature set is
            // exactly the one named: building tests and examples would add
            // the features that dev-dependencies turn on.
            // Other targets are checked (`cargo check` needs no linker for
            // them); the host's are built and tested.
            let mut build_args = vec![if native { "build" } else { "check" }];
            build_args.extend_from_slice(&pkg_args);
            build_args.extend_from_slice(&target_args);
            let build = outcome(run_cargo(&build_args));
            let test = if build != Outcome::Ok {
                Outcome::Blocked
            } else if !native {
                Outcome::NotRun
            } else {
                let mut test_args = vec!["test"];
                test_args.extend_from_slice(&pkg_args);
                outcome(run_cargo(&test_args))
            };
            rows.push(Row {
                subject,
                target: target.clone(),
                build,
                test,
                secs: t.elapsed().as_secs_f64(),
            });
        }
    }
    println!("\nxtask matrix:");
    println!(
        "  {:<20} {:<28} {:<14} {:<18} {:>6}",
        "feature set", "target", "build / check", "test", "time"
    );
    let mut failed = false;
    for r in &rows {
        let build = if r.target == host {
            r.build.label().to_string()
        } else {
            format!("{} (check)", r.build.label())
        };
        println!(
            "  {:<20} {:<28} {:<14} {:<18} {:>5.0}s",
            r.subject,
            r.target,
            build,
            r.test.label(),
            r.secs
        );
        failed |= matches!(r.build, Outcome::Failed | Outcome::TimedOut)
            || matches!(r.test, Outcome::Failed | Outcome::TimedOut);
    }
    if failed {
        println!("\nxtask matrix: FAILED");
        ExitCode::from(1)
    } else {
        println!("\nxtask matrix: all passed");
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_directory_of_cargo_metadata() {
        let json = r#"{"packages":[],"target_directory":"/w/t \"x\"\\y/target","version":1}"#;
        assert_eq!(
            metadata_target_directory(json),
            Some(PathBuf::from(r#"/w/t "x"\y/target"#))
        );
        assert_eq!(metadata_target_directory(r#"{"version":1}"#), None);
        assert_eq!(
            metadata_target_directory(r#"{"target_directory":"rel/target"}"#),
            None
        );
        assert_eq!(
            metadata_target_directory(r#"{"target_directory":"/cut"#),
            None
        );
    }

    /// What cargo itself reports for this workspace: `target_dir` agrees.
    #[test]
    fn target_dir_is_where_cargo_builds() {
        let root = root();
        let out = Command::new(cargo())
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let reported = metadata_target_directory(&String::from_utf8_lossy(&out.stdout)).unwrap();
        assert_eq!(target_dir(&root, &cargo()), reported);
    }
}
