//! Every entry point the stand-in exports is called through the C ABI by
//! a test of this package. With hal-cuda's own check (every entry point
//! it resolves is one the stand-in exports), every driver call hal-cuda
//! makes has its stand-in answer under test.

use std::path::Path;

/// The text of every test source of this package.
fn test_sources() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut text = String::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                text.push_str(&std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    text
}

#[test]
fn every_exported_entry_point_is_called_by_a_test() {
    let text = test_sources();
    let uncalled: Vec<&str> = hal_mock_libcuda::EXPORTED
        .iter()
        .copied()
        .filter(|name| {
            // Called as a field of the resolved table: `(cu.NAME)(` or
            // `(cu().NAME)(`, or looked up by name and called.
            let field = format!(".{name})(");
            let looked_up = format!("b\"{name}\"");
            !text.contains(&field) && !text.contains(&looked_up)
        })
        .collect();
    assert!(
        uncalled.is_empty(),
        "entry points no test of the stand-in calls: {uncalled:?}"
    );
}
