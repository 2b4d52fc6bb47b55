//! What an import keeps as long as itself without the kit knowing what it
//! is: the importer's lease on the exporter's resource
//! ([`exchange::Lease`](crate::exchange::Lease)), given back when it drops.

/// A value kept alive, and dropped with its holder (a sync page, a
/// physical allocation's record).
pub struct KeepAlive(#[allow(dead_code)] Box<dyn Send + Sync>);

impl KeepAlive {
    /// Keep `value` until this is dropped.
    pub fn new(value: impl Send + Sync + 'static) -> KeepAlive {
        KeepAlive(Box::new(value))
    }
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeepAlive")
    }
}
