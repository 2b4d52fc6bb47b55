//! Scenario remote-rendezvous: N member processes on 127.0.0.1 join a
//! group across hosts (`hal::remote::RemoteGroup`) over UCX's TCP
//! transport, timed from the first member's join call to the last
//! member's return, beside one TCP connection (connect + accept on
//! 127.0.0.1, `std::net`) measured in the same run, as a baseline of scale
//! only.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Instant;

use super::host::ns;
use super::peer::Peer;
use super::proto::{self, Cmd};
use super::remote::UCX_ENV;
use super::report::{summarize, Line};
use super::{one, Bench};
use crate::fail::{CmdResult, Fail};
use crate::stats::ratio;

/// TCP connections timed for the baseline, per group size.
const TCP_N: usize = 200;

/// A loopback address whose port was free a moment ago.
fn free_address() -> CmdResult<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| Fail::failed(format!("finding a free port on 127.0.0.1: {e}")))
}

/// `n` connections to a listener on 127.0.0.1, each timed from the
/// connect call to the accept's return.
fn tcp_connects(n: usize) -> CmdResult<Vec<u64>> {
    let io = |e: std::io::Error| Fail::failed(format!("a TCP connection on 127.0.0.1: {e}"));
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io)?;
    let at = listener.local_addr().map_err(io)?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        let client = TcpStream::connect(at).map_err(io)?;
        let (server, _) = listener.accept().map_err(io)?;
        times.push(ns(t0.elapsed()));
        drop((client, server));
    }
    Ok(times)
}

/// A secret for the run's groups: 32 hex digits.
fn secret() -> String {
    hal::kit::os::random_id()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Bench<'_> {
    /// remote-rendezvous of each of the plan's group sizes.
    pub(super) fn remote_rendezvous(&mut self) -> CmdResult {
        let placement = std::mem::replace(
            &mut self.printer.placement,
            "the members' processes placed by the kernel".into(),
        );
        let secret = secret();
        for &size in &self.plan.group_sizes.clone() {
            let mut members = Vec::with_capacity(size);
            for _ in 0..size {
                members.push(Peer::spawn_env(None, &UCX_ENV)?);
            }
            // The first group loads UCX in every member: a warm-up, discarded.
            let mut joins = Vec::new();
            for round in 0..=self.plan.remote_group_rounds {
                // The bench's own consumer idles meanwhile: an empty
                // command keeps it.
                self.peer.call(&Cmd::AddHandles {
                    clear: true,
                    texts: Vec::new(),
                })?;
                let at = free_address()?.to_string();
                let name = format!("halctl-bench-{}-{size}-{round}", std::process::id());
                for m in &members {
                    m.chan.send_json(
                        &Cmd::RemoteRendezvous {
                            at: at.clone(),
                            name: name.clone(),
                            size,
                            secret: secret.clone(),
                        },
                        &[],
                    )?;
                }
                let (mut first_call, mut last_return) = (u64::MAX, 0);
                for m in &members {
                    let (_, series) = proto::recv_reply(&m.chan, &m.who())?;
                    let [times] = one(series)?;
                    let [called, returned] = times[..] else {
                        return Err(Fail::failed("a member sent no join times"));
                    };
                    first_call = first_call.min(called);
                    last_return = last_return.max(returned);
                }
                if round > 0 {
                    joins.push(last_return.saturating_sub(first_call));
                }
            }
            for m in members {
                m.quit()?;
            }
            let tcp = summarize(tcp_connects(TCP_N)?);
            let hal = summarize(joins);
            let env: Vec<String> = UCX_ENV.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let mut line = Line::new(
                "remote-rendezvous",
                &self.backend,
                hal,
                Some((
                    "remote-rendezvous: one TCP connection on 127.0.0.1 (std::net connect + \
                     accept) in the same run, a baseline of scale only",
                    tcp,
                )),
            );
            line.config = Some(format!("members={size}"));
            line.importers = Some(size);
            line.note = Some(format!(
                "from the first member's RemoteGroup::join_at to the last member's return \
                 (each member makes its node in its join), {size} processes on 127.0.0.1 with \
                 {}; {:.0} TCP connections' time",
                env.join(" "),
                ratio(hal.p50_ns as f64, tcp.p50_ns as f64)
            ));
            self.printer.emit(line)?;
        }
        self.printer.placement = placement;
        Ok(())
    }
}
