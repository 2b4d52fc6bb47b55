//! Scenarios remote-read-bw, remote-read-lat, remote-notify-rtt and
//! remote-cold: hal across machines ([`hal::remote`]), between two bench
//! processes on the loopback address over UCX's TCP transport, against
//! UCX's own `ucx_perftest` run in the same run with the same transport
//! and sizes ([`perftest`](super::perftest)), in blocks that alternate.

use super::peer::Peer;
use super::perftest::{PerfRun, Perftest};
use super::proto::{self, Cmd};
use super::report::{summarize, Line};
use super::{one, Bench};
use crate::fail::{CmdResult, Fail};
use crate::stats::ratio;

/// The UCX environment of both hal processes and of `ucx_perftest`.
pub(super) const UCX_ENV: [(&str, &str); 2] = [("UCX_TLS", "tcp"), ("UCX_NET_DEVICES", "lo")];
/// The reads of remote-read-bw.
const BW_SIZE: u64 = 4 << 20;
/// The reads of remote-read-lat.
const LAT_SIZE: u64 = 8;

/// Every remote scenario, for `--only`.
pub(super) const REMOTE_SCENARIOS: [&str; 4] = [
    "remote-read-bw",
    "remote-read-lat",
    "remote-notify-rtt",
    "remote-cold",
];

/// The two hal processes: one serves memory, the other reads it; each has
/// a notify the other signals.
struct Pair {
    server: Peer,
    client: Peer,
}

impl Pair {
    fn start(backend: &str, device: u32) -> CmdResult<Pair> {
        let server = Peer::spawn_env(None, &UCX_ENV)?;
        let client = Peer::spawn_env(None, &UCX_ENV)?;
        server.open(backend, device)?;
        let (r, _) = server.call(&Cmd::RemoteServe { size: BW_SIZE })?;
        let text = r.text.unwrap_or_default();
        let (memory, notify) = text
            .split_once(' ')
            .ok_or_else(|| Fail::failed("the serving process sent no texts"))?;
        let (r, _) = client.call(&Cmd::RemoteJoin {
            memory: Some(memory.to_string()),
            notify: notify.to_string(),
        })?;
        server.call(&Cmd::RemoteJoin {
            memory: None,
            notify: r.text.unwrap_or_default(),
        })?;
        Ok(Pair { server, client })
    }

    fn reads(&self, len: u64, n: u32) -> CmdResult<Vec<u64>> {
        let (_, s) = self.client.call(&Cmd::RemoteRead { len, n })?;
        let [s] = one(s)?;
        Ok(s)
    }

    fn colds(&self, n: u32) -> CmdResult<Vec<u64>> {
        let (_, s) = self.client.call(&Cmd::RemoteCold { n })?;
        let [s] = one(s)?;
        Ok(s)
    }

    /// `rounds` round trips: the server answers, the client pings and
    /// times.
    fn pingpong(&self, rounds: u32) -> CmdResult<Vec<u64>> {
        self.server.chan.send_json(
            &Cmd::RemotePingPong {
                rounds,
                ping: false,
            },
            &[],
        )?;
        let timed = self
            .client
            .call(&Cmd::RemotePingPong { rounds, ping: true });
        let answered = proto::recv_reply(&self.server.chan, &self.server.who());
        let (_, s) = timed?;
        answered?;
        let [s] = one(s)?;
        Ok(s)
    }

    fn quit(self) -> CmdResult {
        self.client.quit()?;
        self.server.quit()
    }
}

/// What one remote scenario compares.
struct Spec {
    scenario: &'static str,
    /// The `ucx_perftest` test, and the factor its p50 is multiplied by
    /// to give what hal's samples measure.
    test: &'static str,
    size: u64,
    factor: f64,
    n: u32,
}

impl Bench<'_> {
    /// The remote scenarios asked for with `--only` (they run only then).
    pub(super) fn remote(&mut self) -> CmdResult {
        let ordinal = self.dev.info().ordinal;
        let pair = Pair::start(&self.backend, ordinal)?;
        let placement = std::mem::replace(
            &mut self.printer.placement,
            "the remote scenarios' two processes and ucx_perftest's placed by the kernel".into(),
        );
        let perftest = Perftest::find();
        let p = self.plan.clone();
        let specs = [
            Spec {
                scenario: "remote-read-bw",
                test: "ucp_get",
                size: BW_SIZE,
                factor: 1.0,
                n: p.remote_bw_n,
            },
            Spec {
                scenario: "remote-read-lat",
                test: "ucp_get",
                size: LAT_SIZE,
                factor: 1.0,
                n: p.remote_lat_n,
            },
            Spec {
                scenario: "remote-notify-rtt",
                test: "ucp_am_lat",
                size: LAT_SIZE,
                // ucx_perftest reports half of a ping-pong's round trip.
                factor: 2.0,
                n: p.remote_rtt_n,
            },
        ];
        for spec in &specs {
            if !self.wants(spec.scenario) {
                continue;
            }
            let sample = |pair: &Pair, n: u32| match spec.scenario {
                "remote-notify-rtt" => pair.pingpong(n),
                _ => pair.reads(spec.size, n),
            };
            // Warm-up, discarded.
            sample(&pair, (spec.n / 10).max(2))?;
            let mut hal = Vec::new();
            let mut runs: Vec<PerfRun> = Vec::new();
            for _ in 0..p.remote_blocks {
                self.keep_alive(&pair)?;
                hal.extend(sample(&pair, spec.n)?);
                if let Some(pt) = &perftest {
                    runs.push(pt.run(&UCX_ENV, spec.test, spec.size, spec.n, warmup(spec.n))?);
                }
            }
            self.remote_line(spec, hal, &runs, perftest.is_some())?;
        }
        if self.wants("remote-cold") {
            pair.colds(2)?;
            let mut cold = Vec::new();
            for _ in 0..p.remote_blocks {
                self.keep_alive(&pair)?;
                cold.extend(pair.colds(p.remote_cold_n)?);
            }
            let mut line = Line::new("remote-cold", &self.backend, summarize(cold), None);
            line.note = Some(format!(
                "absolute: a new connection to the served region (both sides prove the \
                 handle's secret) and its first read of 8 bytes, the node already made; \
                 ucx_perftest reports no connection time; {}",
                transport()
            ));
            self.printer.emit(line)?;
        }
        self.printer.placement = placement;
        pair.quit()
    }

    /// The bench's own consumer idles while the remote scenarios run, and
    /// the serving process while the reading one reads; each waits for a
    /// command at most [`PEER_TIMEOUT`](super::proto::PEER_TIMEOUT): an
    /// empty command between blocks keeps them.
    fn keep_alive(&self, pair: &Pair) -> CmdResult {
        for peer in [&self.peer, &pair.server] {
            peer.call(&Cmd::AddHandles {
                clear: true,
                texts: Vec::new(),
            })?;
        }
        Ok(())
    }

    fn remote_line(
        &mut self,
        spec: &Spec,
        hal: Vec<u64>,
        runs: &[PerfRun],
        installed: bool,
    ) -> CmdResult {
        let v = summarize(hal);
        let cmd = Perftest::command(&UCX_ENV, spec.test, spec.size, spec.n, warmup(spec.n));
        let what = match spec.scenario {
            "remote-read-bw" => format!(
                "reads of {} (RemoteMemory::read)",
                crate::out::bytes(spec.size)
            ),
            "remote-read-lat" => format!("reads of {} B (RemoteMemory::read)", spec.size),
            _ => "round trips of signals between two remote notifies (RemoteNotify::signal, \
                  RemoteExported::wait_signal driving the worker: nodes with a spin of 1 s, \
                  as ucx_perftest polls)"
                .to_string(),
        };
        if !installed {
            let mut line = Line::new(spec.scenario, &self.backend, v, None);
            line.note = Some(format!(
                "{what}; no baseline and no ratio: {} is not installed (package ucx-utils); \
                 {}",
                super::perftest::PROGRAM,
                transport()
            ));
            line.size_bytes = Some(spec.size);
            return self.printer.emit(line);
        }
        let base: Vec<u64> = runs
            .iter()
            .map(|r| (r.p50_us * spec.factor * 1000.0).round() as u64)
            .collect();
        let b = summarize(base);
        let halved = if spec.factor == 2.0 {
            " times two (it reports half a round trip)"
        } else {
            ""
        };
        let desc = format!(
            "{}: ucx_perftest's p50{halved}, one figure per run, each run alternating with a \
             block of hal's, same transport and size: {cmd}",
            spec.scenario
        );
        let mut line = Line::new(spec.scenario, &self.backend, v, Some((&desc, b)));
        line.note = Some(format!("{what}; {}", transport()));
        match spec.scenario {
            "remote-read-bw" => {
                let gbps = |t: u64| ratio(spec.size as f64, t as f64);
                let r = ratio(gbps(v.p50_ns), gbps(b.p50_ns));
                line.ratio_p50 = Some(r);
                line.ratio_iqm = Some(ratio(b.iqm_ns, v.iqm_ns));
                line.note = Some(format!(
                    "{:.2} GB/s vs ucx_perftest's {:.2} GB/s (ratio: hal's GB/s over its); {what}; \
                     {}",
                    gbps(v.p50_ns),
                    gbps(b.p50_ns),
                    transport()
                ));
                line.size_bytes = Some(spec.size);
                line = line.target("ratio_p50 >= 0.9", r >= 0.9);
            }
            "remote-read-lat" => {
                let r = line.ratio_p50.unwrap_or(f64::INFINITY);
                line.size_bytes = Some(spec.size);
                line = line.target("ratio_p50 <= 1.2", r <= 1.2);
            }
            _ => {
                let r = line.ratio_p50.unwrap_or(f64::INFINITY);
                line = line.target("ratio_p50 <= 1.3", r <= 1.3);
            }
        }
        self.printer.emit(line)
    }
}

/// ucx_perftest's warm-up iterations for `n` timed ones.
pub(super) fn warmup(n: u32) -> u32 {
    (n / 10).max(2)
}

/// How both sides ran.
pub(super) fn transport() -> String {
    let env: Vec<String> = UCX_ENV.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(
        "two processes on 127.0.0.1 placed by the kernel, {} for hal's and ucx_perftest's alike",
        env.join(" ")
    )
}
