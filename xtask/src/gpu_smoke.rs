//! `cargo xtask gpu-smoke`: build, here, what a machine with an NVIDIA GPU
//! and no Rust toolchain runs against its real driver, and the script that
//! runs it.
//!
//! The folder `target/gpu-smoke/` gets, in release mode and stripped: the
//! test executables of `hal-cuda` and `hal-cuda-uvm` (their conformance
//! suites among them, switched to the real driver by
//! `HAL_CUDA_CONFORMANCE_DRIVER=1`), the numbered examples of `hal` (with
//! `cuda-uvm`), `hal-cuda-uvm`'s benchmark (`uvm_bench`), `halctl`, and
//! `run.sh`. The script runs each, the driver probe (`driver_waits`) and
//! the conformance suites first, and writes
//! four files into the folder named by its first argument (default:
//! `./out`), whatever the number of steps: `report.jsonl` (one line per
//! step: name, exit code, seconds, tests passed and failed), `summary.txt`,
//! `bench.txt` (the benchmark logs and the probe's answers) and
//! `logs.tar.gz` (every step's log). The summary names the driver the run
//! loaded (its file and version, from hal-cuda's conformance binary); a run
//! that loaded none exits 1 and says so.
//! The script installs the wheel offline (`pip install --no-deps --no-index
//! --target`, into a folder of its own on `PYTHONPATH`, with the Python
//! `HAL_SMOKE_PYTHON` names or `python3`) and runs each script as a step: a
//! PyTorch CUDA tensor shared with `hal.share` opened as PyTorch and CuPy
//! tensors in other processes, a hal-cuda-uvm managed buffer read by CuPy
//! and by NumPy, and the benchmark against `torch.multiprocessing`. A
//! script that cannot run a part here (no PyTorch, no CuPy, no GPU) prints
//! `NOT RUN: why`; the step's report line counts those lines
//! (`"not_run"`), and the summary names the steps that had any.
//! A run has a deadline (`HAL_SMOKE_DEADLINE`, seconds) past which no step
//! starts, and a run stopped by a signal still writes its files: a lent
//! machine's short lease always gets a report back.
//!
//! `--rehearse` then runs the script here, with the stand-in `libcuda.so.1`
//! the release build made as the driver (`HAL_CUDA_LIBRARY`), into
//! `target/gpu-smoke-rehearsal/`, and fails unless every step passed and
//! every test step ran tests: the script and the folder are proven before
//! a GPU's short lease is spent on them. The rehearsal says which steps did
//! not run their checks (the Python GPU parts: no PyTorch, CuPy or GPU
//! here); they do not fail it.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// The most the folder may hold, in bytes: what a run on a lent machine
/// can carry.
const BUDGET: u64 = 60 << 20;

/// The test executables of hal-cuda that run on the machine's driver (the
/// conformance suites, the crash checks, the raw-handle tests and the
/// teardowns of a dropped reservation and of dropped memory switch to it;
/// the others test a missing driver and the crate's units). The rest need
/// the stand-in's devices and switches.
const RUN_ON_THE_DRIVER: &[&str] = &[
    // hal-ucx's: memory across two hosts made of network namespaces, on the
    // UCX the folder carries (`ucx/`, with CUDA support).
    "remote-",
    "conformance-",
    "no_driver-",
    "hal_cuda-",
    "crash-",
    "raw-",
    "teardown-",
    "uvm_conformance-",
    "driver_waits-",
    "quiet-",
];

/// The run script.
const RUN_SH: &str = r#"#!/usr/bin/env bash
# Run on a machine with an NVIDIA GPU: every step against the real driver.
#
# OUT gets at most four files, whatever the number of steps: summary.txt,
# report.jsonl (a line per step), bench.txt (the benchmark lines, the
# figures of the run) and logs.tar.gz (every step's whole log): a lent
# machine hands back only a few files.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/out}"
mkdir -p "$out" || exit 1
logs="$(mktemp -d "${TMPDIR:-/tmp}/gpu-smoke-logs.XXXXXX")" || exit 1
report="$out/report.jsonl"
: > "$report"
export HAL_CUDA_CONFORMANCE_DRIVER=1
export RUST_BACKTRACE=1
# A step that hangs on a driver ends after this many seconds (rc 124) and the
# run goes on: the lent machine's time is short.
step_timeout="${HAL_SMOKE_STEP_TIMEOUT:-240}"
# No step starts once this many seconds have passed since the run began (rc
# 125, "not started"), and a running step is cut at it: the summary is
# written before the lease's own limit ends the command.
deadline="${HAL_SMOKE_DEADLINE:-480}"
began=$(date +%s)
child=
watch=
# End the stack watcher of a step, its sleep with it.
unwatch() {
    [ -n "$watch" ] || return 0
    kill $(pgrep -P "$watch") "$watch" 2>/dev/null
    wait "$watch" 2>/dev/null
    watch=
}
finish() {
    trap - TERM INT
    [ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child" 2>/dev/null
    unwatch
    # The driver the run loaded (the `driver` step's line): a run without
    # one tested nothing of what it is for, and fails.
    loaded=$(sed -n 's/^driver-loaded: //p' "$logs/driver.log" 2>/dev/null | head -n 1)
    [ -n "$loaded" ] || status=1
    {
        for f in "$logs"/bench-*.log "$logs"/example-*bench*.log; do
            [ -f "$f" ] && { echo "== $(basename "$f")"; cat "$f"; }
        done
        # The driver's answers: which calls wait for a gated stream.
        grep -h '^driver-waits:' "$logs"/test-driver_waits-*.log 2>/dev/null
    } > "$out/bench.txt" 2>/dev/null
    tar -C "$logs" -czf "$out/logs.tar.gz" . 2>/dev/null
    [ -n "${site:-}" ] && rm -rf "$site"
    [ -n "${ucx_dir:-}" ] && rm -rf "$ucx_dir"
    {
        echo "gpu-smoke: $(date -u +%FT%TZ) on $(hostname)"
        nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
        if [ -n "$loaded" ]; then
            echo "driver: $loaded"
        else
            echo "driver: NONE LOADED (HAL_CUDA_LIBRARY=${HAL_CUDA_LIBRARY:-unset}; see driver.log): the run FAILED"
        fi
        awk -F'"rc":' '{split($2, a, ","); if (a[1] != 0) bad++} END {printf "steps: %d, failed: %d\n", NR, bad+0}' "$report"
        # Steps with checks that could not run here (no PyTorch, no CuPy, no GPU).
        grep -v '"not_run":0' "$report" | grep '"not_run":' | sed 's/^{"step":"\([^"]*\)".*"not_run":\([0-9]*\).*/NOT RUN: \2 check(s) of step \1 (see its log)/'
        cat "$report"
    } > "$out/summary.txt"
    rm -rf "$logs"
    cat "$out/summary.txt"
}
# The exit status: 1 when no driver was loaded (finish says so).
status=0
loaded=
# Stopped from outside (the lease's limit): what ran is still reported.
trap 'echo "{\"step\":\"interrupted\",\"rc\":143,\"seconds\":0.00,\"passed\":0,\"failed\":0}" >> "$report"; finish; exit 143' TERM INT
# The debugger that takes stacks: HAL_SMOKE_GDB, else cuda-gdb or gdb.
gdb="${HAL_SMOKE_GDB:-$(command -v cuda-gdb || command -v gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)}"
# The stacks of every thread of the processes under `timeout` PID $1.
stacks() {
    local p
    kill -0 "$1" 2>/dev/null || return 0
    [ -n "$gdb" ] || { echo "no debugger to take stacks with"; return 0; }
    for p in $(pgrep -P "$1"); do
        echo "=== pid $p: $(tr '\0' ' ' < "/proc/$p/cmdline" | cut -c1-300)"
        timeout 30 "$gdb" -p "$p" -batch -ex "thread apply all bt 30" < /dev/null
        for c in $(pgrep -P "$p"); do
            echo "=== child $c of $p: $(tr '\0' ' ' < "/proc/$c/cmdline" | cut -c1-300)"
            timeout 30 "$gdb" -p "$c" -batch -ex "thread apply all bt 30" < /dev/null
        done
    done
}
step() {
    local name="$1"; shift
    local start end rc passed failed left limit at
    left=$(( deadline - ($(date +%s) - began) ))
    if [ "$left" -le 0 ]; then
        printf '{"step":"%s","rc":125,"seconds":0.00,"passed":0,"failed":0}\n' "$name" >> "$report"
        return
    fi
    limit=$step_timeout
    [ "$left" -lt "$limit" ] && limit=$left
    start=$(date +%s.%N)
    # In the background, so that a signal to the script is handled at once.
    timeout --kill-after=10 "$limit" "$@" > "$logs/$name.log" 2>&1 < /dev/null &
    child=$!
    # A step still running 20 s before its limit has its threads' stacks
    # taken (which driver call each waits in) into NAME.stacks.
    at=$(( limit - 20 )); [ "$at" -lt 1 ] && at=1
    ( sleep "$at"; stacks "$child" > "$logs/$name.stacks" 2>&1 ) &
    watch=$!
    wait "$child"
    rc=$?
    child=
    unwatch
    [ -s "$logs/$name.stacks" ] || rm -f "$logs/$name.stacks"
    end=$(date +%s.%N)
    passed=$(grep -o '[0-9]* passed' "$logs/$name.log" | awk '{s+=$1} END {print s+0}')
    failed=$(grep -o '[0-9]* failed' "$logs/$name.log" | awk '{s+=$1} END {print s+0}')
    notrun=$(grep -c '^NOT RUN' "$logs/$name.log")
    printf '{"step":"%s","rc":%d,"seconds":%.2f,"passed":%d,"failed":%d,"not_run":%d}\n' \
        "$name" "$rc" "$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')" "$passed" "$failed" "$notrun" >> "$report"
}
# hal-ucx's UCX: the one the folder carries, which has CUDA support.
if [ -f "$here/ucx.tar.gz" ]; then
    ucx_dir="$(mktemp -d "${TMPDIR:-/tmp}/gpu-smoke-ucx.XXXXXX")"
    tar -xzf "$here/ucx.tar.gz" -C "$ucx_dir"
    export HAL_UCX_LIBRARY="$ucx_dir/libucx/lib/libucp.so.0"
fi
step devices "$here/bin/halctl" devices --json
# The driver the backend loads, by path and version: the summary names it,
# and a run without it fails.
for t in "$here"/tests/conformance-*; do
    [ -f "$t" ] && step driver "$t" --exact the_driver_in_use_is_named --nocapture
    break
done
# Which driver calls wait for a gated stream (a few seconds), then the
# conformance suites: they are what the run is for.
for t in "$here"/tests/driver_waits-* "$here"/tests/conformance-* "$here"/tests/uvm_conformance-*; do
    [ -f "$t" ] && step "test-$(basename "$t")" "$t" --test-threads=4
done
for t in "$here"/tests/*; do
    case "$(basename "$t")" in driver_waits-* | conformance-* | uvm_conformance-*) continue ;; esac
    [ -f "$t" ] && step "test-$(basename "$t")" "$t" --test-threads=4
done
for e in "$here"/examples/*; do
    [ -f "$e" ] || continue
    step "example-$(basename "$e")" "$e"
done
# The Python package: the wheel installed offline into a folder of its own,
# then its GPU scripts (PyTorch and CuPy where the machine has them; a part
# that cannot run says NOT RUN).
if compgen -G "$here/python/*.whl" > /dev/null; then
    py="${HAL_SMOKE_PYTHON:-python3}"
    site="$(mktemp -d "${TMPDIR:-/tmp}/gpu-smoke-python.XXXXXX")"
    step python-install "$py" -m pip install --no-deps --no-index --target "$site" "$here"/python/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    for s in "$here"/python/*.py; do
        [ -f "$s" ] || continue
        name="python-$(basename "$s" .py)"
        # The benchmark's log goes to bench.txt with the others.
        [ "$name" = python-bench ] && name=bench-python
        step "$name" "$py" "$s"
    done
fi
step demo-cpu-shm "$here/bin/halctl" demo --json
step demo-cuda "$here/bin/halctl" demo --backend cuda --json
step demo-cuda-uvm "$here/bin/halctl" demo --backend cuda-uvm --json
# The CUDA scenarios and the host notify ones, each against its baseline of
# the same run.
step bench-cuda "$here/bin/halctl" bench --backend cuda --quick --json
# The host scenarios on this machine's cores: the importer-scaling figure
# (32 importer processes against one) where there are 16 of them.
step bench-cpu-shm "$here/bin/halctl" bench --json --only export,import,scaling
finish
exit "$status"
"#;

pub(crate) fn gpu_smoke(root: &Path, cargo: &str, rehearse: bool) -> ExitCode {
    // The folder this command makes, where hal-cuda/README.md says (the workspace's
    // target/); what cargo built is read from `crate::target_dir`.
    let dir = root.join("target").join("gpu-smoke");
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["bin", "tests", "examples"] {
        if let Err(e) = std::fs::create_dir_all(dir.join(sub)) {
            eprintln!("xtask gpu-smoke: {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    }
    let mut copied: Vec<(PathBuf, PathBuf)> = Vec::new();
    let steps: [(&[&str], &str); 4] = [
        (
            &[
                "build",
                "--release",
                "-p",
                "halctl",
                "--message-format=json",
            ],
            "bin",
        ),
        (
            &[
                "test",
                "--release",
                "-p",
                "hal-cuda",
                "-p",
                "hal-cuda-uvm",
                "-p",
                "hal-ucx",
                "--no-run",
                "--message-format=json",
            ],
            "tests",
        ),
        (
            &[
                "build",
                "--release",
                "-p",
                "hal-ipc",
                "--examples",
                "--features",
                "cuda-uvm,mock",
                "--message-format=json",
            ],
            "examples",
        ),
        (
            &[
                "build",
                "--release",
                "-p",
                "hal-cuda-uvm",
                "--examples",
                "--message-format=json",
            ],
            "examples",
        ),
    ];
    for (args, sub) in steps {
        println!("\n$ cargo {}", args.join(" "));
        let out = match Command::new(cargo)
            .args(args)
            .current_dir(root)
            .stderr(Stdio::inherit())
            .output()
        {
            Ok(o) => o,
            Err(e) => {
                eprintln!("xtask gpu-smoke: could not run cargo: {e}");
                return ExitCode::FAILURE;
            }
        };
        if !out.status.success() {
            eprintln!("xtask gpu-smoke: `cargo {}` failed", args.join(" "));
            return ExitCode::FAILURE;
        }
        for exe in executables(&String::from_utf8_lossy(&out.stdout)) {
            let name = exe.file_name().map(|n| n.to_owned()).unwrap_or_default();
            // Of hal-cuda's tests, those that run on whatever driver there
            // is; the others load the stand-in driver, which a GPU machine
            // does not need.
            let n = name.to_string_lossy();
            if sub == "tests" && !RUN_ON_THE_DRIVER.iter().any(|t| n.starts_with(t)) {
                continue;
            }
            copied.push((exe, dir.join(sub).join(name)));
        }
    }
    for (from, to) in &copied {
        if let Err(e) = std::fs::copy(from, to) {
            eprintln!("xtask gpu-smoke: copying {}: {e}", from.display());
            return ExitCode::FAILURE;
        }
        // Debug information stays here; the machine that runs them needs none.
        let _ = Command::new("strip").arg(to).status();
    }
    match ucx_archive(&dir.join("ucx.tar.gz")) {
        Ok(files) => copied.extend(files.into_iter().map(|f| (f.clone(), f))),
        Err(e) => {
            eprintln!("xtask gpu-smoke: {e}");
            return ExitCode::FAILURE;
        }
    }
    match python_folder(root, &dir.join("python")) {
        Ok(files) => copied.extend(files.into_iter().map(|f| (f.clone(), f))),
        Err(e) => {
            eprintln!("xtask gpu-smoke: {e}");
            return ExitCode::FAILURE;
        }
    }
    let script = dir.join("run.sh");
    if let Err(e) = std::fs::write(&script, RUN_SH) {
        eprintln!("xtask gpu-smoke: {}: {e}", script.display());
        return ExitCode::FAILURE;
    }
    let _ = Command::new("chmod").arg("+x").arg(&script).status();
    let size: u64 = copied
        .iter()
        .filter_map(|(_, to)| std::fs::metadata(to).ok())
        .map(|m| m.len())
        .sum();
    println!(
        "\ngpu-smoke: {} files, {:.1} MiB in {}; run `{}/run.sh OUT` on the GPU machine",
        copied.len() + 1,
        size as f64 / f64::from(1 << 20),
        dir.display(),
        dir.display()
    );
    if size > BUDGET {
        eprintln!(
            "xtask gpu-smoke: {size} bytes, over the {BUDGET}-byte budget of a run; strip failed?"
        );
        return ExitCode::FAILURE;
    }
    if rehearse {
        return rehearsal(root, cargo, &script);
    }
    ExitCode::SUCCESS
}

/// The UCX with CUDA support the folder carries (`ucx.tar.gz`): PyPI's
/// wheel of it, the one RAPIDS builds (`libucx-cu13`, pinned), of which
/// only the libraries hal-ucx loads and the modules they load are kept. A
/// GPU machine has no network to install it from.
const UCX_WHEEL: &str = "libucx-cu13==1.22.0";

/// What of the wheel is kept: UCX's libraries, its CUDA and CMA modules
/// (UCX finds them in `lib/ucx/` beside `libucs.so.0`), and the libraries
/// they were linked with (`libucx_cu13.libs/`, the wheel's own CUDA runtime).
const UCX_KEEP: &str = r"^(libucx/lib/(libuc[mpst]|libucs_signal)\.so\.0|libucx/lib/ucx/lib(ucm_cuda|uct_cuda|uct_cma)\.so\.0|libucx_cu13\.libs/[^/]+\.so[.0-9]*)$";

/// The pip that downloads the wheel: the one beside `MATURIN` when it
/// names a path (a virtual environment's), else `python3 -m pip`.
fn pip() -> Command {
    if let Some(dir) = std::env::var_os("MATURIN")
        .map(PathBuf::from)
        .and_then(|m| m.parent().map(Path::to_path_buf))
        .filter(|d| d.join("pip").is_file())
    {
        return Command::new(dir.join("pip"));
    }
    let mut c = Command::new("python3");
    c.args(["-m", "pip"]);
    c
}

/// Download [`UCX_WHEEL`], unpack what [`UCX_KEEP`] keeps, and pack it
/// again as `archive` (a gzipped tar: a third of the libraries' size,
/// which the folder's budget needs); `run.sh` unpacks it. The file made.
fn ucx_archive(archive: &Path) -> Result<Vec<PathBuf>, String> {
    let work = archive.with_extension("work");
    let (download, tree) = (work.join("download"), work.join("tree"));
    let _ = std::fs::remove_dir_all(&work);
    for d in [&download, &tree] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let made = ucx_unpacked(&download, &tree).and_then(|()| {
        println!("\n$ tar -czf {} -C {} .", archive.display(), tree.display());
        let status = Command::new("tar")
            .arg("-czf")
            .arg(archive)
            .arg("-C")
            .arg(&tree)
            .arg(".")
            .status()
            .map_err(|e| format!("could not run tar ({e})"))?;
        if status.success() {
            Ok(vec![archive.to_path_buf()])
        } else {
            Err(format!("tar could not pack {}", tree.display()))
        }
    });
    let _ = std::fs::remove_dir_all(&work);
    made
}

/// Download [`UCX_WHEEL`] into `download` and unpack what [`UCX_KEEP`]
/// keeps into `tree`.
fn ucx_unpacked(download: &Path, tree: &Path) -> Result<(), String> {
    println!("\n$ pip download --no-deps --only-binary :all: {UCX_WHEEL}");
    let status = pip()
        .args([
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-d",
        ])
        .arg(download)
        .arg(UCX_WHEEL)
        .status()
        .map_err(|e| {
            format!("could not run pip ({e}): install it, or name maturin's with MATURIN")
        })?;
    if !status.success() {
        return Err(format!(
            "pip could not download {UCX_WHEEL} (PyPI must be reachable)"
        ));
    }
    // The wheel is a zip file: Python's zipfile unpacks the kept members.
    let unpack = "import re, sys, zipfile, glob, os\n\
         keep = re.compile(sys.argv[3])\n\
         [wheel] = glob.glob(os.path.join(sys.argv[1], '*.whl'))\n\
         z = zipfile.ZipFile(wheel)\n\
         for m in z.infolist():\n\
         \x20   if keep.match(m.filename):\n\
         \x20       z.extract(m, sys.argv[2])\n\
         \x20       os.chmod(os.path.join(sys.argv[2], m.filename), 0o755)\n\
         \x20       print(m.filename)\n";
    let out = Command::new("python3")
        .args(["-c", unpack])
        .arg(download)
        .arg(tree)
        .arg(UCX_KEEP)
        .output()
        .map_err(|e| format!("could not run python3 ({e})"))?;
    if !out.status.success() {
        return Err(format!(
            "unpacking {UCX_WHEEL}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    if !String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == "libucx/lib/libucp.so.0")
    {
        return Err(format!("{UCX_WHEEL} has no libucx/lib/libucp.so.0"));
    }
    Ok(())
}

/// The maturin that builds the wheel: `MATURIN`, else the one on `PATH`.
fn maturin() -> String {
    std::env::var("MATURIN").unwrap_or_else(|_| "maturin".into())
}

/// Build the Python package's abi3 wheel (release, stripped) into
/// `folder` and copy its GPU scripts (`hal-python/gpu/*.py`) there; the
/// files made.
fn python_folder(root: &Path, folder: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(folder).map_err(|e| format!("{}: {e}", folder.display()))?;
    let manifest = root.join("hal-python").join("Cargo.toml");
    let args = ["build", "--release", "--strip", "--quiet", "-m"];
    println!(
        "\n$ {} {} {} -o {}",
        maturin(),
        args.join(" "),
        manifest.display(),
        folder.display()
    );
    let status = Command::new(maturin())
        .args(args)
        .arg(&manifest)
        .arg("-o")
        .arg(folder)
        .current_dir(root)
        .status()
        .map_err(|e| {
            format!(
                "could not run `{}` ({e}): install it (`pip install maturin`) or name it with \
                 MATURIN",
                maturin()
            )
        })?;
    if !status.success() {
        return Err(format!("`{} build` of hal-python failed", maturin()));
    }
    let mut files = Vec::new();
    for (from, keep) in [
        (folder.to_path_buf(), "whl"),
        (root.join("hal-python").join("gpu"), "py"),
    ] {
        let entries = std::fs::read_dir(&from).map_err(|e| format!("{}: {e}", from.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|e| format!("{}: {e}", from.display()))?
                .path();
            if path.extension().is_some_and(|x| x == keep) {
                let to = folder.join(path.file_name().unwrap_or_default());
                if from != folder {
                    std::fs::copy(&path, &to)
                        .map_err(|e| format!("copying {}: {e}", path.display()))?;
                }
                files.push(to);
            }
        }
    }
    if !files
        .iter()
        .any(|f| f.extension().is_some_and(|x| x == "whl"))
    {
        return Err(format!("maturin left no wheel in {}", folder.display()));
    }
    files.sort();
    Ok(files)
}

/// Run `script` with the release stand-in as the driver and check its report.
fn rehearsal(root: &Path, cargo: &str, script: &Path) -> ExitCode {
    // Where the release build above put it (CARGO_TARGET_DIR included).
    let standin = crate::target_dir(root, cargo)
        .join("release")
        .join("deps")
        .join("libhal_mock_libcuda.so");
    if !standin.is_file() {
        eprintln!(
            "xtask gpu-smoke: the stand-in driver {} was not built",
            standin.display()
        );
        return ExitCode::FAILURE;
    }
    let out = root.join("target").join("gpu-smoke-rehearsal");
    let _ = std::fs::remove_dir_all(&out);
    println!(
        "\n$ HAL_CUDA_LIBRARY={} {} {}",
        standin.display(),
        script.display(),
        out.display()
    );
    let ran = Command::new(script)
        .arg(&out)
        .env("HAL_CUDA_LIBRARY", &standin)
        // As on the GPU machine, where a test that applies to the stand-in
        // alone says it did not run instead of failing: strict mode
        // (HAL_TESTS_STRICT, set by CI for the workspace's tests) asks
        // every test to run, which a driver run cannot.
        .env_remove("HAL_TESTS_STRICT")
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status();
    match ran {
        Ok(status) if status.success() => {}
        Ok(status) => {
            eprintln!("xtask gpu-smoke: {} ended with {status}", script.display());
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("xtask gpu-smoke: could not run {}: {e}", script.display());
            return ExitCode::FAILURE;
        }
    }
    if !out.join("summary.txt").is_file() {
        eprintln!("xtask gpu-smoke: the script wrote no summary.txt");
        return ExitCode::FAILURE;
    }
    let report = match std::fs::read_to_string(out.join("report.jsonl")) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("xtask gpu-smoke: no report in {}: {e}", out.display());
            return ExitCode::FAILURE;
        }
    };
    let bad = failed_steps(&report);
    for line in not_run_steps(&report) {
        println!(
            "gpu-smoke rehearsal: DID NOT RUN every check (no PyTorch, CuPy or GPU here): {line}"
        );
    }
    if bad.is_empty() {
        println!("gpu-smoke rehearsal: every step passed on the stand-in driver");
        ExitCode::SUCCESS
    } else {
        for line in &bad {
            eprintln!("xtask gpu-smoke: rehearsal step failed: {line}");
        }
        eprintln!("(logs in {})", out.display());
        ExitCode::FAILURE
    }
}

/// The report's lines whose step printed `NOT RUN` lines (checks that
/// could not run on this machine).
fn not_run_steps(report: &str) -> Vec<String> {
    report
        .lines()
        .filter(|l| l.contains("\"not_run\":") && !l.contains("\"not_run\":0"))
        .map(str::to_owned)
        .collect()
}

/// The report's lines whose step failed: a non-zero exit, a failed test,
/// or a test step that ran no test. An empty report fails as a whole.
fn failed_steps(report: &str) -> Vec<String> {
    let field = |line: &str, key: &str| -> Option<i64> {
        let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
        let rest = &line[at..];
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        rest[..end].trim().parse().ok()
    };
    let lines: Vec<&str> = report.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return vec!["the report has no steps".into()];
    }
    lines
        .into_iter()
        .filter(|l| {
            let test = l.contains("\"step\":\"test-");
            field(l, "rc") != Some(0)
                || field(l, "failed") != Some(0)
                || (test && field(l, "passed").is_none_or(|p| p == 0))
        })
        .map(str::to_owned)
        .collect()
}

/// The executables cargo's JSON messages name (`"executable":"/path"`),
/// build scripts excluded.
fn executables(messages: &str) -> Vec<PathBuf> {
    const KEY: &str = "\"executable\":\"";
    let mut found = Vec::new();
    for line in messages.lines() {
        if !line.contains("\"reason\":\"compiler-artifact\"") {
            continue;
        }
        if let Some(at) = line.find(KEY) {
            let rest = &line[at + KEY.len()..];
            if let Some(end) = rest.find('"') {
                let path = PathBuf::from(&rest[..end]);
                if !path.to_string_lossy().contains("/build/") {
                    found.push(path);
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[cfg(test)]
mod tests;
