//! Without a usable runtime the backend is unavailable and says why,
//! naming what it searched; a library without the entry points names the
//! missing symbol. Each case runs in a child process with its own
//! environment.

mod common;

use std::path::PathBuf;

use common::{role, ROLE};
use hal_ascend::AscendBackend;
use hal_core::{Availability, Backend, Error};

#[test]
fn library_not_found_names_the_paths_searched() {
    const ME: &str = "library_not_found_names_the_paths_searched";
    let path = "/nonexistent/hal-ascend-test/libascendcl.so";
    if role().as_deref() != Some(ME) {
        let out = common::child(ME, &[(ROLE, ME), (hal_ascend::LIBRARY_VAR, path)]);
        return common::assert_ok(&out, ME);
    }
    let b = AscendBackend::new();
    match b.availability() {
        Availability::Unavailable { reason, searched } => {
            assert_eq!(searched, vec![PathBuf::from(path)]);
            assert!(
                reason.contains(path) && reason.contains(hal_ascend::LIBRARY_VAR),
                "{reason}"
            );
        }
        Availability::Available => panic!("a missing library is available"),
    }
    match b.open(0) {
        Err(Error::Unavailable { searched, .. }) => assert_eq!(searched, vec![PathBuf::from(path)]),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn the_search_follows_the_cann_variables_then_the_install_directories() {
    const ME: &str = "the_search_follows_the_cann_variables_then_the_install_directories";
    if role().as_deref() != Some(ME) {
        let out = common::child(
            ME,
            &[
                (ROLE, ME),
                (hal_ascend::LIBRARY_VAR, ""),
                ("ASCEND_HOME_PATH", "/nonexistent/home"),
                ("ASCEND_TOOLKIT_HOME", "/nonexistent/toolkit"),
            ],
        );
        return common::assert_ok(&out, ME);
    }
    if let Availability::Unavailable { searched, .. } = AscendBackend::new().availability() {
        let want: Vec<PathBuf> = [
            "libascendcl.so",
            "/nonexistent/home/lib64/libascendcl.so",
            "/nonexistent/toolkit/lib64/libascendcl.so",
            "/usr/local/Ascend/cann/lib64/libascendcl.so",
            "/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(searched, want);
    }
}

#[test]
fn a_missing_symbol_is_unsupported_naming_it() {
    const ME: &str = "a_missing_symbol_is_unsupported_naming_it";
    // A library that loads and is not the runtime.
    let libc = "libc.so.6";
    if role().as_deref() != Some(ME) {
        let out = common::child(ME, &[(ROLE, ME), (hal_ascend::LIBRARY_VAR, libc)]);
        return common::assert_ok(&out, ME);
    }
    match AscendBackend::new().availability() {
        Availability::Unavailable { reason, searched } => {
            assert_eq!(searched, vec![PathBuf::from(libc)]);
            assert!(
                reason.contains("libc.so.6: it has no aclInit, so it is not an ACL runtime"),
                "names the symbol and what the library is not: {reason}"
            );
            assert!(
                reason.contains(hal_ascend::LIBRARY_VAR) && !reason.contains("older"),
                "says the variable named it: {reason}"
            );
        }
        Availability::Available => panic!("libc is not the Ascend runtime"),
    }
}

/// A runtime whose `aclInit` fails (injected into the stand-in, in a
/// child) is unavailable, the reason naming the library, `aclInit` and the
/// runtime's code; the failure stays with that backend, and the next
/// backend initialises again.
#[test]
fn a_runtime_that_fails_to_initialise_is_unavailable_naming_the_code() {
    const ME: &str = "a_runtime_that_fails_to_initialise_is_unavailable_naming_the_code";
    if role().as_deref() != Some(ME) {
        let fail = (hal_mock_libascendcl::visible::FAIL_VAR, "aclInit=507000");
        let out = common::child(ME, &[(ROLE, ME), fail]);
        return common::assert_ok(&out, ME);
    }
    let failed = common::backend();
    match failed.availability() {
        Availability::Unavailable { reason, searched } => {
            assert_eq!(searched, vec![common::standin()]);
            for part in ["aclInit", "507000", "ACL_ERROR_RT_INTERNAL_ERROR"] {
                assert!(reason.contains(part), "{reason} lacks {part}");
            }
        }
        Availability::Available => panic!("aclInit failed"),
    }
    assert!(
        failed.open(0).is_err(),
        "the failure stays with its backend"
    );
    assert!(common::backend().open(0).is_ok(), "one fault: aclInit runs");
}
