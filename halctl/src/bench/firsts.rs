//! The consumer's side of import-first, import-first-persistent and
//! import-batch-16: first imports of fresh regions, interleaved with the
//! three baselines.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use hal::dynamic::DynDevice;
use hal::{ImportOptions, SharedHandle};

use super::baselines::{recv_import, shm_import};
use super::options::PROBE_MARKER;
use crate::fail::{CmdResult, Context, Fail};
use crate::raw::{self, RAW_MARKER};

/// What one command measures (see `Cmd::ImportFirst`).
pub struct Firsts<'a> {
    pub raw_socket: &'a str,
    pub shm_prefix: &'a str,
    pub size: u64,
    pub fresh_connection: bool,
    pub group: usize,
    pub queue: &'a OwnedFd,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

fn check(byte: u8, want: u8, what: &str) -> CmdResult {
    if byte != want {
        return Err(Fail::failed(format!("{what} read a wrong first byte")));
    }
    Ok(())
}

impl Firsts<'_> {
    /// Series hal, raw, named, received, in nanoseconds per handle.
    pub fn run(&self, dev: &dyn DynDevice, texts: &[String]) -> CmdResult<Vec<Vec<u64>>> {
        let group = self.group.max(1);
        let mut series: Vec<Vec<u64>> = (0..4).map(|_| Vec::new()).collect();
        // The raw baseline's connection, kept from import to import unless
        // each import makes its own (as hal's do then).
        let mut kept = None;
        for (g, chunk) in texts.chunks(group).enumerate() {
            if chunk.len() < group {
                break;
            }
            let first = g * group;
            // The order rotates, so that none always finds the caches warm.
            for step in 0..4 {
                let which = (g + step) % 4;
                let t = match which {
                    0 => self.hal(dev, chunk)?,
                    1 => self.each(chunk.len(), |_| {
                        let (t, b) = if self.fresh_connection {
                            raw::raw_import(self.raw_socket, self.size)?
                        } else {
                            raw::raw_import_kept(&mut kept, self.raw_socket, self.size)?
                        };
                        check(b, RAW_MARKER, "the raw baseline")?;
                        Ok(t)
                    })?,
                    2 => self.each(chunk.len(), |k| {
                        let (t, b) = shm_import(self.shm_prefix, first + k, self.size)?;
                        check(b, RAW_MARKER, "the named-region baseline")?;
                        Ok(t)
                    })?,
                    _ => self.each(chunk.len(), |_| {
                        let (t, b) = recv_import(self.queue, self.size)?;
                        check(b, RAW_MARKER, "the received-descriptor baseline")?;
                        Ok(t)
                    })?,
                };
                series[which].push(t / group as u64);
            }
        }
        Ok(series)
    }

    /// `n` baseline imports, their total time.
    fn each(&self, n: usize, mut one: impl FnMut(usize) -> CmdResult<Duration>) -> CmdResult<u64> {
        let mut total = 0;
        for k in 0..n {
            total += ns(one(k)?);
        }
        Ok(total)
    }

    /// Decode, import and touch every handle of `chunk`: one by one, or in
    /// one batch call; the total time.
    fn hal(&self, dev: &dyn DynDevice, chunk: &[String]) -> CmdResult<u64> {
        let decode = |t: &String| {
            hal::Handle::from_text(t)
                .map(SharedHandle::from)
                .map_err(|e| Fail::failed(format!("decoding a handle: {e}")))
        };
        if self.group <= 1 {
            if self.fresh_connection {
                // Untimed: the next import connects anew.
                hal::exchange::close_broker_connections();
            }
            let t0 = Instant::now();
            let m = dev
                .import_memory(decode(&chunk[0])?, &ImportOptions::default())
                .ctx("importing a region")?;
            let mut b = [0u8; 1];
            m.read(0, &mut b).ctx("first touch")?;
            let t = ns(t0.elapsed());
            check(b[0], PROBE_MARKER, "an import")?;
            return Ok(t);
        }
        let t0 = Instant::now();
        let shared = chunk.iter().map(decode).collect::<CmdResult<Vec<_>>>()?;
        let maps = dev.import_memory_batch(shared, &ImportOptions::default());
        let mut bytes = Vec::with_capacity(maps.len());
        let mut held = Vec::with_capacity(maps.len());
        for m in maps {
            let m = m.ctx("importing a region of the batch")?;
            let mut b = [0u8; 1];
            m.read(0, &mut b).ctx("first touch")?;
            bytes.push(b[0]);
            held.push(m);
        }
        let t = ns(t0.elapsed());
        drop(held);
        for b in bytes {
            check(b, PROBE_MARKER, "a batch import")?;
        }
        Ok(t)
    }
}
