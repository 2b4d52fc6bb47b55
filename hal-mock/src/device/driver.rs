//! Calls as the vendor's driver answers them, beneath the contract.
//!
//! The contract smooths over a few vendor answers: it imports a process's
//! own export from the original memory (the driver refuses to open it) and
//! answers [`Error::Unsupported`](hal_core::Error::Unsupported) naming
//! `hal-cuda-uvm` for managed memory (the driver says invalid value). These
//! calls keep the driver's own answers, as measured on real hardware
//! (`vendor/cuda.md`, "Measured on an H200"), for the stand-in driver
//! libraries built on the simulator and for tests of the measured truth.

use hal_core::SharedHandle;
use hal_core::{Device, ExportOptions, Exported, ImportOptions, Location, Memory, Result};

use crate::device::MockDevice;
use crate::memory::{MockAllocation, MockMapping};
use crate::rules;
use crate::vendor::Api;

impl MockDevice {
    /// Export memory as the driver does (`cuIpcGetMemHandle`,
    /// `aclrtIpcMemGetExportKey`): as [`Device::export_memory`], except that
    /// managed memory is refused with the vendor's invalid-value code
    /// (CUDA: `CUDA_ERROR_INVALID_VALUE`, measured).
    pub fn driver_export_memory(
        &self,
        alloc: &MockAllocation,
        opts: &ExportOptions,
    ) -> Result<Exported> {
        let vendor = self.dev.vendor();
        if alloc.location() == Location::Managed {
            return Err(self.dev.err(
                vendor.invalid_value(),
                format!(
                    "{}: the pointer is managed memory ({})",
                    Api::IpcGetMem.symbol(vendor),
                    Api::MemAllocManaged.symbol(vendor)
                ),
            ));
        }
        Device::export_memory(self, alloc, opts)
    }

    /// Open exported memory as the driver does (`cuIpcOpenMemHandle_v2`,
    /// `aclrtIpcMemImportByKey`): as [`Device::import_memory`], except that a
    /// process's own export is refused where the vendor refuses it (CUDA:
    /// `CUDA_ERROR_INVALID_CONTEXT`, measured), where the contract reaches
    /// the original memory instead.
    pub fn driver_open_memory(
        &self,
        shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<MockMapping> {
        let vendor = self.dev.vendor();
        if shared.handle.is_own() {
            if let Some(code) = rules::own_handle_open(vendor) {
                return Err(self.dev.err(
                    code,
                    format!(
                        "{}: the handle was exported by this process",
                        Api::IpcOpenMem.symbol(vendor)
                    ),
                ));
            }
        }
        Device::import_memory(self, shared, opts)
    }
}
