//! `grpc-bench --port PORT [--quick] [--out DIR]`: the benchmarks; measurements, never assertions.
//!
//! * Side by side: the same scenarios (unary at 1, 16, 64 and 256 in flight with client CPU per call and peak
//!   memory, 1 MiB unary, server streaming, pipelined bidi of 1 KiB messages) through three clients against
//!   one interop server (which `cargo xtask bench` runs in its own process): grpc-channel, tonic, and a raw h2
//!   client that does the least gRPC needs (the floor; its streams pack every ready message into one DATA
//!   frame, as tonic does). Each client gets the same HTTP/2 windows and TCP_NODELAY.
//! * Windowed bidi (`windowed.rs`): the three clients streaming as applications do, with 1, 8 or 64 messages
//!   outstanding, against the interop server and a tonic server (`grpc-bench tonic-server`,
//!   `tonic_server.rs`, which `cargo xtask bench` runs in its own process; `--tonic-port`).
//! * A6 (`a6.rs`), against backends in a child process (`grpc-bench backends`, `backends.rs`): what a
//!   configured but unused retry or hedging policy costs, hedging on a long tail against theory, 10 %
//!   failures under a retry policy, memory per in-flight call, and round_robin over 100 backends.
//! * Control plane (`control_plane.rs`): how long grpc-lb's policies take to bring 1,000 and 4,000
//!   endpoints READY, without I/O (`grpc-bench control-plane [--quick]` runs it alone, without servers).
//!
//! Repetitions (3, or 1 with `--quick`) interleave the clients or configurations; medians are reported.
//! Ratios are always grpc-channel's figure over the other client's (`1.20x tonic`), and each row says
//! which way is better: `↑` higher (rates), `↓` lower (latency, CPU, allocations, memory, system calls). The
//! `--only windowed` runs that scenario alone (for profiling; nothing is written). The tables print as
//! Markdown; with `--out DIR` they are also written as `bench.md` and `bench.json`, with the
//! hedging chart as `hedging.svg`.

mod a6;
mod backends;
mod clients;
mod control_plane;
mod report;
mod sys;
mod tonic_server;
mod windowed;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clients::{connect, small_request, Client};
use hdrhistogram::Histogram;
use interop_proto::{ResponseParameters, StreamingOutputCallRequest};
use report::{Line, Table};

mod measure;

/// What a closed loop of unary calls measured.
struct Loop {
    rate: f64,
    cpu_per_call: f64,
    allocations_per_call: f64,
    /// The most the live heap grew above its level at the start (sampled every millisecond).
    peak_heap_growth: i64,
    hist: Histogram<u64>,
}

/// `in_flight` tasks making `per_task` unary calls of `size` bytes each way: calls/s, client CPU per call
/// (µs) and latencies.
async fn unary_loop(
    client: &Client,
    in_flight: usize,
    per_task: usize,
    size: usize,
) -> Result<Loop, String> {
    let req = Arc::new(small_request(size));
    // Warm-up.
    for _ in 0..(per_task / 10).clamp(1, 200) {
        client.clone().unary(&req).await?;
    }
    let cpu = sys::cpu_time();
    let allocations = sys::allocations();
    let heap = sys::heap_live();
    let (stop_sampling, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let sampler = tokio::spawn(async move {
        let mut peak = 0;
        loop {
            peak = peak.max(sys::heap_live() - heap);
            tokio::select! {
                _ = &mut stopped => return peak,
                _ = tokio::time::sleep(std::time::Duration::from_millis(1)) => {}
            }
        }
    });
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..in_flight {
        let mut c = client.clone();
        let req = req.clone();
        handles.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
            for _ in 0..per_task {
                let t = Instant::now();
                c.unary(&req).await?;
                let _ = hist.record(t.elapsed().as_micros() as u64);
            }
            Ok::<_, String>(hist)
        }));
    }
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    for h in handles {
        let _ = hist.add(h.await.map_err(|e| e.to_string())??);
    }
    let calls = (in_flight * per_task) as f64;
    let elapsed = start.elapsed().as_secs_f64();
    let cpu_per_call = (sys::cpu_time() - cpu).as_secs_f64() * 1e6 / calls;
    let allocations_per_call = (sys::allocations() - allocations) as f64 / calls;
    let _ = stop_sampling.send(());
    let peak_heap_growth = sampler.await.map_err(|e| e.to_string())?;
    Ok(Loop {
        rate: calls / elapsed,
        cpu_per_call,
        allocations_per_call,
        peak_heap_growth,
        hist,
    })
}

/// grpc-channel, tonic and raw h2 side by side against the interop server, repetitions interleaved.
async fn side_by_side(port: u16, quick: bool) -> Result<Table, String> {
    let reps = if quick { 1 } else { 3 };
    let scale = if quick { 1 } else { 4 };
    let mut clients = Vec::new();
    for k in ["ours", "tonic", "raw"] {
        clients.push(connect(k, port).await?);
    }
    let mut lines: Vec<Line> = Vec::new();
    let mut line = |label: &str, unit, hib| {
        lines.push(Line::new(label, unit, hib));
        lines.len() - 1
    };
    let seq_rate = line("unary 16 B, 1 in flight: calls/s", "/s", true);
    let seq_p50 = line("  latency p50", "µs", false);
    let seq_p99 = line("  latency p99", "µs", false);
    let seq_cpu = line("  client CPU per call", "µs", false);
    let seq_allocs = line("  allocations per call", "", false);
    let mut conc = Vec::new();
    for n in [16, 64, 256] {
        conc.push((
            n,
            line(&format!("unary 16 B, {n} in flight: calls/s"), "/s", true),
            line("  client CPU per call", "µs", false),
        ));
    }
    let heap = line("  peak live heap growth at 256 in flight", "KiB", false);
    let big = line("unary 1 MiB each way", "MiB/s", true);
    let stream = line("server stream 10,000 × 64 B", "msgs/s", true);
    let bidi_rate = line("bidi 1 KiB messages, pipelined", "msgs/s", true);
    let bidi_cpu = line("  client CPU per message", "µs", false);
    for _ in 0..reps {
        for (i, c) in clients.iter_mut().enumerate() {
            let r = unary_loop(c, 1, 2500 * scale, 16).await?;
            lines[seq_rate].samples[i].push(r.rate);
            lines[seq_p50].samples[i].push(r.hist.value_at_quantile(0.5) as f64);
            lines[seq_p99].samples[i].push(r.hist.value_at_quantile(0.99) as f64);
            lines[seq_cpu].samples[i].push(r.cpu_per_call);
            lines[seq_allocs].samples[i].push(r.allocations_per_call);
            for &(n, rate, cpu) in &conc {
                let r = unary_loop(c, n, (40_000 * scale).div_ceil(n), 16).await?;
                lines[rate].samples[i].push(r.rate);
                lines[cpu].samples[i].push(r.cpu_per_call);
                if n == 256 {
                    lines[heap].samples[i].push(r.peak_heap_growth as f64 / 1024.0);
                }
            }
            let r = unary_loop(c, 1, 30 * scale, 1 << 20).await?;
            lines[big].samples[i].push(r.rate * 2.0);
            let req = StreamingOutputCallRequest {
                response_parameters: vec![
                    ResponseParameters {
                        size: 64,
                        ..Default::default()
                    };
                    10_000
                ],
                ..Default::default()
            };
            c.stream(&req).await?;
            let start = Instant::now();
            let mut n = 0;
            for _ in 0..scale {
                n += c.stream(&req).await?;
            }
            lines[stream].samples[i].push(n as f64 / start.elapsed().as_secs_f64());
            let messages = 20_000 * scale;
            c.bidi(1000).await?;
            let cpu = sys::cpu_time();
            let start = Instant::now();
            let got = c.bidi(messages).await?;
            if got != messages {
                return Err(format!("bidi: {got} of {messages} messages came back"));
            }
            lines[bidi_rate].samples[i].push(messages as f64 / start.elapsed().as_secs_f64());
            lines[bidi_cpu].samples[i]
                .push((sys::cpu_time() - cpu).as_secs_f64() * 1e6 / messages as f64);
        }
    }
    let mut table = Table::new(
        "grpc-channel, tonic and raw h2 side by side (one connection each, interop server in its own process)",
        &["grpc-channel", "tonic", "raw h2"],
    );
    table.rows = lines.iter().map(Line::row).collect();
    Ok(table)
}

async fn run(
    port: u16,
    tonic_port: Option<u16>,
    quick: bool,
    only: Option<&str>,
    out: Option<PathBuf>,
) -> Result<(), String> {
    let started = Instant::now();
    let mut tables = Vec::new();
    let mut report = |t: Table| {
        println!("\n{}", t.markdown());
        tables.push(t);
    };
    let mut peers = vec![("interop", port)];
    match tonic_port {
        Some(p) => peers.push(("tonic", p)),
        None => {
            eprintln!("grpc-bench: no --tonic-port: windowed bidi against the interop server only")
        }
    }
    if only.is_some_and(|o| o != "windowed") {
        return Err(format!("--only {only:?}: only `windowed` can run alone"));
    }
    if only.is_none() {
        report(side_by_side(port, quick).await?);
    }
    report(windowed::windowed(&peers, quick).await?);
    if only.is_some() {
        return Ok(());
    }
    let size = a6::Size::new(quick);
    report(a6::retry_cost(size).await?);
    let hedging = a6::hedging_tail(size).await?;
    let hedging_figures = (hedging.unhedged, hedging.hedged, hedging.delay);
    report(hedging.table);
    report(a6::failures(size).await?);
    for t in a6::scale(size).await? {
        report(t);
    }
    report(control_plane::scale(quick)?);
    println!(
        "ratios: grpc-channel's figure over the other client's; ↑ better: higher is better (rates), \
         ↓ better: lower is better (latency, CPU, allocations, memory, system calls). {} s in all.",
        started.elapsed().as_secs()
    );
    if let Some(dir) = out {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let meta = serde_json::json!({
            "quick": quick,
            "grpc_channel_version": env!("CARGO_PKG_VERSION"),
            "seconds": started.elapsed().as_secs(),
        });
        let json = dir.join("bench.json");
        report::write_json(&json, &tables, meta)?;
        let md = dir.join("bench.md");
        let text: Vec<String> = tables.iter().map(Table::markdown).collect();
        std::fs::write(&md, text.join("\n")).map_err(|e| format!("{}: {e}", md.display()))?;
        let svg = dir.join("hedging.svg");
        let (unhedged, hedged, delay) = hedging_figures;
        let theory = report::theory_curve(&unhedged, delay);
        report::hedging_chart(&svg, &unhedged, &hedged, &theory, delay)?;
        println!(
            "wrote {}, {} and {}",
            md.display(),
            json.display(),
            svg.display()
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("tonic-server") {
        return match tonic_server::serve() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("grpc-bench tonic-server: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.first().map(String::as_str) == Some("backends") {
        return match backends::serve(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("grpc-bench backends: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let quick = args.iter().any(|a| a == "--quick");
    if args.first().map(String::as_str) == Some("control-plane") {
        return match control_plane::scale(quick) {
            Ok(table) => {
                println!("{}", table.markdown());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("grpc-bench control-plane: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let value = |name: &str| {
        args.iter()
            .enumerate()
            .find_map(|(i, a)| match a.strip_prefix(&format!("--{name}=")) {
                Some(p) => Some(p.to_owned()),
                None if a == &format!("--{name}") => args.get(i + 1).cloned(),
                None => None,
            })
    };
    let port: Option<u16> = value("port").and_then(|p| p.parse().ok());
    let tonic_port: Option<u16> = value("tonic-port").and_then(|p| p.parse().ok());
    let only = value("only");
    let out = value("out").map(PathBuf::from);
    let Some(port) = port else {
        eprintln!(
            "usage: grpc-bench --port PORT [--tonic-port PORT] [--quick] [--only windowed] [--out DIR]"
        );
        eprintln!(
            "       grpc-bench --port PORT --measure SCENARIO --client ours|raw --n N [--current-thread]"
        );
        eprintln!("       grpc-bench backends --profile=P --count=N --seed=S");
        eprintln!("       grpc-bench control-plane [--quick]");
        eprintln!("       grpc-bench tonic-server");
        return ExitCode::from(2);
    };
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let measure = flag("--measure").map(|scenario| measure::Measure {
        scenario,
        client: flag("--client").unwrap_or_else(|| "ours".to_owned()),
        n: flag("--n").and_then(|n| n.parse().ok()).unwrap_or(1000),
    });
    // `--current-thread` (measurements only): one thread, so task interleaving, and with it the instruction
    // count under callgrind, is the same from run to run.
    let mut builder = if measure.is_some() && args.iter().any(|a| a == "--current-thread") {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("grpc-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match measure {
        Some(m) => runtime.block_on(measure::run(port, m)),
        None => runtime.block_on(run(port, tonic_port, quick, only.as_deref(), out)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("grpc-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
