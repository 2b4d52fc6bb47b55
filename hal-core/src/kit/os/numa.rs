//! The host's NUMA nodes, as the kernel lists them.

use std::path::Path;

const NODE_DIR: &str = "/sys/devices/system/node";

/// The NUMA nodes of this machine that have memory (`[0]` without NUMA support).
pub fn numa_nodes() -> Vec<u32> {
    nodes_in(Path::new(NODE_DIR))
}

/// The nodes `dir` lists (`node<N>` entries), sorted; `[0]` where it lists
/// none or cannot be read.
fn nodes_in(dir: &Path) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(dir) else {
        return vec![0];
    };
    let mut nodes: Vec<u32> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("node"))
                .and_then(|n| n.parse().ok())
        })
        .collect();
    nodes.sort_unstable();
    if nodes.is_empty() {
        nodes.push(0);
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_entries_are_listed_sorted_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "node2", "node0", "node10", "possible", "nodex", "node", "has_cpu",
        ] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
        }
        assert_eq!(nodes_in(dir.path()), [0, 2, 10]);
    }

    #[test]
    fn without_node_entries_node_zero_stands_for_the_machine() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(nodes_in(dir.path()), [0], "an empty listing");
        std::fs::create_dir(dir.path().join("online")).unwrap();
        assert_eq!(nodes_in(dir.path()), [0], "no node entry");
        assert_eq!(nodes_in(&dir.path().join("missing")), [0], "no listing");
    }

    #[test]
    fn this_machine_lists_what_its_kernel_lists() {
        let nodes = numa_nodes();
        let listed = std::fs::read_dir(NODE_DIR).map_or(0, |d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix("node"))
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
                .count()
        });
        assert_eq!(nodes.len(), listed.max(1), "{nodes:?}");
        assert!(nodes.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
    }
}
