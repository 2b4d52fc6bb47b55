//! Streams, events and notifies of a [`MockDevice`].

use std::sync::Arc;
use std::time::Duration;

use hal_core::{
    Capabilities, Error, EventFlags, ExportOptions, Exported, HandleKind, ImportOptions,
    NotifyFlags, Result, SharedHandle,
};

use crate::device::{ListKind, MockDevice};
use crate::fault::FaultOp;
use crate::memory::Payload;
use crate::rules;
use crate::stream::{HostWord, MockStream, Op};
use crate::sync::{MockEvent, MockNotify};
use crate::vendor::Api;

impl MockDevice {
    pub(super) fn sim_create_stream(&self) -> Result<MockStream> {
        self.dev.enter(Api::StreamCreate, None)?;
        MockStream::create(&self.dev)
    }

    pub(super) fn sim_synchronize(
        &self,
        stream: &MockStream,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.dev
            .enter(Api::StreamSynchronize, Some(FaultOp::Wait))?;
        stream.synchronize(timeout)
    }

    pub(super) fn sim_create_event(&self, flags: EventFlags) -> Result<MockEvent> {
        let vendor = self.dev.vendor();
        if flags.interprocess {
            self.dev
                .require(Capabilities::IPC_EVENT, "create an IPC event")?;
        }
        self.dev.enter(Api::EventCreate, None)?;
        if let Err(why) = rules::event_flags_allowed(vendor, flags) {
            return Err(self.dev.err(vendor.invalid_value(), why));
        }
        MockEvent::create(&self.dev, flags)
    }

    pub(super) fn sim_record_event(&self, stream: &MockStream, event: &MockEvent) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.dev.check_owner(&event.dev, "event", false)?;
        self.dev.enter(Api::EventRecord, None)?;
        let seq = event.sync.next_record()?;
        stream.push(Op::Record {
            sync: Arc::clone(&event.sync),
            seq,
        });
        Ok(())
    }

    pub(super) fn sim_stream_wait_event(
        &self,
        stream: &MockStream,
        event: &MockEvent,
    ) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.dev.check_owner(&event.dev, "event", false)?;
        self.dev.enter(Api::StreamWaitEvent, None)?;
        let target = event.sync.last_record()?;
        stream.push(Op::WaitEvent {
            sync: Arc::clone(&event.sync),
            target,
        });
        Ok(())
    }

    pub(super) fn sim_export_event(
        &self,
        event: &MockEvent,
        opts: &ExportOptions,
    ) -> Result<Exported> {
        self.dev.check_owner(&event.dev, "event", false)?;
        self.dev.require(Capabilities::IPC_EVENT, "export_event")?;
        let vendor = self.dev.vendor();
        if event.imported {
            return Err(Error::invalid(
                "an imported event is exported again by its creator, not by an importer",
            ));
        }
        self.check_export_opts(opts, "event")?;
        self.dev.enter(Api::IpcGetEvent, Some(FaultOp::Export))?;
        if !event.flags.interprocess {
            return Err(self.dev.err(
                vendor.invalid_value(),
                format!(
                    "{}: the event was not created with {} (EventFlags::interprocess)",
                    Api::IpcGetEvent.symbol(vendor),
                    vendor.ipc_event_flag()
                ),
            ));
        }
        self.export_sync(
            HandleKind::Event,
            event.dev.ordinal,
            opts,
            ListKind::Unlisted,
            &event.sync,
        )
    }

    pub(super) fn sim_import_event(
        &self,
        mut shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<MockEvent> {
        shared
            .handle
            .expect(HandleKind::Event, self.dev.backend())?;
        self.dev.require(Capabilities::IPC_EVENT, "import_event")?;
        Payload::decode(self.dev.vendor(), &shared.handle)?;
        let (_, target) = self.resolve(&shared.handle, opts, false)?;
        let on = self.on(target);
        on.enter(Api::IpcOpenEvent, Some(FaultOp::Import))?;
        let mut taken = self.take_fds_leased(&mut shared, 1)?;
        MockEvent::open(&on, taken.fds.remove(0), taken.lease)
    }

    pub(super) fn sim_create_notify(&self, flags: NotifyFlags) -> Result<MockNotify> {
        if flags.device_only {
            self.dev
                .require(Capabilities::STREAM_ORDERED_NOTIFY, "a device-only notify")?;
        }
        self.dev.enter(Api::NotifyCreate, None)?;
        MockNotify::create(&self.dev, flags)
    }

    pub(super) fn sim_record_notify(&self, stream: &MockStream, notify: &MockNotify) -> Result<()> {
        self.dev
            .require(Capabilities::STREAM_ORDERED_NOTIFY, "record_notify")?;
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.dev.check_owner(&notify.dev, "notify", false)?;
        self.dev.enter(Api::NotifyRecord, None)?;
        stream.push(Op::Signal {
            sync: Arc::clone(&notify.sync),
        });
        Ok(())
    }

    pub(super) fn sim_stream_wait_notify(
        &self,
        stream: &MockStream,
        notify: &MockNotify,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.dev
            .require(Capabilities::STREAM_ORDERED_NOTIFY, "stream_wait_notify")?;
        self.dev.check_owner(&stream.dev, "stream", true)?;
        self.dev.check_owner(&notify.dev, "notify", false)?;
        notify.check_waiter()?;
        self.dev.enter(Api::NotifyWait, None)?;
        stream.push(Op::WaitNotify {
            sync: Arc::clone(&notify.sync),
            timeout,
        });
        Ok(())
    }

    pub(super) fn sim_export_notify(
        &self,
        notify: &MockNotify,
        opts: &ExportOptions,
    ) -> Result<Exported> {
        self.dev.check_owner(&notify.dev, "notify", false)?;
        self.dev
            .require(Capabilities::IPC_NOTIFY, "export_notify")?;
        if !notify.creator {
            return Err(Error::invalid(
                "an imported notify is exported again by its creator, not by an importer",
            ));
        }
        self.check_export_opts(opts, "notify")?;
        self.dev.enter(Api::NotifyExport, Some(FaultOp::Export))?;
        self.export_sync(
            HandleKind::Notify,
            notify.dev.ordinal,
            opts,
            ListKind::Listed,
            &notify.sync,
        )
    }

    pub(super) fn sim_import_notify(
        &self,
        mut shared: SharedHandle,
        opts: &ImportOptions,
    ) -> Result<MockNotify> {
        shared
            .handle
            .expect(HandleKind::Notify, self.dev.backend())?;
        self.dev
            .require(Capabilities::IPC_NOTIFY, "import_notify")?;
        Payload::decode(self.dev.vendor(), &shared.handle)?;
        // Ascend's notify import has its own ENABLE_PEER_ACCESS flag; the
        // CUDA-like notify is host memory, reachable from every device.
        let peer_rule = rules::notify_import_needs_peer_access(self.dev.vendor());
        let (_, target) = self.resolve(&shared.handle, opts, peer_rule)?;
        let on = self.on(target);
        on.enter(Api::NotifyImport, Some(FaultOp::Import))?;
        let mut taken = self.take_fds_leased(&mut shared, 1)?;
        MockNotify::open(&on, taken.fds.remove(0), taken.lease)
    }
}

impl MockDevice {
    /// The checks of a stream memory operation on `addr`: stream-ordered
    /// notifies, this device's stream, an aligned word of registered host
    /// memory (the vendor's invalid-value code otherwise).
    fn host_word(&self, stream: &MockStream, addr: u64, what: &str) -> Result<()> {
        self.dev
            .require(Capabilities::STREAM_ORDERED_NOTIFY, what)?;
        self.dev.check_owner(&stream.dev, "stream", true)?;
        if addr % 4 != 0 || !self.dev.shared.host_registered.contains(addr, 4) {
            return Err(self.dev.err(
                self.dev.vendor().invalid_value(),
                format!("{what}: {addr:#x} is not an aligned word of registered host memory"),
            ));
        }
        Ok(())
    }

    /// Queue storing `value` into the word at `addr` of host memory
    /// registered with this backend (`cuStreamWriteValue32`).
    ///
    /// # Safety
    ///
    /// The word stays registered (and mapped) until the stream ran the
    /// operation.
    pub unsafe fn write_value32(&self, stream: &MockStream, addr: u64, value: u32) -> Result<()> {
        self.host_word(stream, addr, "cuStreamWriteValue32")?;
        self.dev.enter(Api::NotifyRecord, None)?;
        // SAFETY: checked aligned and registered; kept so by the caller.
        let word = unsafe { HostWord::new(addr) };
        stream.push(Op::WriteWord { word, value });
        Ok(())
    }

    /// Queue holding `stream` until the word at `addr` of registered host
    /// memory equals `value` (`cuStreamWaitValue32` with
    /// `CU_STREAM_WAIT_VALUE_EQ`).
    ///
    /// # Safety
    ///
    /// As [`MockDevice::write_value32`].
    pub unsafe fn wait_value32(&self, stream: &MockStream, addr: u64, value: u32) -> Result<()> {
        self.host_word(stream, addr, "cuStreamWaitValue32")?;
        self.dev.enter(Api::NotifyWait, None)?;
        // SAFETY: checked aligned and registered; kept so by the caller.
        let word = unsafe { HostWord::new(addr) };
        stream.push(Op::WaitWord { word, value });
        Ok(())
    }

    /// Queue `run` on `stream`: the stream's worker calls it once the work
    /// queued before it has run, and later work waits for it
    /// (`cuLaunchHostFunc`). A stream that is abandoned drops it uncalled.
    pub fn launch_host(
        &self,
        stream: &MockStream,
        run: impl FnOnce() + Send + 'static,
    ) -> Result<()> {
        self.dev.check_owner(&stream.dev, "stream", true)?;
        stream.push(Op::Host { run: Box::new(run) });
        Ok(())
    }
}
