//! [`BackendId`]: which backend a handle or a device belongs to, by the
//! number the wire carries, and the name messages call it by.

use std::fmt;

/// Which backend a handle or a device belongs to. The numeric id is part of
/// the handle wire format and never changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum BackendId {
    /// CPU shared memory (`hal-cpu-shm`), id `0x0001`.
    CpuShm,
    /// CUDA device memory through the driver API, id `0x0002`.
    Cuda,
    /// CUDA managed memory shared across processes, id `0x0003`.
    CudaUvm,
    /// Huawei Ascend through ACL, id `0x0004`.
    Ascend,
    /// The simulator's CUDA-like profile, id `0x0100`.
    MockCuda,
    /// The simulator's Ascend-like profile, id `0x0101`.
    MockAscend,
    /// An out-of-tree backend; ids `0x8000..=0xFFFF` are left to vendor integrators.
    External(u16),
}

impl BackendId {
    /// The wire id.
    pub const fn to_wire(self) -> u16 {
        match self {
            BackendId::CpuShm => 0x0001,
            BackendId::Cuda => 0x0002,
            BackendId::CudaUvm => 0x0003,
            BackendId::Ascend => 0x0004,
            BackendId::MockCuda => 0x0100,
            BackendId::MockAscend => 0x0101,
            BackendId::External(id) => id,
        }
    }

    /// The backend for a wire id, or `None` for an unassigned id.
    pub const fn from_wire(id: u16) -> Option<Self> {
        Some(match id {
            0x0001 => BackendId::CpuShm,
            0x0002 => BackendId::Cuda,
            0x0003 => BackendId::CudaUvm,
            0x0004 => BackendId::Ascend,
            0x0100 => BackendId::MockCuda,
            0x0101 => BackendId::MockAscend,
            0x8000..=0xFFFF => BackendId::External(id),
            _ => return None,
        })
    }

    /// The backends of this project, in the order of their wire ids.
    pub const IN_TREE: &'static [BackendId] = &[
        BackendId::CpuShm,
        BackendId::Cuda,
        BackendId::CudaUvm,
        BackendId::Ascend,
        BackendId::MockCuda,
        BackendId::MockAscend,
    ];

    /// The backend's registry name (`cpu-shm`, `mock-cuda`, ...); an
    /// out-of-tree backend's is the name its id was claimed under in this
    /// process ([`crate::naming`], [`BackendId::name_external`]), else
    /// `external-XXXX`.
    pub fn name(self) -> String {
        match self {
            BackendId::CpuShm => "cpu-shm".into(),
            BackendId::Cuda => "cuda".into(),
            BackendId::CudaUvm => "cuda-uvm".into(),
            BackendId::Ascend => "ascend".into(),
            BackendId::MockCuda => "mock-cuda".into(),
            BackendId::MockAscend => "mock-ascend".into(),
            BackendId::External(id) => {
                super::external::external_name(id).unwrap_or_else(|| format!("external-{id:04x}"))
            }
        }
    }
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A backend equals its name: `BackendId::Cuda == "cuda"`.
impl PartialEq<str> for BackendId {
    fn eq(&self, name: &str) -> bool {
        self.name() == name
    }
}

/// A backend equals its name: `BackendId::Cuda == "cuda"`.
impl PartialEq<&str> for BackendId {
    fn eq(&self, name: &&str) -> bool {
        self.name() == *name
    }
}
