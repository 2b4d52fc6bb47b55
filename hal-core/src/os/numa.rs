//! The host's NUMA nodes, as the kernel lists them.

const NODE_DIR: &str = "/sys/devices/system/node";

/// The NUMA nodes of this machine that have memory (`[0]` without NUMA support).
pub fn numa_nodes() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(NODE_DIR) else {
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
    #[test]
    fn node_zero_is_always_listed() {
        let nodes = super::numa_nodes();
        assert!(nodes.contains(&0) || !nodes.is_empty());
        assert!(nodes.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
    }
}
