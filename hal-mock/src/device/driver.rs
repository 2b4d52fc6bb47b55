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
use std::time::Duration;

use crate::device::MockDevice;
use crate::memory::{MockAllocation, MockMapping};
use crate::rules;
use crate::sync::MockEvent;
use crate::vendor::Api;

impl MockDevice {
    /// The time between the completions of the latest records of `start`
    /// and `end` (`cuEventElapsedTime`, `aclrtEventElapsedTime`). Only
    /// events created with timing and not for IPC can be timed: CUDA answers
    /// `CUDA_ERROR_INVALID_HANDLE` for an IPC event (measured) and for an
    /// event without timing; Ascend's IPC events "cannot be timed". Records
    /// that have not both completed answer `CUDA_ERROR_NOT_READY`.
    pub fn event_elapsed(&self, start: &MockEvent, end: &MockEvent) -> Result<Duration> {
        let vendor = self.dev.vendor();
        self.dev.enter(Api::EventElapsedTime, None)?;
        for e in [start, end] {
            let flags = e.flags();
            if flags.interprocess || !flags.timing || e.is_imported() {
                return Err(self.dev.err(
                    vendor.invalid_handle(),
                    format!(
                        "{}: an event {} cannot be timed",
                        Api::EventElapsedTime.symbol(vendor),
                        if flags.interprocess {
                            "created for IPC"
                        } else {
                            "created without timing"
                        }
                    ),
                ));
            }
        }
        match (start.sync.completed_at()?, end.sync.completed_at()?) {
            (Some(a), Some(b)) => Ok(b.saturating_duration_since(a)),
            _ => Err(self.dev.err(
                rules::event_not_ready(vendor),
                format!(
                    "{}: a record of the events has not completed",
                    Api::EventElapsedTime.symbol(vendor)
                ),
            )),
        }
    }

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
