//! The consumer's side of scenario cuda-notify-rtt ([`super::cuda_rtt`]):
//! the round trips queued on a stream of its GPU.

use std::os::fd::OwnedFd;
use std::thread::JoinHandle;

use hal::cuda::CudaBackend;
use hal::{Backend, Device, Handle, ImportOptions, SharedHandle};

use super::proto::PEER_TIMEOUT;
use super::spin::SpinPair;
use crate::fail::{CmdResult, Context, Fail};

/// The consumer's side: queue the round trips of `plan` on a stream of
/// its GPU, hal's on the notifies of the first two listed handles, the
/// bare ones on the words of the page `fd`; a thread queues them (a full
/// stream blocks the queuing call until the exporter's pings drain it) and
/// then waits until the stream ran them all.
pub(super) fn arm(
    ordinal: u32,
    handles: &[String],
    fd: OwnedFd,
    plan: Vec<bool>,
) -> CmdResult<JoinHandle<CmdResult>> {
    let [ping_text, pong_text] = handles else {
        return Err(Fail::failed("cuda-notify-rtt takes two notify handles"));
    };
    let cuda = CudaBackend::new()
        .open(ordinal)
        .ctx("opening the CUDA device")?;
    let import = |text: &str| -> CmdResult<_> {
        let handle = Handle::from_text(text)
            .map_err(|e| Fail::failed(format!("decoding a notify handle: {e}")))?;
        cuda.import_notify(SharedHandle::from(handle), &ImportOptions::default())
            .ctx("importing a notify")
    };
    let (ping, pong) = (import(ping_text)?, import(pong_text)?);
    let words = SpinPair::open(&fd)?;
    let (ptr, len) = words.page();
    // SAFETY: the page stays mapped as long as `words`, which the thread
    // below drops after the registration.
    let reg = unsafe { cuda.register_host(ptr, len as u64) }.ctx("registering the words' page")?;
    let (ping_at, pong_at) = SpinPair::word_addrs(hal::Memory::addr(&reg));
    let stream = cuda.create_stream().ctx("creating a stream")?;
    std::thread::Builder::new()
        .name("halctl-rtt-queue".into())
        .spawn(move || {
            let mut round = 0u32;
            for hal in plan {
                if hal {
                    cuda.stream_wait_notify(&stream, &ping, None)
                        .ctx("queuing the wait for ping")?;
                    cuda.record_notify(&stream, &pong)
                        .ctx("queuing the record of pong")?;
                } else {
                    round += 1;
                    // SAFETY: the words are in the page registered above,
                    // which stays registered and mapped until the stream
                    // is synchronized below.
                    unsafe {
                        cuda.bare_stream_wait_value32(&stream, ping_at, round)
                            .ctx("queuing a bare wait")?;
                        cuda.bare_stream_write_value32(&stream, pong_at, round)
                            .ctx("queuing a bare write")?;
                    }
                }
            }
            cuda.synchronize(&stream, Some(PEER_TIMEOUT))
                .ctx("waiting for the round trips")?;
            drop(stream);
            drop(reg);
            drop(words);
            Ok(())
        })
        .map_err(|e| Fail::failed(format!("starting the queuing thread: {e}")))
}

/// The consumer's end of the scenario: the queuing thread's result.
pub(super) fn done(queued: Option<JoinHandle<CmdResult>>) -> CmdResult {
    queued
        .ok_or_else(|| Fail::failed("cuda-notify-rtt was not armed"))?
        .join()
        .map_err(|_| Fail::failed("the queuing thread panicked"))?
}
