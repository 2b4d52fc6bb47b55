//! The options of export and import: who may import
//! ([`Importers`]), what an export covers ([`ByteRange`],
//! [`ExportOptions`]) and where an import lands ([`ImportOptions`]).

/// Which processes may import an export.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Importers {
    /// The backend's default: anyone for CPU shared memory and CUDA; on
    /// backends with
    /// [`Capabilities::PID_ALLOW_LIST_DEFAULT_ON`](crate::Capabilities::PID_ALLOW_LIST_DEFAULT_ON)
    /// (Ascend) nobody until pids are added.
    #[default]
    BackendDefault,
    /// Any process on this machine, of any user (Ascend:
    /// `DISABLE_PID_VALIDATION`). The exporter's descriptor broker serves
    /// other users' processes too ([`HandleFlags::ANY_IMPORTER`](crate::HandleFlags::ANY_IMPORTER)),
    /// but not those another user namespace does not map (they show up as
    /// the overflow uid). An importer takes descriptors only from its own
    /// user's brokers and root's unless it trusts the exporter's user
    /// ([`exchange::trust_exporter_uid`](crate::exchange::trust_exporter_uid),
    /// `HAL_TRUST_EXPORTER_UIDS`): so a root exporter's "anyone" reaches
    /// every user, and another user's reaches root once root trusts it.
    Anyone,
    /// Only these importers, of any user (the broker serves a listed
    /// process of another user too, pinned to the process that had the pid
    /// when it was allowed): each the id its
    /// [`Device::process_id`](crate::Device::process_id) gives (an OS pid
    /// in the exporter's pid namespace, or the vendor's own process id; the
    /// handle's [`pid_kind`](crate::Handle::pid_kind) says which).
    Pids(Vec<u32>),
    /// Any process of the exporter's user, however many
    /// ([`HandleFlags::SAME_USER`](crate::HandleFlags::SAME_USER)): the
    /// exporter's descriptor broker compares each importer's uid
    /// (`SO_PEERCRED`) with its own effective uid, so a process of another
    /// user (root included, unless the exporter runs as root) is refused.
    /// For the many processes a pid list cannot hold (PostgreSQL's
    /// backends all run as the server's user). Backends whose sharing
    /// does not go through the broker cannot enforce it and answer
    /// [`Error::Unsupported`](crate::Error::Unsupported): legacy CUDA IPC
    /// handles, Ascend's runtime allow-lists, the simulator, named
    /// regions (opened by name, their 0600 mode already limits them to
    /// their user).
    SameUser,
}

impl Importers {
    /// [`Error::Unsupported`](crate::Error::Unsupported) for
    /// [`Importers::SameUser`] on a backend that cannot enforce it, saying
    /// `why`; `Ok` for every other class.
    pub fn refuse_same_user(&self, backend: super::BackendId, why: &str) -> crate::Result<()> {
        if *self == Importers::SameUser {
            return Err(same_user_unsupported(backend, why));
        }
        Ok(())
    }
}

/// The [`Error::Unsupported`](crate::Error::Unsupported) of a backend that
/// cannot enforce [`Importers::SameUser`], saying `why`.
pub fn same_user_unsupported(backend: super::BackendId, why: &str) -> crate::Error {
    crate::Error::unsupported(
        backend,
        "export to any process of this user (Importers::SameUser)",
        format!(
            "{why}; export with Importers::Anyone or a pid list and control who receives the \
             handle"
        ),
    )
}

/// A byte range within an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// Offset from the start of the allocation.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl ByteRange {
    /// The range `offset..offset+len`.
    pub const fn new(offset: u64, len: u64) -> Self {
        ByteRange { offset, len }
    }

    /// Check the range is non-empty, whole pages, and inside `size` bytes.
    pub fn check(&self, size: u64, page_size: u64) -> crate::Result<()> {
        let end = self
            .offset
            .checked_add(self.len)
            .ok_or_else(|| crate::Error::invalid("range end overflows"))?;
        if self.len == 0 || end > size {
            return Err(crate::Error::invalid(format!(
                "range {:#x}+{:#x} is empty or past the allocation's {size:#x} bytes",
                self.offset, self.len
            )));
        }
        if page_size != 0 && (self.offset % page_size != 0 || self.len % page_size != 0) {
            return Err(crate::Error::Misaligned {
                offset: self.offset,
                len: self.len,
                page_size,
            });
        }
        Ok(())
    }
}

/// Options of an export.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExportOptions {
    /// The range to export; `None` exports the whole allocation. The range
    /// must cover whole pages: a misaligned range is refused, never widened.
    pub range: Option<ByteRange>,
    /// Who may import.
    pub importers: Importers,
    /// Importers map the memory read-only.
    pub read_only: bool,
}

impl ExportOptions {
    /// [`Error::Unsupported`](crate::Error::Unsupported) for a read-only
    /// export of `what` on a backend that cannot make one, saying `why`;
    /// `Ok` for a read-write export.
    pub fn refuse_read_only(
        &self,
        backend: super::BackendId,
        what: &str,
        why: &str,
    ) -> crate::Result<()> {
        if !self.read_only {
            return Ok(());
        }
        Err(crate::Error::unsupported(
            backend,
            format!("a read-only export of {what}"),
            format!("{why} (Capabilities::READ_ONLY_EXPORT is absent)"),
        ))
    }
}

/// Where an import places the mapping in the importer's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImportPlacement {
    /// Wherever the backend chooses.
    #[default]
    Anywhere,
    /// At the exporter's address, so pointer-rich structures work unchanged;
    /// fails with [`crate::Error::AlreadyExists`] when that range is taken here.
    ExporterAddress,
}

/// Options of an import.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImportOptions {
    /// Import onto this device (default: the exporter's device, matched by UUID).
    pub device: Option<u32>,
    /// Enable peer access when the target device differs from the exporter's.
    pub peer_access: bool,
    /// Address placement.
    pub placement: ImportPlacement,
}
