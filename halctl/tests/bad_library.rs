//! `halctl devices` with an override variable naming a file that is not
//! the vendor's library: the line says which variable named it, why the
//! dynamic loader refused it (in its own words), and what to do, never
//! "install the driver".

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");

/// Each vendor backend: its name, override variable, entry point and what
/// a library with it is, and the remedy that would be wrong here.
const BACKENDS: [(&str, &str, &str, &str, &str); 2] = [
    (
        "cuda",
        "HAL_CUDA_LIBRARY",
        "cuInit",
        "a CUDA driver",
        "install the NVIDIA driver",
    ),
    (
        "ascend",
        "HAL_ASCEND_LIBRARY",
        "aclInit",
        "an ACL runtime",
        "install CANN",
    ),
];

/// `halctl devices --backend NAME` with `var` set to `library`: its line.
fn devices(backend: &str, var: &str, library: &Path) -> String {
    let out = Command::new(BIN)
        .args(["devices", "--backend", backend])
        .env(var, library)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn devices_names_the_variable_and_the_loaders_reason_for_a_bad_library() {
    let dir = tempfile::tempdir().unwrap();
    let bad = hal_mock::bad_library::make(dir.path()).unwrap();
    for (backend, var, signature, kind, remedy) in BACKENDS {
        let mut cases: Vec<(&Path, String)> = bad
            .iter()
            .map(|b| (b.path.as_path(), b.says.to_string()))
            .collect();
        // A real library that loads, but is not the vendor's.
        let libc = Path::new("libc.so.6");
        cases.push((libc, format!("it has no {signature}, so it is not {kind}")));
        for (library, says) in cases {
            let out = devices(backend, var, library);
            let line = out.lines().next().unwrap_or_default();
            assert!(line.contains(": unavailable: "), "{out}");
            assert!(line.contains(&format!("that {var} names")), "{out}");
            assert!(line.contains(&library.display().to_string()), "{out}");
            assert!(line.contains(&says), "{out}");
            assert!(line.contains("unset it to search"), "{out}");
            assert!(!line.contains(remedy), "{out}");
            assert!(!line.contains("dlopen failed"), "{out}");
        }
    }
}
