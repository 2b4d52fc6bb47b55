//! The README's halctl table and `--help` agree: every command `--help`
//! lists has a row, and every long option of a command's `--help` is in its
//! row, and every option in a row is in that command's `--help`.

use std::collections::BTreeSet;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_halctl");

fn help(command: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(command)
        .arg("--help")
        .output()
        .expect("run halctl --help");
    assert!(out.status.success(), "{command:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The lines of section `title` (`Options:`, `Commands:`) of a help text.
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| *l != title)
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .collect()
}

/// The long options a help text defines (not those it mentions in prose),
/// less `--help` and `--version`.
fn options(text: &str) -> BTreeSet<String> {
    section(text, "Options:")
        .iter()
        .filter_map(|l| {
            // Definitions are indented by 2 (`-h, --help`) or 6 spaces;
            // descriptions, by more.
            let indent = l.len() - l.trim_start().len();
            if indent > 6 {
                return None;
            }
            let l = l.trim_start();
            let l = match l.split_once(", ") {
                Some((short, rest)) if short.len() == 2 && short.starts_with('-') => rest,
                _ => l,
            };
            let name: String = l
                .strip_prefix("--")?
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            Some(format!("--{name}"))
        })
        .filter(|o| o != "--help" && o != "--version")
        .collect()
}

/// Every command path with its own options: `["export"]`, `["shm", "gc"]`.
fn commands(prefix: &[&str]) -> Vec<Vec<String>> {
    let text = help(prefix);
    let subs: Vec<String> = section(&text, "Commands:")
        .iter()
        // A command's line starts with two spaces; a description that wraps
        // goes on in lines indented further.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect();
    if subs.is_empty() {
        return vec![prefix.iter().map(|s| s.to_string()).collect()];
    }
    subs.iter()
        .flat_map(|s| {
            let mut p: Vec<&str> = prefix.to_vec();
            p.push(s);
            commands(&p)
        })
        .collect()
}

/// The README's halctl table: each row's command (its lower-case words
/// after `halctl`) and the long options its first cell shows.
fn readme_rows() -> Vec<(Vec<String>, BTreeSet<String>)> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let section: String = readme
        .lines()
        .skip_while(|l| *l != "## halctl")
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect::<Vec<_>>()
        .join("\n");
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `halctl "))
        .map(|rest| {
            let cell = &rest[..rest.find("` |").expect("a row's first cell ends")];
            let words: Vec<String> = cell
                .split_whitespace()
                .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase()))
                .map(str::to_string)
                .collect();
            let opts: BTreeSet<String> = cell
                .match_indices("--")
                .map(|(at, _)| {
                    let name: String = cell[at + 2..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                        .collect();
                    format!("--{name}")
                })
                .collect();
            (words, opts)
        })
        .collect()
}

#[test]
fn every_option_in_help_is_in_the_readme_table_and_back() {
    let rows = readme_rows();
    assert!(!rows.is_empty(), "README.md has no halctl table");
    let cmds = commands(&[]);
    assert!(cmds.len() >= 7, "{cmds:?}");
    for cmd in &cmds {
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let in_help = options(&help(&args));
        let row = rows
            .iter()
            .find(|(words, _)| words == cmd)
            .unwrap_or_else(|| {
                panic!(
                    "README's halctl table has no row for `halctl {}`",
                    cmd.join(" ")
                )
            });
        assert_eq!(
            in_help,
            row.1,
            "`halctl {}`: --help (left) and the README's row (right) differ",
            cmd.join(" ")
        );
    }
    // And no row for a command halctl does not have.
    for (words, _) in &rows {
        assert!(
            cmds.contains(words),
            "README row for unknown `halctl {}`",
            words.join(" ")
        );
    }
}

#[test]
fn options_are_read_from_definitions_not_prose() {
    let text = "Usage: x\n\nOptions:\n      --backend <NAME>  Read --other here\n  -h, --help  Print help\n      --no-pin\n          Let the kernel (see --json)\n          --read-only wrapped\n";
    let got: Vec<String> = options(text).into_iter().collect();
    assert_eq!(got, ["--backend", "--no-pin"]);
}
