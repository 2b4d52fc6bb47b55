//! `cargo xtask circles`: import cycles between the files of a crate.
//!
//! Each crate's `src/**/*.rs` files are read; every path a file names
//! (`use crate::...`, `crate::...` in code, `super::...`, `self::...`, and
//! `use child::...` of its own child modules) is followed down to the file
//! that defines it, through the `pub use` re-exports of the module it names
//! (so `crate::MockBackend` counts as an import of the file that defines
//! it, not of `lib.rs`). Comments, string literals and `#[cfg(test)]`
//! modules are skipped: unit tests use the crate as its users do. A cycle
//! is a set of files that import each other directly or through a chain.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's files and who imports whom.
pub struct Graph {
    /// Every file, by its path relative to the crate folder.
    pub files: Vec<String>,
    /// Importing file -> imported files (indices into `files`).
    pub edges: BTreeMap<usize, BTreeSet<usize>>,
    /// Where each import is first written: (importing, imported) -> the
    /// line number (from 1) and that line of the importing file.
    pub sites: BTreeMap<(usize, usize), (usize, String)>,
    /// Each file's lines outside `#[cfg(test)]` items.
    pub lines: Vec<usize>,
}

struct File {
    rel: String,
    module: Vec<String>,
    code: String,
    text: String,
    lines: usize,
}

/// The module path of a file under `src`: `lib.rs` and `main.rs` are the
/// root, `a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`.
fn module_of(rel_to_src: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel_to_src
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !(parts.is_empty() && (stem == "lib" || stem == "main")) && stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            // `src/bin` holds other crates' roots.
            if p.file_name().is_some_and(|n| n == "bin") && p.parent() == Some(dir) {
                continue;
            }
            rs_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without comments and with string and character
/// literals blanked (their length and line breaks kept).
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == b'r' && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            j += 1;
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            while j < b.len() && !b[j..].starts_with(&close) {
                if b[j] == b'\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j + close.len();
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                if b.get(i) == Some(&b'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\''), not a lifetime ('a).
            let lit = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|p| i + 3 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 3)
            } else {
                None
            };
            match lit {
                Some(end) => {
                    out.push_str("' '");
                    i = end;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = src[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The end (index after the closing brace) of the block opening at `open`.
fn block_end(s: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in s[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return open + i + 1;
                }
            }
            _ => {}
        }
    }
    s.len()
}

/// `code` without the `#[cfg(test)]` items (`mod tests { ... }`).
#[cfg(test)]
fn without_tests(code: &str) -> String {
    without_tests_counted(code).0
}

/// `code` without the `#[cfg(test)]` items, and how many lines they spanned.
fn without_tests_counted(code: &str) -> (String, usize) {
    let mut removed = 0;
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let end = match (after.find('{'), after.find(';')) {
            (Some(b), Some(s)) if s < b => s + 1,
            (Some(b), _) => block_end(after, b),
            (None, Some(s)) => s + 1,
            (None, None) => after.len(),
        };
        let breaks = after[..end].chars().filter(|&c| c == '\n').count();
        // The lines the item spans: its first to its last.
        removed += breaks + 1;
        out.extend(std::iter::repeat_n('\n', breaks));
        rest = &after[end..];
    }
    out.push_str(rest);
    (out, removed)
}

/// Expand a use tree (`a::{b, c::{d, e}}`) into its paths.
fn expand_use(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let mut base = prefix.to_vec();
        base.extend(
            tree[..open]
                .split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
        );
        let close = tree.rfind('}').unwrap_or(tree.len());
        let inner = &tree[open + 1..close];
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&inner[start..i], &base, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_use(&inner[start..], &base, out);
        return;
    }
    let tree = tree.split(" as ").next().unwrap_or("").trim();
    if tree.is_empty() {
        return;
    }
    let mut path = prefix.to_vec();
    path.extend(tree.split("::").map(|s| s.trim().to_string()));
    out.push(path);
}

/// The inline modules (`mod name { ... }`) open at byte `at` of `code`.
fn inline_modules(code: &str, at: usize) -> Vec<String> {
    let mut stack = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..at].find("mod ") {
        let start = from + p;
        from = start + 4;
        if start > 0 && code[..start].ends_with(|c: char| is_ident(c)) {
            continue;
        }
        let name: String = code[start + 4..]
            .trim_start()
            .chars()
            .take_while(|&c| is_ident(c))
            .collect();
        let after = code[start + 4..].trim_start()[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = code.len() - after.len();
        if block_end(code, open) > at {
            stack.push(name);
        }
    }
    stack
}

/// The paths a file names, each as written, with the module it is written
/// in (the file's, plus inline modules).
#[cfg(test)]
fn paths(code: &str, module: &[String], child_modules: &BTreeSet<String>) -> Vec<Vec<String>> {
    paths_at(code, module, child_modules)
        .into_iter()
        .map(|(p, _)| p)
        .collect()
}

/// The paths a file names (see `paths`), each with the byte offset in `code`
/// where it is written.
fn paths_at(
    code: &str,
    module: &[String],
    child_modules: &BTreeSet<String>,
) -> Vec<(Vec<String>, usize)> {
    let mut found = Vec::new();
    let mut covered = Vec::new();
    // `use` statements, whole trees.
    let mut from = 0;
    while let Some(p) = code[from..].find("use ") {
        let start = from + p;
        from = start + 4;
        if start > 0 && code[..start].ends_with(|c: char| is_ident(c)) {
            continue;
        }
        let Some(semi) = code[start..].find(';') else {
            break;
        };
        let tree = &code[start + 4..start + semi];
        covered.push(start..start + semi);
        let mut here = module.to_vec();
        here.extend(inline_modules(code, start));
        let mut expanded = Vec::new();
        expand_use(tree, &[], &mut expanded);
        for path in expanded {
            let first = path.first().map(String::as_str).unwrap_or("");
            let absolute = match first {
                "crate" => Some(path[1..].to_vec()),
                "super" | "self" => resolve_relative(&here, &path),
                name if here.len() == module.len() && child_modules.contains(name) => {
                    let mut p = here.clone();
                    p.extend(path.iter().cloned());
                    Some(p)
                }
                _ => None,
            };
            found.extend(absolute.map(|p| (p, start)));
        }
    }
    // Paths in code: `crate::a::b`, `super::a`, `self::a`.
    for key in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(p) = code[from..].find(key) {
            let start = from + p;
            from = start + key.len();
            if covered.iter().any(|r| r.contains(&start))
                || (start > 0 && code[..start].ends_with(|c: char| is_ident(c) || c == ':'))
            {
                continue;
            }
            let text: String = code[start..]
                .chars()
                .take_while(|&c| is_ident(c) || c == ':')
                .collect();
            let path: Vec<String> = text
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            let mut here = module.to_vec();
            here.extend(inline_modules(code, start));
            let absolute = if path[0] == "crate" {
                Some(path[1..].to_vec())
            } else {
                resolve_relative(&here, &path)
            };
            found.extend(absolute.map(|p| (p, start)));
        }
    }
    found
}

fn resolve_relative(here: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut base = here.to_vec();
    let mut rest = path;
    while let Some(first) = rest.first() {
        match first.as_str() {
            "super" => {
                base.pop()?;
            }
            "self" => {}
            _ => break,
        }
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Build the import graph of the crate in `dir`.
pub fn graph(dir: &Path) -> std::io::Result<Graph> {
    let src = dir.join("src");
    let mut list = Vec::new();
    rs_files(&src, &mut list);
    let mut files = Vec::new();
    for p in &list {
        let rel_src = p.strip_prefix(&src).unwrap_or(p);
        let text = std::fs::read_to_string(p)?;
        let (code, test_lines) = without_tests_counted(&strip(&text));
        files.push(File {
            rel: p
                .strip_prefix(dir)
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned(),
            module: module_of(rel_src),
            lines: text.lines().count().saturating_sub(test_lines),
            code,
            text,
        });
    }
    // A crate with both roots (lib.rs and main.rs) is two crates; keep the
    // library's tree.
    let by_module: BTreeMap<Vec<String>, usize> = files
        .iter()
        .enumerate()
        .rev()
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    let children = |m: &[String]| -> BTreeSet<String> {
        by_module
            .keys()
            .filter(|k| k.len() == m.len() + 1 && k.starts_with(m))
            .map(|k| k[m.len()].clone())
            .collect()
    };
    // The `pub use` re-exports of each file: name -> absolute path.
    let mut reexports: Vec<BTreeMap<String, Vec<String>>> = Vec::new();
    for f in &files {
        let mut map = BTreeMap::new();
        let kids = children(&f.module);
        let mut from = 0;
        let code = &f.code;
        while let Some(p) = code[from..].find("pub use ") {
            let start = from + p;
            from = start + 8;
            let Some(semi) = code[start..].find(';') else {
                break;
            };
            let mut expanded = Vec::new();
            expand_use(&code[start + 8..start + semi], &[], &mut expanded);
            for path in expanded {
                let abs = match path[0].as_str() {
                    "crate" => Some(path[1..].to_vec()),
                    "super" | "self" => resolve_relative(&f.module, &path),
                    name if kids.contains(name) => {
                        let mut p = f.module.clone();
                        p.extend(path.iter().cloned());
                        Some(p)
                    }
                    _ => None,
                };
                if let (Some(abs), Some(name)) = (abs, path.last()) {
                    map.insert(name.clone(), abs);
                }
            }
        }
        reexports.push(map);
    }
    let resolve = |path: &[String]| -> Option<usize> {
        let mut path = path.to_vec();
        for _ in 0..8 {
            let (file, used) = (0..=path.len())
                .rev()
                .find_map(|n| by_module.get(&path[..n]).map(|&i| (i, n)))?;
            match path.get(used).and_then(|name| reexports[file].get(name)) {
                Some(target) if target.as_slice() != path.as_slice() => {
                    let mut next = target.clone();
                    next.extend(path[used + 1..].iter().cloned());
                    path = next;
                }
                _ => return Some(file),
            }
        }
        None
    };
    let mut edges: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    let mut sites = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        let kids = children(&f.module);
        for (path, at) in paths_at(&f.code, &f.module, &kids) {
            if let Some(j) = resolve(&path) {
                if j != i {
                    edges.entry(i).or_default().insert(j);
                    // Comments, strings and tests were blanked keeping
                    // their line breaks: lines count as in the file.
                    let line = f.code[..at].matches('\n').count() + 1;
                    sites.entry((i, j)).or_insert_with(|| {
                        let text = f.text.lines().nth(line - 1).unwrap_or("").trim();
                        (line, text.to_string())
                    });
                }
            }
        }
    }
    Ok(Graph {
        lines: files.iter().map(|f| f.lines).collect(),
        files: files.into_iter().map(|f| f.rel).collect(),
        edges,
        sites,
    })
}

impl Graph {
    /// The cycles: each strongly connected set of two or more files, with
    /// one chain through it that returns to its start.
    pub fn cycles(&self) -> Vec<Vec<usize>> {
        // Tarjan's algorithm, iteratively.
        let n = self.files.len();
        let mut index = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = Vec::new();
        let mut next = 0;
        let mut sccs = Vec::new();
        let empty = BTreeSet::new();
        for root in 0..n {
            if index[root] != usize::MAX {
                continue;
            }
            let mut work: Vec<(usize, Vec<usize>)> = Vec::new();
            index[root] = next;
            low[root] = next;
            next += 1;
            stack.push(root);
            on_stack[root] = true;
            let succ = |v: usize| -> Vec<usize> {
                self.edges
                    .get(&v)
                    .unwrap_or(&empty)
                    .iter()
                    .copied()
                    .collect()
            };
            work.push((root, succ(root)));
            while let Some((v, todo)) = work.last_mut() {
                let v = *v;
                if let Some(w) = todo.pop() {
                    if index[w] == usize::MAX {
                        index[w] = next;
                        low[w] = next;
                        next += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        work.push((w, succ(w)));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                work.pop();
                if let Some((parent, _)) = work.last() {
                    low[*parent] = low[*parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut scc = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        scc.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if scc.len() > 1 {
                        scc.sort();
                        sccs.push(scc);
                    }
                }
            }
        }
        sccs.into_iter().map(|scc| self.chain(&scc)).collect()
    }

    /// A chain from the first file of `scc` back to it, inside `scc`.
    fn chain(&self, scc: &[usize]) -> Vec<usize> {
        let start = scc[0];
        let inside: BTreeSet<usize> = scc.iter().copied().collect();
        // Breadth-first search for the shortest way back to `start`.
        let mut prev: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            for &w in self.edges.get(&v).into_iter().flatten() {
                if !inside.contains(&w) {
                    continue;
                }
                if w == start {
                    let mut back = Vec::new();
                    let mut at = v;
                    while at != start {
                        back.push(at);
                        at = prev[&at];
                    }
                    back.reverse();
                    let mut path = vec![start];
                    path.extend(back);
                    path.push(start);
                    return path;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = prev.entry(w) {
                    e.insert(v);
                    queue.push_back(w);
                }
            }
        }
        scc.to_vec()
    }

    /// The files in dependency order, leaves first; the files in or above a
    /// cycle come last, together.
    pub fn layers(&self) -> Vec<Vec<usize>> {
        let mut left: BTreeSet<usize> = (0..self.files.len()).collect();
        let mut layers = Vec::new();
        loop {
            let layer: Vec<usize> = left
                .iter()
                .copied()
                .filter(|v| {
                    self.edges
                        .get(v)
                        .is_none_or(|deps| deps.iter().all(|d| !left.contains(d)))
                })
                .collect();
            if layer.is_empty() {
                break;
            }
            for v in &layer {
                left.remove(v);
            }
            layers.push(layer);
        }
        if !left.is_empty() {
            layers.push(left.into_iter().collect());
        }
        layers
    }
}

/// The layers of a crate: the files of its contract (a leaf: they import
/// only each other), and folders that may not import others. A name ending
/// in `/` is a folder and everything under it; any other is one file.
pub struct Layers {
    /// The contract's files and folders.
    pub contract: &'static [&'static str],
    /// (importing folder, what it may not import).
    pub forbidden: &'static [(&'static str, &'static [&'static str])],
    /// The most lines (outside `#[cfg(test)]` items) the contract's import
    /// closure may hold.
    pub contract_budget: usize,
}

/// hal-core: the contract is what a program and a backend author both
/// name; the kit, what backend authors reuse, sits on the contract and
/// below the features.
const HAL_CORE: Layers = Layers {
    contract: &[
        "src/backend.rs",
        "src/bounds.rs",
        "src/device.rs",
        "src/error.rs",
        "src/exported.rs",
        "src/handle.rs",
        "src/handle/wire.rs",
        "src/handle/wire/",
        "src/process.rs",
        "src/types/",
        "src/vmm/",
    ],
    forbidden: &[(
        "src/kit/",
        &[
            "src/exchange/",
            "src/exchange.rs",
            "src/lease.rs",
            "src/lease/",
            "src/channel/",
            "src/channel.rs",
            "src/group/",
            "src/group.rs",
        ],
    )],
    contract_budget: 4000,
};

/// The layers of the crate in the folder named `name`, where it has any.
pub fn layers_of(name: &str) -> Option<&'static Layers> {
    match name {
        "hal-core" => Some(&HAL_CORE),
        _ => None,
    }
}

fn names(rel: &str, list: &[&str]) -> bool {
    list.iter()
        .any(|n| rel == *n || (n.ends_with('/') && rel.starts_with(n)))
}

/// An import that runs against a crate's layers.
pub struct Violation {
    /// The importing file, relative to the crate folder.
    pub file: String,
    /// The line of the import, from 1.
    pub line: usize,
    /// That line.
    pub text: String,
    /// The imported file.
    pub imported: String,
    /// The rule it breaks.
    pub rule: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: `{}` imports {} ({})",
            self.file, self.line, self.text, self.imported, self.rule
        )
    }
}

impl Graph {
    /// The files of the contract of `layers`.
    pub fn contract(&self, layers: &Layers) -> Vec<usize> {
        (0..self.files.len())
            .filter(|&f| names(&self.files[f], layers.contract))
            .collect()
    }

    /// The files `from` import, directly or through others, `from`
    /// included.
    pub fn closure(&self, from: &[usize]) -> BTreeSet<usize> {
        let mut seen: BTreeSet<usize> = from.iter().copied().collect();
        let mut todo: Vec<usize> = from.to_vec();
        while let Some(v) = todo.pop() {
            for &w in self.edges.get(&v).into_iter().flatten() {
                if seen.insert(w) {
                    todo.push(w);
                }
            }
        }
        seen
    }

    /// Every import that breaks `layers`, in file order.
    pub fn violations(&self, layers: &Layers) -> Vec<Violation> {
        let mut out = Vec::new();
        for (&from, to) in &self.edges {
            let rel = &self.files[from];
            for &t in to {
                let target = &self.files[t];
                let rule = if names(rel, layers.contract) && !names(target, layers.contract) {
                    Some("the contract imports only the contract".to_string())
                } else {
                    layers
                        .forbidden
                        .iter()
                        .find(|(folder, banned)| names(rel, &[folder]) && names(target, banned))
                        .map(|(folder, banned)| {
                            format!("{folder} imports nothing from {}", banned.join(", "))
                        })
                };
                if let Some(rule) = rule {
                    let (line, text) = self.sites.get(&(from, t)).cloned().unwrap_or_default();
                    out.push(Violation {
                        file: rel.clone(),
                        line,
                        text,
                        imported: target.clone(),
                        rule,
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_trees_expand() {
        let mut out = Vec::new();
        expand_use("crate::a::{b, c::{d, e as f}, self}", &[], &mut out);
        let got: Vec<String> = out.iter().map(|p| p.join("::")).collect();
        assert_eq!(
            got,
            [
                "crate::a::b",
                "crate::a::c::d",
                "crate::a::c::e",
                "crate::a::self"
            ]
        );
    }

    #[test]
    fn comments_strings_and_tests_are_skipped() {
        let code = "use crate::a; // crate::b\nlet s = \"crate::c\";\n#[cfg(test)]\nmod tests { use crate::d; }\nfn f() { crate::e::g(); }";
        let code = without_tests(&strip(code));
        let found = paths(&code, &[], &BTreeSet::new());
        let got: Vec<String> = found.iter().map(|p| p.join("::")).collect();
        assert_eq!(got, ["a", "e::g"]);
    }

    const FIXTURE: Layers = Layers {
        contract: &["src/device.rs", "src/types/"],
        forbidden: &[("src/kit/", &["src/exchange.rs"])],
        contract_budget: 100,
    };

    /// A crate whose files are `files` (path under the crate folder, text).
    fn fixture(files: &[(&str, &str)]) -> (tempfile::TempDir, Graph) {
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in files {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let g = graph(dir.path()).unwrap();
        (dir, g)
    }

    const LIB: &str = "pub mod device;\npub mod exchange;\npub mod kit;\npub mod types;\n";

    #[test]
    fn a_contract_that_imports_a_feature_breaks_the_layers() {
        let (_dir, g) = fixture(&[
            ("src/lib.rs", LIB),
            (
                "src/device.rs",
                "//! The device.\n\nuse crate::types::Info;\nuse crate::exchange::Broker;\n",
            ),
            ("src/types/mod.rs", "pub struct Info;\n"),
            ("src/exchange.rs", "pub struct Broker;\n"),
            ("src/kit/mod.rs", "use crate::types::Info;\n"),
        ]);
        let found = g.violations(&FIXTURE);
        let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "src/device.rs:4: `use crate::exchange::Broker;` imports src/exchange.rs \
              (the contract imports only the contract)"
            ]
        );
    }

    #[test]
    fn a_kit_that_imports_a_feature_breaks_the_layers() {
        let (_dir, g) = fixture(&[
            ("src/lib.rs", LIB),
            ("src/device.rs", "use crate::types::Info;\n"),
            ("src/types/mod.rs", "pub struct Info;\n"),
            (
                "src/exchange.rs",
                "use crate::kit::Tool;\npub struct Broker;\n",
            ),
            (
                "src/kit/mod.rs",
                "pub struct Tool;\n\nfn f() {\n    let _ = crate::exchange::Broker;\n}\n",
            ),
        ]);
        let found = g.violations(&FIXTURE);
        assert_eq!(found.len(), 1, "{}", found[0]);
        assert_eq!(
            (found[0].file.as_str(), found[0].line),
            ("src/kit/mod.rs", 4)
        );
        assert_eq!(found[0].imported, "src/exchange.rs");
    }

    #[test]
    fn layers_kept_break_nothing_and_the_closure_is_counted() {
        let (_dir, g) = fixture(&[
            ("src/lib.rs", LIB),
            ("src/device.rs", "use crate::types::Info;\n\nfn f() {}\n"),
            (
                "src/types/mod.rs",
                "pub struct Info;\n\n#[cfg(test)]\nmod tests {\n    use crate::exchange::Broker;\n}\n",
            ),
            ("src/exchange.rs", "use crate::device;\npub struct Broker;\n"),
            ("src/kit/mod.rs", "use crate::device;\n"),
        ]);
        assert!(g.violations(&FIXTURE).is_empty());
        let closure = g.closure(&g.contract(&FIXTURE));
        let files: Vec<&str> = closure.iter().map(|&f| g.files[f].as_str()).collect();
        assert_eq!(files, ["src/device.rs", "src/types/mod.rs"]);
        // Three lines of device.rs, two of types/mod.rs outside its tests.
        assert_eq!(closure.iter().map(|&f| g.lines[f]).sum::<usize>(), 5);
    }

    #[test]
    fn modules_of_files() {
        assert_eq!(module_of(Path::new("lib.rs")), Vec::<String>::new());
        assert_eq!(module_of(Path::new("a/mod.rs")), ["a"]);
        assert_eq!(module_of(Path::new("a/b.rs")), ["a", "b"]);
    }
}
