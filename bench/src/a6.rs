//! The A6 scenarios: what retries and hedging cost when nothing fails, what hedging buys on a long tail,
//! what a retry policy does under 10 % failures, and how the channel scales (10,000 calls in flight,
//! round_robin over 100 backends). Every scenario runs against [`Backends`] in their own process, so the
//! bench process's CPU time is the client's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use grpc_channel::{Channel, Request};
use hdrhistogram::Histogram;
use interop_proto::{paths, SimpleRequest, SimpleResponse};

use crate::backends::{Backends, Profile, TAIL};
use crate::report::{median, Row, Table};
use crate::sys;

/// How much work each scenario does.
#[derive(Clone, Copy)]
pub(crate) struct Size {
    /// Repetitions of each measurement (medians are reported).
    pub(crate) reps: usize,
    /// Calls per closed-loop measurement.
    pub(crate) calls: usize,
    /// Calls per open-loop phase of the hedging scenario.
    pub(crate) open_loop_calls: usize,
    /// Calls held in flight by the scale scenario.
    pub(crate) in_flight: usize,
}

impl Size {
    pub(crate) fn new(quick: bool) -> Size {
        if quick {
            Size {
                reps: 1,
                calls: 4_000,
                open_loop_calls: 3_000,
                in_flight: 2_000,
            }
        } else {
            Size {
                reps: 3,
                calls: 40_000,
                open_loop_calls: 10_000,
                in_flight: 10_000,
            }
        }
    }
}

fn channel(target: &str, service_config: &str) -> Result<Channel, String> {
    Channel::builder(target)
        .service_config_lookup(false)
        .default_service_config(service_config)
        .build()
        .map_err(|e| e.to_string())
}

const NO_POLICY: &str = r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#;

fn retry_policy(max_attempts: u32) -> String {
    format!(
        r#"{{"loadBalancingConfig":[{{"round_robin":{{}}}}],"methodConfig":[{{"name":[{{"service":"grpc.testing.TestService"}}],"retryPolicy":{{"maxAttempts":{max_attempts},"initialBackoff":"0.001s","maxBackoff":"0.01s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}}}]}}"#
    )
}

fn hedging_policy(max_attempts: u32, delay: Duration) -> String {
    format!(
        r#"{{"loadBalancingConfig":[{{"round_robin":{{}}}}],"methodConfig":[{{"name":[{{"service":"grpc.testing.TestService"}}],"hedgingPolicy":{{"maxAttempts":{max_attempts},"hedgingDelay":"{:.6}s"}}}}]}}"#,
        delay.as_secs_f64()
    )
}

async fn call(channel: &Channel) -> Result<(), grpc_channel::Status> {
    channel
        .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(SimpleRequest::default()))
        .await
        .map(|_| ())
}

/// What a closed loop measured.
struct Closed {
    cpu_per_call: Duration,
    ok: usize,
    calls: usize,
    latency: Histogram<u64>,
}

/// Some calls first: connections made, caches filled.
async fn warm_up(channel: &Channel, calls: usize) {
    for _ in 0..calls {
        let _ = call(channel).await;
    }
}

/// `in_flight` tasks making `calls` calls between them; client CPU per call, successes, latencies.
async fn closed_loop(channel: &Channel, in_flight: usize, calls: usize) -> Result<Closed, String> {
    let per_task = calls.div_ceil(in_flight);
    let cpu = sys::cpu_time();
    let mut tasks = Vec::new();
    for _ in 0..in_flight {
        let channel = channel.clone();
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3).expect("histogram");
            let mut ok = 0;
            for _ in 0..per_task {
                let t = Instant::now();
                if call(&channel).await.is_ok() {
                    ok += 1;
                }
                let _ = hist.record(t.elapsed().as_micros() as u64);
            }
            (ok, hist)
        }));
    }
    let mut latency = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let mut ok = 0;
    for t in tasks {
        let (n, h) = t.await.map_err(|e| e.to_string())?;
        ok += n;
        let _ = latency.add(h);
    }
    let total = per_task * in_flight;
    Ok(Closed {
        cpu_per_call: (sys::cpu_time() - cpu) / total as u32,
        ok,
        calls: total,
        latency,
    })
}

/// A6 when nothing fails: client CPU per call with no policy, a retryPolicy, and a hedgingPolicy whose delay
/// is never reached.
pub(crate) async fn retry_cost(size: Size) -> Result<Table, String> {
    let backends = Backends::spawn(Profile::Fast, 1, 1)?;
    let target = backends.target();
    let configs = [
        ("no policy", NO_POLICY.to_owned()),
        ("retryPolicy", retry_policy(5)),
        ("hedgingPolicy", hedging_policy(3, Duration::from_secs(10))),
    ];
    let mut table = Table::new(
        "A6 cost when nothing fails (grpc-channel, one backend, closed loop)",
        &[
            "no policy",
            "retryPolicy",
            "hedgingPolicy (delay never reached)",
        ],
    );
    for in_flight in [16, 64] {
        let mut samples = vec![Vec::new(); configs.len()];
        // Repetitions interleave the configurations, so drift hits each alike.
        for _ in 0..size.reps {
            for (i, (_, json)) in configs.iter().enumerate() {
                let ch = channel(&target, json)?;
                warm_up(&ch, 64).await;
                let r = closed_loop(&ch, in_flight, size.calls).await?;
                samples[i].push(r.cpu_per_call.as_secs_f64() * 1e6);
            }
        }
        let values: Vec<Option<f64>> = samples.iter().map(|s| Some(median(s))).collect();
        let base = values[0].unwrap_or(1.0);
        let ratios = values
            .iter()
            .skip(1)
            .map(|v| format!("{:+.1} %", (v.unwrap_or(0.0) / base - 1.0) * 100.0))
            .collect::<Vec<_>>()
            .join(", ");
        table.rows.push(Row {
            label: format!("client CPU per call, {in_flight} in flight"),
            unit: "µs",
            values,
            note: format!("vs no policy: {ratios}"),
        });
    }
    Ok(table)
}

/// Latencies of an open loop: one call started every `interval` whatever the others do, each timed from
/// its scheduled start (no coordinated omission).
async fn open_loop(
    channel: &Channel,
    calls: usize,
    interval: Duration,
) -> Result<Vec<u64>, String> {
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(calls);
    for i in 0..calls {
        let scheduled = start + interval * i as u32;
        tokio::time::sleep_until(scheduled).await;
        let channel = channel.clone();
        tasks.push(tokio::spawn(async move {
            let ok = call(&channel).await.is_ok();
            (ok, scheduled.elapsed().as_micros() as u64)
        }));
    }
    let mut out = Vec::with_capacity(calls);
    for t in tasks {
        let (ok, micros) = t.await.map_err(|e| e.to_string())?;
        if !ok {
            return Err("a call failed in the hedging scenario".into());
        }
        out.push(micros);
    }
    out.sort_unstable();
    Ok(out)
}

fn quantile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64
}

/// The quantile `q` of min(L1, delay + L2) for independent L1, L2 drawn from the unhedged sample: what
/// hedging after `delay` should give (the hedge goes to another backend; a third attempt is ignored).
pub(crate) fn hedged_quantile(unhedged: &[u64], delay: u64, q: f64) -> f64 {
    let n = unhedged.len() as f64;
    let survival = |t: u64| -> f64 {
        // P(L > t)
        let above = unhedged.len() - unhedged.partition_point(|&x| x <= t);
        above as f64 / n
    };
    let hedged_survival = |t: u64| -> f64 {
        let first = survival(t);
        if t < delay {
            first
        } else {
            first * survival(t - delay)
        }
    };
    let mut candidates: Vec<u64> = unhedged
        .iter()
        .copied()
        .chain(unhedged.iter().map(|x| x + delay))
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    candidates
        .into_iter()
        .find(|&t| hedged_survival(t) <= 1.0 - q)
        .unwrap_or(0) as f64
}

/// What the hedging scenario measured, for the table and the chart.
pub(crate) struct HedgingRun {
    pub(crate) table: Table,
    /// Sorted latencies (µs) without hedging, with hedging (last repetition).
    pub(crate) unhedged: Vec<u64>,
    pub(crate) hedged: Vec<u64>,
    /// The hedging delay used (µs).
    pub(crate) delay: u64,
}

/// Hedging on a long tail: 3 backends, lognormal around 1 ms with 2 % stragglers at 50 ms, open loop.
pub(crate) async fn hedging_tail(size: Size) -> Result<HedgingRun, String> {
    let mut backends = Backends::spawn(TAIL, 3, 42)?;
    let target = backends.target();
    let interval = Duration::from_micros(1000);
    let quantiles = [0.5, 0.99, 0.999];
    let mut plain: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut hedged: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut theory: Vec<Vec<f64>> = vec![Vec::new(); 3];
    let mut extra = Vec::new();
    let mut delays = Vec::new();
    let (mut last_plain, mut last_hedged) = (Vec::new(), Vec::new());
    for _ in 0..size.reps {
        let ch = channel(&target, NO_POLICY)?;
        for _ in 0..64 {
            let _ = call(&ch).await;
        }
        let sample = open_loop(&ch, size.open_loop_calls, interval).await?;
        let delay = quantile(&sample, 0.95) as u64;
        delays.push(delay as f64);
        let ch = channel(&target, &hedging_policy(3, Duration::from_micros(delay)))?;
        for _ in 0..64 {
            let _ = call(&ch).await;
        }
        backends.reset()?;
        let with = open_loop(&ch, size.open_loop_calls, interval).await?;
        let attempts = backends.requests()?;
        extra.push((attempts as f64 / size.open_loop_calls as f64 - 1.0) * 100.0);
        for (i, q) in quantiles.iter().enumerate() {
            plain[i].push(quantile(&sample, *q));
            hedged[i].push(quantile(&with, *q));
            theory[i].push(hedged_quantile(&sample, delay, *q));
        }
        last_plain = sample;
        last_hedged = with;
    }
    let mut table = Table::new(
        "Hedging on a long tail (3 backends: lognormal ~1 ms, 2 % at 50 ms; open loop, 1,000 calls/s)",
        &["no hedging", "hedging at p95", "theory (from the unhedged sample)"],
    );
    for (i, name) in ["p50", "p99", "p99.9"].iter().enumerate() {
        let (a, b, t) = (median(&plain[i]), median(&hedged[i]), median(&theory[i]));
        table.rows.push(Row {
            label: format!("latency {name}"),
            unit: "µs",
            values: vec![Some(a), Some(b), Some(t)],
            note: format!(
                "{:.1}x lower; {:+.0} % vs theory",
                a / b.max(1.0),
                (b / t.max(1.0) - 1.0) * 100.0
            ),
        });
    }
    table.rows.push(Row {
        label: "extra attempts".into(),
        unit: "%",
        values: vec![Some(0.0), Some(median(&extra)), None],
        note: format!("hedging delay {:.0} µs (the measured p95)", median(&delays)),
    });
    Ok(HedgingRun {
        table,
        unhedged: last_plain,
        hedged: last_hedged,
        delay: median(&delays) as u64,
    })
}

/// 10 % UNAVAILABLE: success rate, attempts per call and p99, with and without a retryPolicy.
pub(crate) async fn failures(size: Size) -> Result<Table, String> {
    let mut backends = Backends::spawn(Profile::Fail { p: 0.1 }, 3, 7)?;
    let target = backends.target();
    let configs = [
        ("no policy", NO_POLICY.to_owned()),
        ("retryPolicy", retry_policy(5)),
    ];
    let mut success = vec![Vec::new(); 2];
    let mut attempts = vec![Vec::new(); 2];
    let mut p99 = vec![Vec::new(); 2];
    for _ in 0..size.reps {
        for (i, (_, json)) in configs.iter().enumerate() {
            let ch = channel(&target, json)?;
            warm_up(&ch, 16).await;
            backends.reset()?;
            let r = closed_loop(&ch, 16, size.calls / 2).await?;
            let requests = backends.requests()?;
            success[i].push(r.ok as f64 / r.calls as f64 * 100.0);
            attempts[i].push(requests as f64 / r.calls as f64);
            p99[i].push(r.latency.value_at_quantile(0.99) as f64);
        }
    }
    let mut table = Table::new(
        "10 % UNAVAILABLE (3 backends, 16 in flight; retryPolicy: 5 attempts, backoff 1-10 ms)",
        &["no policy", "retryPolicy"],
    );
    let row = |label: &str, unit: &'static str, v: &[Vec<f64>], note: &str| Row {
        label: label.into(),
        unit,
        values: v.iter().map(|s| Some(median(s))).collect(),
        note: note.into(),
    };
    table.rows.push(row("success rate", "%", &success, ""));
    table.rows.push(row(
        "attempts per call",
        "",
        &attempts,
        "theory with retries: 1/(1-0.1) = 1.11",
    ));
    table.rows.push(row("latency p99", "µs", &p99, ""));
    Ok(table)
}

/// Memory per idle in-flight call (10,000 held by a server that never answers), against the raw h2
/// floor; and pick cost with round_robin over 100 backends against one.
pub(crate) async fn scale(size: Size) -> Result<Vec<Table>, String> {
    let ours = in_flight_memory(size.in_flight).await?;
    let raw = raw_in_flight_memory(size.in_flight).await?;
    let mut memory = Table::new(
        &format!(
            "Scale: {} idle calls in flight on one channel (live heap per call, the calls' tasks included)",
            size.in_flight
        ),
        &["grpc-channel", "raw h2"],
    );
    memory.rows.push(Row {
        label: "memory per idle in-flight call".into(),
        unit: "KiB",
        values: vec![Some(ours / 1024.0), Some(raw / 1024.0)],
        note: "target: <= 4 KiB".into(),
    });
    let mut cpu = vec![Vec::new(); 2];
    let one = Backends::spawn(Profile::Fast, 1, 3)?;
    let hundred = Backends::spawn(Profile::Fast, 100, 3)?;
    for _ in 0..size.reps {
        for (i, b) in [&one, &hundred].iter().enumerate() {
            let ch = channel(&b.target(), NO_POLICY)?;
            // Every subchannel READY before measuring.
            let _ = closed_loop(&ch, 16, 400).await?;
            warm_up(&ch, 16).await;
            let r = closed_loop(&ch, 16, size.calls).await?;
            cpu[i].push(r.cpu_per_call.as_secs_f64() * 1e6);
        }
    }
    let (a, b) = (median(&cpu[0]), median(&cpu[1]));
    let mut rr = Table::new(
        "Scale: round_robin over 1 and 100 backends (grpc-channel)",
        &["1 backend", "100 backends"],
    );
    let (p1, p100) = (pick_cost(1), pick_cost(100));
    rr.rows.push(Row {
        label: "one pick (grpc-lb Picker, no avoid list)".into(),
        unit: "ns",
        values: vec![Some(p1), Some(p100)],
        note: format!("100 vs 1: {:+.1} %", (p100 / p1 - 1.0) * 100.0),
    });
    let (h1, h100) = (hedge_pick_cost(1), hedge_pick_cost(100));
    rr.rows.push(Row {
        label: "one pick avoiding 2 used backends (a third hedge)".into(),
        unit: "ns",
        values: vec![Some(h1), Some(h100)],
        note: format!("100 vs 1: {:+.1} %", (h100 / h1 - 1.0) * 100.0),
    });
    rr.rows.push(Row {
        label: "client CPU per call, 16 in flight".into(),
        unit: "µs",
        values: vec![Some(a), Some(b)],
        note: format!(
            "100 vs 1: {:+.1} % (16 calls over 100 connections: fewer calls share each wake-up and write)",
            (b / a - 1.0) * 100.0
        ),
    });
    Ok(vec![memory, rr])
}

fn picker(backends: usize) -> grpc_lb::Picker<u32> {
    let list = (0..backends)
        .map(|i| {
            (
                grpc_lb::SubchannelId(i as u64),
                grpc_lb::Address::Tcp(std::net::SocketAddr::from((
                    [127, 0, 0, 1],
                    10_000 + i as u16,
                ))),
            )
        })
        .collect();
    grpc_lb::Picker::new(&grpc_lb::PickerSpec::Ready(list), |id| Some(id.0 as u32), 0)
}

/// Nanoseconds per pick with `backends` READY.
fn pick_cost(backends: usize) -> f64 {
    timed_picks(&picker(backends), &[])
}

/// Nanoseconds per pick that avoids two used backends, with `backends` READY.
fn hedge_pick_cost(backends: usize) -> f64 {
    let avoid = [
        grpc_lb::Address::Tcp(std::net::SocketAddr::from(([127, 0, 0, 1], 10_000))),
        grpc_lb::Address::Tcp(std::net::SocketAddr::from(([127, 0, 0, 1], 10_001))),
    ];
    timed_picks(&picker(backends), &avoid)
}

fn timed_picks(picker: &grpc_lb::Picker<u32>, avoid: &[grpc_lb::Address]) -> f64 {
    const N: u32 = 2_000_000;
    let request = grpc_lb::PickRequest::new(paths::UNARY_CALL).with_avoid(avoid);
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        for _ in 0..N {
            std::hint::black_box(picker.pick(std::hint::black_box(&request)));
        }
        best = best.min(start.elapsed().as_nanos() as f64 / f64::from(N));
    }
    best
}

/// Live heap bytes per call while `n` unary calls wait on a server that never answers.
pub(crate) async fn in_flight_memory(n: usize) -> Result<f64, String> {
    let mut backends = Backends::spawn(Profile::Hold, 1, 5)?;
    let ch = Channel::builder(backends.target())
        .service_config_lookup(false)
        .build()
        .map_err(|e| e.to_string())?;
    // The connection and the runtime's first allocations, before the baseline.
    let warm = (0..16)
        .map(|_| {
            let ch = ch.clone();
            tokio::spawn(async move {
                let _ = ch
                    .unary::<_, SimpleResponse>(
                        paths::UNARY_CALL,
                        Request::new(SimpleRequest::default())
                            .with_timeout(Duration::from_millis(200)),
                    )
                    .await;
            })
        })
        .collect::<Vec<_>>();
    for w in warm {
        let _ = w.await;
    }
    held_calls(&mut backends, n, || {
        let ch = ch.clone();
        async move {
            let _ = ch
                .unary::<_, SimpleResponse>(
                    paths::UNARY_CALL,
                    Request::new(SimpleRequest::default()),
                )
                .await;
        }
    })
    .await
}

/// Live heap bytes per call while `n` calls made by `call` wait on `backends` (which never answer): the
/// heap grown once the backends have seen them all, over `n`.
async fn held_calls<F, Fut>(backends: &mut Backends, n: usize, call: F) -> Result<f64, String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    backends.reset()?;
    let before = sys::heap_live();
    let calls: Vec<_> = (0..n).map(|_| tokio::spawn(call())).collect();
    wait_for_requests(backends, n as u64).await?;
    let after = sys::heap_live();
    for c in &calls {
        c.abort();
    }
    // Freed before the next measurement starts (an aborted task is dropped when it is next polled).
    for c in calls {
        let _ = c.await;
    }
    Ok((after - before).max(0) as f64 / n as f64)
}

/// Waits (up to 60 s) until the backends have received `n` calls.
pub(crate) async fn wait_for_requests(backends: &mut Backends, n: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = backends.requests()?;
        if seen >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("only {seen} of {n} calls reached the server"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Live heap bytes per call while `n` raw h2 calls wait on a server that never answers (the floor).
pub(crate) async fn raw_in_flight_memory(n: usize) -> Result<f64, String> {
    let mut backends = Backends::spawn(Profile::Hold, 1, 6)?;
    let addr = backends.addrs[0];
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(16 << 20)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let authority = Arc::new(
        http::uri::Authority::try_from(addr.to_string().as_str()).map_err(|e| e.to_string())?,
    );
    held_calls(&mut backends, n, || {
        let (mut send, authority) = (send.clone(), authority.clone());
        async move {
            let _ = crate::clients::raw_call(
                &mut send,
                &authority,
                paths::UNARY_CALL,
                &SimpleRequest::default(),
            )
            .await;
        }
    })
    .await
}
