//! The C ABI as C and C++ programs use it: the examples and the C tests of
//! `tests/c/` compiled with the system's `cc` and `c++` (warnings are
//! errors) against the built `libhal_ipc.so` and `include/hal.h`, and run as
//! real processes on CPU shared memory, the simulator, and hal-cuda over
//! the stand-in `libcuda.so.1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The crate's folder.
fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The folder of the built `libhal_ipc.so`: the test binary's profile folder
/// (`target/debug/deps/..` -> `target/debug`). Cargo does not build a
/// library that has no Rust crate type for the crate's own tests, so the
/// first test to ask builds it (`cargo build -p hal-ffi`, a no-op when it
/// is fresh).
fn built_lib_dir() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_library).clone()
}

fn build_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lies in target/PROFILE/deps")
        .to_path_buf();
    let target = dir.parent().expect("the target folder");
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "--quiet", "-p", "hal-ffi", "--lib"])
        .env("CARGO_TARGET_DIR", target)
        .current_dir(crate_dir());
    if dir.file_name().is_some_and(|n| n == "release") {
        cargo.arg("--release");
    }
    let status = cargo.status().expect("run cargo to build libhal_ipc.so");
    assert!(status.success(), "cargo build -p hal-ffi failed");
    assert!(
        dir.join("libhal_ipc.so").is_file(),
        "{} has no libhal_ipc.so: cargo builds it with the crate's tests",
        dir.display()
    );
    dir
}

/// A temporary folder with the library under its soname and the programs
/// built against it.
struct Build {
    dir: tempfile::TempDir,
}

impl Build {
    fn new() -> Build {
        let dir = tempfile::Builder::new()
            .prefix("hal-ffi-c-")
            .tempdir()
            .expect("a temporary folder");
        let lib = built_lib_dir().join("libhal_ipc.so");
        for name in ["libhal_ipc.so", "libhal_ipc.so.1"] {
            std::os::unix::fs::symlink(&lib, dir.path().join(name)).expect("link the library");
        }
        Build { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Compile `source` (C11, or C++17 for `.cpp`) into the program `name`.
    fn compile(&self, source: &Path, name: &str) -> PathBuf {
        let cpp = source.extension().is_some_and(|e| e == "cpp");
        let (compiler, std) = if cpp {
            ("c++", "-std=c++17")
        } else {
            ("cc", "-std=c11")
        };
        let out = self.path(name);
        let include = crate_dir().join("../include");
        let status = Command::new(compiler)
            .args([std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-g"])
            .arg(format!("-I{}", include.display()))
            .arg(source)
            .arg("-o")
            .arg(&out)
            .arg(format!("-L{}", self.dir.path().display()))
            .arg("-lhal_ipc")
            .arg(format!("-Wl,-rpath,{}", self.dir.path().display()))
            .status()
            .unwrap_or_else(|e| panic!("running {compiler} (install a C and C++ compiler): {e}"));
        assert!(
            status.success(),
            "{compiler} failed on {}",
            source.display()
        );
        out
    }

    fn example(&self, name: &str) -> PathBuf {
        let ext = if name.ends_with("_cpp") { "cpp" } else { "c" };
        let file = name.trim_end_matches("_cpp");
        self.compile(&crate_dir().join(format!("examples/{file}.{ext}")), name)
    }

    fn test_program(&self, name: &str) -> PathBuf {
        self.compile(&crate_dir().join(format!("tests/c/{name}.c")), name)
    }
}

/// The environment a backend needs: the stand-in driver for the CUDA ones,
/// the stand-in runtime for Ascend.
fn backend_env(backend: &str) -> Vec<(&'static str, PathBuf)> {
    if backend.starts_with("cuda") {
        vec![("HAL_CUDA_LIBRARY", hal_mock_libcuda::built_library())]
    } else if backend == "ascend" {
        vec![("HAL_ASCEND_LIBRARY", hal_mock_libascendcl::built_library())]
    } else {
        Vec::new()
    }
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run the program");
    eprintln!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The producer (C, or C++ with `cpp`) and the C consumer, two processes.
fn share(backend: &str, cpp: bool) {
    let build = Build::new();
    build.example("consumer");
    let producer = build.example(if cpp { "producer_cpp" } else { "producer" });
    let out = run(Command::new(producer)
        .args([backend, "200"])
        .envs(backend_env(backend)));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the producer failed on {backend}");
    assert!(
        stdout.contains(&format!("backend {backend}"))
            && stdout.contains("1048576 bytes verified, a 16x64 float32 tensor")
            && stdout.contains("200 pings answered")
            && stdout.contains("200 round trips; the consumer verified the buffer and the tensor"),
        "the producer did not report every check on {backend}"
    );
}

#[test]
fn two_processes_share_on_cpu_shm() {
    share("cpu-shm", false);
}

#[test]
fn two_processes_share_on_mock_cuda() {
    share("mock-cuda", false);
}

#[test]
fn two_processes_share_on_mock_ascend() {
    share("mock-ascend", false);
}

#[test]
fn two_processes_share_on_cuda_over_the_standin_driver() {
    share("cuda", false);
}

#[test]
fn two_processes_share_on_cuda_uvm_over_the_standin_driver() {
    share("cuda-uvm", false);
}

#[test]
fn two_processes_share_on_ascend_over_the_standin_runtime() {
    share("ascend", false);
}

/// A backend of another crate, registered at run time under its own name
/// (the template, which the library links with its `template` feature),
/// opened by that name from C: `hal_device_open("template", 0, ...)`.
#[test]
fn two_processes_share_on_the_template_backend_opened_by_name() {
    share("template", false);
}

#[test]
fn the_cpp_producer_shares_with_the_c_consumer() {
    share("cpu-shm", true);
    share("mock-ascend", true);
}

/// The refusals program on `backend`: every check passes, and there are
/// at least `at_least` of them (a program that checked nothing fails).
fn refusals(backend: &str, at_least: usize) {
    let build = Build::new();
    let program = build.test_program("refusals");
    let out = run(Command::new(program)
        .arg(backend)
        .envs(backend_env(backend)));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "a refusal check failed on {backend}");
    let last = stdout.lines().last().unwrap_or_default();
    let passed: usize = last
        .strip_suffix(" passed, 0 failed")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of checks on {backend}: {last:?}"));
    assert!(
        passed >= at_least,
        "{passed} checks on {backend}, expected at least {at_least}"
    );
}

#[test]
fn refusals_on_cpu_shm() {
    refusals("cpu-shm", 65);
}

#[test]
fn refusals_on_mock_cuda() {
    refusals("mock-cuda", 50);
}

#[test]
fn refusals_on_mock_ascend() {
    refusals("mock-ascend", 40);
}

#[test]
fn refusals_on_cuda_over_the_standin_driver() {
    refusals("cuda", 40);
}

/// The threads program on `backend`: eight threads at once through every
/// step of a round, their own slices of one buffer, their own last errors,
/// and racing releases of one object (one succeeds, one is a double
/// release).
fn threads(backend: &str) {
    let build = Build::new();
    let program = build.test_program("threads");
    let out = run(Command::new(program)
        .arg(backend)
        .envs(backend_env(backend)));
    assert!(
        out.status.success(),
        "the threads program failed on {backend}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let passed: usize = stdout
        .lines()
        .last()
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of checks on {backend}: {stdout:?}"));
    // 8 threads x (50 rounds x 9 + 1 write + 50 x 5 + 1 read + 4096 bytes) + 100 races.
    assert!(
        passed >= 8 * (50 * 9 + 50 * 5 + 2 + 4096) + 100,
        "{passed} checks on {backend}"
    );
}

#[test]
fn many_threads_at_once_on_cpu_shm() {
    threads("cpu-shm");
}

#[test]
fn many_threads_at_once_on_cuda_over_the_standin_driver() {
    threads("cuda");
}

/// The channels program on `backend`: a group of two processes gathers
/// and broadcasts, a channel carries 50 samples through 2 slots from one
/// to the other, and the refusals answer their statuses.
fn channels(backend: &str) {
    let (passed, _) = checks_passed("channels", backend);
    // Both processes' group checks, the child's 50 receives, the parent's
    // 50 publishes, and the refusals.
    assert!(passed >= 2 * 50 + 20, "{passed} checks on {backend}");
}

/// Run the C test program `name` on `backend`, require that it succeeded
/// and ended with "N checks passed, 0 failed": N, and its output.
fn checks_passed(name: &str, backend: &str) -> (usize, String) {
    let build = Build::new();
    let program = build.test_program(name);
    let out = run(Command::new(program)
        .arg(backend)
        .envs(backend_env(backend)));
    assert!(out.status.success(), "a {name} check failed on {backend}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let passed: usize = stdout
        .lines()
        .last()
        .and_then(|l| l.strip_suffix(" checks passed, 0 failed"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of {name} checks on {backend}: {stdout:?}"));
    (passed, stdout)
}

#[test]
fn a_group_and_a_channel_between_two_processes_on_cpu_shm() {
    channels("cpu-shm");
}

#[test]
fn a_group_and_a_channel_between_two_processes_on_mock_cuda() {
    channels("mock-cuda");
}

/// The remote program over UCX's `transports` (`UCX_TLS`; None: UCX's
/// defaults): two processes, one exporting memory and a notify from its
/// node, the other connecting from its own. Where UCX cannot be loaded
/// the test says it did not run.
fn remote(transports: Option<&str>) {
    let build = Build::new();
    let program = build.test_program("remote");
    let mut cmd = Command::new(program);
    match transports {
        Some(t) => cmd.env("UCX_TLS", t),
        None => cmd.env_remove("UCX_TLS"),
    };
    let out = run(&mut cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.code() == Some(2) && stdout.starts_with("UCX unavailable") {
        hal_core::testing::not_run(stdout.trim());
        return;
    }
    assert!(out.status.success(), "a remote check failed: {stdout}");
    let passed: usize = stdout
        .lines()
        .last()
        .and_then(|l| l.strip_suffix(" checks passed, 0 failed"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of remote checks: {stdout:?}"));
    // The parent's own checks (the child's are its exit status).
    assert!(passed >= 30, "{passed} checks");
}

#[test]
fn memory_and_a_notify_between_two_processes_over_ucx_tcp() {
    remote(Some("tcp"));
}

#[test]
fn memory_and_a_notify_between_two_processes_over_ucx_defaults() {
    remote(None);
}

/// The remote_group program over UCX's TCP transport on the loopback: a
/// group across hosts of four processes (three forked members and the
/// parent) at one port, swapping export handles in an all-gather and
/// reading each other's memory through them, a broadcast and barriers, a
/// forked child of each member refused the rounds, and an intruder refused
/// for its secret. Where UCX cannot be loaded the
/// test says it did not run.
#[test]
fn a_group_of_four_processes_across_hosts_over_ucx_tcp() {
    let build = Build::new();
    let program = build.test_program("remote_group");
    // A port of the loopback that was free a moment ago: the group's.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let out = run(Command::new(program)
        .arg(port.to_string())
        .env("UCX_TLS", "tcp")
        .env_remove("HAL_GROUP_SECRET"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.code() == Some(2) && stdout.contains("UCX unavailable") {
        hal_core::testing::not_run(stdout.trim());
        return;
    }
    assert!(
        out.status.success(),
        "a remote group check failed: {stdout}"
    );
    // Each member's and the intruder's own counts, then the parent's.
    let counts: Vec<(String, usize)> = stdout
        .lines()
        .filter_map(|l| {
            let (who, rest) = l.rsplit_once(": ").unwrap_or(("parent", l));
            let n = rest
                .strip_suffix(" checks passed, 0 failed")?
                .parse()
                .ok()?;
            Some((who.to_string(), n))
        })
        .collect();
    let mut members: Vec<&str> = counts
        .iter()
        .filter(|(who, n)| who.starts_with("member ") && *n >= 30)
        .map(|(who, _)| who.as_str())
        .collect();
    members.sort();
    assert_eq!(
        members,
        ["member 0", "member 1", "member 2", "member 3"],
        "{stdout}"
    );
    assert!(
        counts.iter().any(|(who, n)| who == "intruder" && *n >= 9),
        "{stdout}"
    );
    assert!(
        counts
            .last()
            .is_some_and(|(who, n)| who == "parent" && *n >= 4),
        "{stdout}"
    );
}

/// The remote_channel program over UCX's TCP transport on the loopback: a
/// channel offered from the publishing parent's node, two subscriber
/// processes connecting with the offer's text from nodes of their own and
/// receiving every sample in place (every byte checked), texts with
/// another secret or a changed character refused, and the offer's
/// withdrawal seen. Where UCX cannot be loaded the test says it did not
/// run.
#[test]
fn a_channel_with_two_subscribers_on_other_nodes_over_ucx_tcp() {
    let build = Build::new();
    let program = build.test_program("remote_channel");
    let out = run(Command::new(program).env("UCX_TLS", "tcp"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.code() == Some(2) && stdout.contains("UCX unavailable") {
        hal_core::testing::not_run(stdout.trim());
        return;
    }
    assert!(
        out.status.success(),
        "a remote channel check failed: {stdout}"
    );
    let count = |who: &str| -> Option<usize> {
        stdout.lines().find_map(|l| {
            let rest = l.strip_prefix(who)?.strip_prefix(": ")?;
            rest.strip_suffix(" checks passed, 0 failed")?.parse().ok()
        })
    };
    // 64 samples of 6 checks each, and the refusals, in each subscriber.
    for who in ["subscriber 0", "subscriber 1"] {
        assert!(
            count(who).is_some_and(|n| n >= 64 * 6 + 10),
            "{who}: {stdout}"
        );
    }
    let parent = stdout
        .lines()
        .last()
        .and_then(|l| l.strip_suffix(" checks passed, 0 failed"))
        .and_then(|n| n.parse::<usize>().ok());
    assert!(parent.is_some_and(|n| n >= 64 * 2 + 10), "{stdout}");
}

/// The channel_views program on `backend`: 40 samples filled and read in
/// place between two processes (through their addresses where the memory
/// is host-visible), and the refusals and lifetimes of loans and samples.
fn channel_views(backend: &str, host_visible: bool) {
    let (passed, stdout) = checks_passed("channel_views", backend);
    assert!(passed >= 40 * 6 + 20, "{passed} checks on {backend}");
    let in_place = if host_visible { 40 } else { 0 };
    for who in ["parent filled", "child read"] {
        let line = format!("{who} {in_place} ");
        assert!(stdout.contains(&line), "`{line}` on {backend}: {stdout}");
    }
}

#[test]
fn samples_filled_and_read_in_place_between_two_processes_on_cpu_shm() {
    channel_views("cpu-shm", true);
}

#[test]
fn samples_written_and_read_on_device_memory_between_two_processes_on_mock_cuda() {
    channel_views("mock-cuda", false);
}

/// The adopt program on `backend`: a range inside an allocation adopted by
/// its device address, exported, written by a child process into the
/// original allocation; refusals; or, where the backend cannot adopt,
/// `HAL_ERR_UNSUPPORTED`.
fn adopt(backend: &str, adopts: bool) -> usize {
    let (passed, stdout) = checks_passed("adopt", backend);
    assert_eq!(
        !stdout.contains("unsupported on"),
        adopts,
        "adopted on {backend}? {stdout}"
    );
    passed
}

#[test]
fn memory_of_another_library_is_adopted_and_shared_on_mock_cuda() {
    let passed = adopt("mock-cuda", true);
    assert!(passed >= 20, "{passed} checks");
}

#[test]
fn memory_of_another_library_is_adopted_and_shared_on_cuda_over_the_standin_driver() {
    let passed = adopt("cuda", true);
    assert!(passed >= 20, "{passed} checks");
}

#[test]
fn a_backend_that_cannot_adopt_says_so() {
    adopt("cpu-shm", false);
}

/// A thousand rounds of open, allocate, export, import, tensors, notifies
/// and release under valgrind: no block lost, no invalid access.
///
/// Only definitely and indirectly lost blocks count as errors: the blocks
/// valgrind calls "possibly lost" are the hash tables the library keeps
/// for the process (hashbrown points into the middle of its allocation)
/// and the stacks of the descriptor broker's threads, a fixed amount
/// whatever the number of rounds.
#[test]
fn a_thousand_rounds_under_valgrind_lose_nothing() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        hal_core::testing::not_run("valgrind is not installed (apt-get install valgrind)");
        return;
    }
    let build = Build::new();
    let program = build.test_program("rounds");
    for (backend, rounds) in [("cpu-shm", "1000"), ("mock-cuda", "200")] {
        let out = run(Command::new("valgrind")
            .args([
                "--leak-check=full",
                "--errors-for-leak-kinds=definite,indirect",
                "--error-exitcode=1",
            ])
            .arg(&program)
            .args([backend, rounds]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "valgrind found errors on {backend}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&format!("{rounds} rounds on {backend}")),
            "the rounds did not all run on {backend}"
        );
        assert!(
            stderr.contains("definitely lost: 0 bytes") || stderr.contains("no leaks are possible"),
            "valgrind's summary on {backend} is not clean"
        );
    }
}

/// The header compiles alone as C11 and as C++17 with every warning an
/// error, and a program that names every function links and runs.
#[test]
fn the_header_compiles_as_c11_and_cpp17() {
    let build = Build::new();
    let functions = header_functions();
    let mut body = String::from("#include <hal.h>\n#include <stdio.h>\nint main(void) {\n");
    for f in &functions {
        body.push_str(&format!(
            "    printf(\"%p\\n\", (void *)(uintptr_t)&{f});\n"
        ));
    }
    body.push_str("    return hal_abi_version() / 1000 == HAL_ABI_VERSION / 1000 ? 0 : 1;\n}\n");
    for ext in ["c", "cpp"] {
        let source = build.path(&format!("every_function.{ext}"));
        std::fs::write(&source, &body).expect("write the program");
        let program = build.compile(&source, &format!("every_function_{ext}"));
        let out = run(&mut Command::new(program));
        assert!(out.status.success(), "the {ext} program failed");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).lines().count(),
            functions.len()
        );
    }
}

/// The functions `include/hal.h` declares.
fn header_functions() -> Vec<String> {
    let header =
        std::fs::read_to_string(crate_dir().join("../include/hal.h")).expect("read include/hal.h");
    let mut names = Vec::new();
    let mut depth = 0usize;
    for line in header.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('*')
            || trimmed.starts_with("/*")
            || trimmed.starts_with('#')
            || trimmed.contains("extern \"C\"")
        {
            continue;
        }
        // Declarations at file scope only: not the DLPack deleter fields.
        if depth == 0 {
            if let Some(open) = line.find('(') {
                let head = &line[..open];
                if let Some(name) = head.split_whitespace().last() {
                    let name = name.trim_start_matches('*');
                    if name.starts_with("hal_") {
                        names.push(name.to_string());
                    }
                }
            }
        }
        depth += line.matches('{').count();
        depth = depth.saturating_sub(line.matches('}').count());
    }
    names.sort();
    names
}

/// The `pub extern "C"` functions of the crate's sources.
fn source_functions() -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(crate_dir().join("src")).expect("read src/") {
        let path = entry.expect("a file of src/").path();
        let text = std::fs::read_to_string(&path).expect("read a source file");
        for line in text.lines() {
            let line = line.trim_start();
            let rest = line
                .strip_prefix("pub extern \"C\" fn ")
                .or_else(|| line.strip_prefix("pub unsafe extern \"C\" fn "));
            if let Some(rest) = rest {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                names.push(name);
            }
        }
    }
    names.sort();
    names
}

/// The `hal_` functions `libhal_ipc.so` exports (`nm -D --defined-only`).
fn library_functions() -> Vec<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(built_lib_dir().join("libhal_ipc.so"))
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm failed");
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let (_, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
            (kind == "T" && name.starts_with("hal_")).then(|| name.to_string())
        })
        .collect();
    names.sort();
    names
}

#[test]
fn every_extern_function_is_in_the_header_and_exported() {
    let source = source_functions();
    let header = header_functions();
    let library = library_functions();
    assert!(
        source.len() >= 35,
        "only {} extern functions found in src/",
        source.len()
    );
    assert_eq!(source, header, "src/ and include/hal.h differ");
    assert_eq!(
        header, library,
        "include/hal.h and libhal_ipc.so's exports differ"
    );
}

/// `cargo xtask install-c` puts the library, the header and `hal-ipc.pc`
/// under a prefix; the examples build from that alone with pkg-config
/// (`#include <hal.h>` found through its `Cflags`), linked dynamically
/// (found at run time through the rpath hal-ipc.pc gives) and statically,
/// and share a buffer across two processes.
#[test]
fn installed_with_pkg_config_the_examples_build_and_run() {
    if Command::new("pkg-config")
        .arg("--version")
        .output()
        .is_err()
    {
        hal_core::testing::not_run("pkg-config is not installed (apt-get install pkg-config)");
        return;
    }
    let prefix = tempfile::Builder::new()
        .prefix("hal-ffi-prefix-")
        .tempdir()
        .expect("a temporary folder");
    // The same target folder and profile as this test, so nothing rebuilds.
    let lib_dir = built_lib_dir();
    let target = lib_dir.parent().expect("the target folder");
    let mut xtask = Command::new(env!("CARGO"));
    xtask
        .args([
            "run",
            "--quiet",
            "-p",
            "xtask",
            "--",
            "install-c",
            "--prefix",
        ])
        .arg(prefix.path())
        .env("CARGO_TARGET_DIR", target)
        .current_dir(crate_dir());
    if lib_dir.file_name().is_some_and(|n| n == "debug") {
        xtask.arg("--debug");
    }
    let out = run(&mut xtask);
    assert!(out.status.success(), "cargo xtask install-c failed");
    for file in [
        "lib/libhal_ipc.so.1",
        "lib/libhal_ipc.so",
        "lib/libhal_ipc.a",
        "include/hal-ipc/hal.h",
        "lib/pkgconfig/hal-ipc.pc",
    ] {
        assert!(prefix.path().join(file).exists(), "{file} is not installed");
    }
    let pc = prefix.path().join("lib/pkgconfig");
    let flags = |args: &[&str]| -> Vec<String> {
        let out = Command::new("pkg-config")
            .args(args)
            .arg("hal-ipc")
            .env("PKG_CONFIG_PATH", &pc)
            .output()
            .expect("run pkg-config");
        assert!(out.status.success(), "pkg-config {args:?} hal-ipc failed");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let dynamic = flags(&["--cflags", "--libs"]);
    let bin = prefix.path().join("bin");
    std::fs::create_dir_all(&bin).expect("a bin folder");
    let cc = |source: &str, out: &str, extra: &[String]| {
        let status = Command::new("cc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
            .arg(crate_dir().join("examples").join(source))
            .arg("-o")
            .arg(bin.join(out))
            .args(extra)
            .status()
            .expect("run cc");
        assert!(status.success(), "cc {source} with {extra:?} failed");
    };
    // hal-ipc.pc carries the rpath: the programs find libhal_ipc.so.1 under the
    // prefix with no LD_LIBRARY_PATH.
    let rpath = format!("-Wl,-rpath,{}", prefix.path().join("lib").display());
    assert!(
        dynamic.contains(&rpath),
        "pkg-config --libs hal-ipc gives {dynamic:?}, without {rpath}"
    );
    cc("producer.c", "producer", &dynamic);
    cc("consumer.c", "consumer", &dynamic);
    // The static library: libhal_ipc.a and what it needs from the system.
    let mut fully_static = flags(&["--cflags"]);
    fully_static.push(prefix.path().join("lib/libhal_ipc.a").display().to_string());
    fully_static.extend(
        flags(&["--static", "--libs"])
            .into_iter()
            .filter(|f| f != "-lhal_ipc" && !f.starts_with("-L")),
    );
    cc("producer.c", "producer_static", &fully_static);
    for producer in ["producer", "producer_static"] {
        let out = run(Command::new(bin.join(producer))
            .args(["cpu-shm", "10"])
            .env_remove("LD_LIBRARY_PATH"));
        assert!(out.status.success(), "the installed {producer} failed");
        assert!(String::from_utf8_lossy(&out.stdout).contains("the consumer verified"));
    }
}

/// hal-ffi/README.md, the C walk-through, shows the two-process example
/// word for word.
#[test]
fn the_readme_shows_the_example_word_for_word() {
    let readme =
        std::fs::read_to_string(crate_dir().join("README.md")).expect("read hal-ffi/README.md");
    for file in ["producer.c", "consumer.c"] {
        let text = std::fs::read_to_string(crate_dir().join("examples").join(file))
            .expect("read the example");
        assert!(
            readme.contains(&format!("```c\n{text}```")),
            "hal-ffi/README.md does not show examples/{file} as it is"
        );
    }
}
