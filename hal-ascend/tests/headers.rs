//! Every runtime name this backend and its stand-in use is one the public
//! CANN runtime headers declare (`include/acl_names.txt`, taken from
//! `include/external/acl/*.h`): a name the runtime does not have fails
//! here, before any NPU is asked. (Signatures: `sys.rs` resolves each entry
//! point with the type generated from its declaration in
//! `include/acl_subset.h`, and `cargo xtask bindgen --check` holds that
//! header's functions to the same list.)

mod common;

use std::collections::BTreeSet;

/// The names the public headers declare.
fn declared() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/include/acl_names.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let names: BTreeSet<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    assert!(names.len() > 400, "{path} lists {} names", names.len());
    names
}

/// `names` that the headers do not declare.
fn undeclared<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let known = declared();
    names.into_iter().filter(|n| !known.contains(*n)).collect()
}

/// The stand-in's own symbol, which no runtime has: its call counter.
const STANDIN_OWN: &str = "halStandinCalls";

#[test]
fn every_entry_point_the_backend_resolves_is_declared_by_the_headers() {
    assert_eq!(
        undeclared(hal_ascend::RESOLVED.iter().copied()),
        Vec::<&str>::new()
    );
    assert!(hal_ascend::RESOLVED.contains(&"aclrtDeviceGetUuid"));
}

#[test]
fn every_entry_point_named_in_hal_core_is_declared_by_the_headers() {
    let all = hal_core::kit::vendor::acl::entry::ALL.iter().copied();
    assert_eq!(undeclared(all), Vec::<&str>::new());
}

#[test]
fn the_standin_exports_only_names_the_headers_declare() {
    let exported = hal_mock_libascendcl::EXPORTED
        .iter()
        .copied()
        .filter(|n| *n != STANDIN_OWN);
    assert_eq!(undeclared(exported), Vec::<&str>::new());
}

#[test]
fn a_name_the_headers_do_not_declare_is_caught() {
    assert_eq!(
        undeclared(["aclrtGetDeviceUuid", "aclrtDeviceGetUuid"]),
        vec!["aclrtGetDeviceUuid"]
    );
}

/// The stand-in's dynamic symbol table: every `acl*` symbol it defines is
/// one of `EXPORTED`, and every one of `EXPORTED` is defined.
#[test]
fn the_standin_library_defines_exactly_its_table() {
    let lib = common::standin();
    let out = match std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
    {
        Ok(o) if o.status.success() => o,
        Ok(o) => panic!(
            "nm -D {}: {}",
            lib.display(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => return hal_core::testing::not_run(&format!("nm (binutils) cannot run: {e}")),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let defined: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("acl") || *s == STANDIN_OWN)
        .collect();
    let table: BTreeSet<&str> = hal_mock_libascendcl::EXPORTED.iter().copied().collect();
    assert_eq!(defined, table, "{}", lib.display());
}
