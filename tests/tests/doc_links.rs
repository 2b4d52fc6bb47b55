//! Every relative link of the repository's Markdown files leads somewhere:
//! `[text](path)` names a file or folder that exists, and `path#anchor`
//! (or `#anchor` alone) a heading of that Markdown file, as GitHub names
//! headings. The README sends a newcomer to the long texts this way, and a
//! text moved or renamed without its links would strand them.

use std::path::{Path, PathBuf};

/// The repository's root (this crate is its `tests/` folder).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The Markdown files under `dir`, build output and hidden folders left out,
/// and `shared/`, where a checkout may keep notes that are not the
/// repository's.
fn markdown_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("a directory entry");
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "shared" {
            continue;
        }
        let kind = entry.file_type().expect("a file type");
        if kind.is_dir() {
            markdown_files(&path, found);
        } else if kind.is_file() && name.ends_with(".md") {
            found.push(path);
        }
    }
}

/// The text's lines outside fenced code blocks, with inline code spans
/// blanked, so that a `](x)` shown as code is not taken for a link.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            lines.push(String::new());
            continue;
        }
        if fenced {
            lines.push(String::new());
            continue;
        }
        let mut out = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                out.push(' ');
            } else {
                out.push(if in_code { ' ' } else { c });
            }
        }
        lines.push(out);
    }
    lines
}

/// The targets of the `[text](target)` links of a line.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                targets.push(after[..end].trim().to_string());
                rest = &after[end..];
            }
            None => break,
        }
    }
    targets
}

/// A heading's anchor as GitHub makes it: lower case, spaces to hyphens,
/// punctuation other than hyphens and underscores dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings.
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            let heading = line.trim_start_matches('#');
            if heading.starts_with(' ') {
                found.push(anchor(heading));
            }
        }
    }
    found
}

/// Whether a link leaves the repository (a web address, mail).
fn external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

#[test]
fn every_relative_link_of_the_markdown_files_leads_somewhere() {
    let root = root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    files.sort();
    let readme = root.join("README.md");
    assert!(
        files.contains(&readme),
        "no README.md found under {}",
        root.display()
    );
    let mut checked = 0;
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a Markdown file");
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for (number, line) in prose(&text).iter().enumerate() {
            for target in link_targets(line) {
                if target.is_empty() || external(&target) {
                    continue;
                }
                checked += 1;
                let (path, fragment) = match target.split_once('#') {
                    Some((path, fragment)) => (path, Some(fragment)),
                    None => (target.as_str(), None),
                };
                let place = format!("{shown}:{}: ({target})", number + 1);
                let linked = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().expect("a file's folder").join(path)
                };
                if !linked.exists() {
                    broken.push(format!("{place}: no such file"));
                    continue;
                }
                if let Some(fragment) = fragment {
                    let is_markdown = linked.extension().is_some_and(|e| e == "md");
                    let heads = if is_markdown {
                        anchors(&std::fs::read_to_string(&linked).expect("read a linked file"))
                    } else {
                        Vec::new()
                    };
                    if !heads.iter().any(|h| h == fragment) {
                        broken.push(format!("{place}: no heading with that anchor"));
                    }
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links (fix the path or the heading it names):\n{}",
        broken.join("\n")
    );
    // The README alone links to a dozen long texts: a parser that found
    // none would pass without checking anything.
    assert!(checked >= 12, "only {checked} relative links found");
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(anchor(" From C and C++"), "from-c-and-c");
    assert_eq!(
        anchor(" Managed memory shared across processes (`hal-cuda-uvm`)"),
        "managed-memory-shared-across-processes-hal-cuda-uvm"
    );
    assert_eq!(
        link_targets("see [a](x.md#y) and [b](../z.md)"),
        ["x.md#y", "../z.md"]
    );
    assert!(link_targets(&prose("`[a](not-a-link)`")[0]).is_empty());
}
