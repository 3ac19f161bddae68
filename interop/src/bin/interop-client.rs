//! The interop client with the standard flags (`shared/spec/interop.md`). Prints one line per case as it
//! finishes (`name: passed` or `name: failed: reason`), then `N passed, N failed`; exits non-zero on any
//! failure.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use grpc_channel::Channel;
use interop::client::{self, Context, SoakConfig, ALL_CASES};
use interop::flags::Flags;

const FLAGS: &[&str] = &[
    "server_host",
    "server_port",
    "server_host_override",
    "test_case",
    "use_tls",
    "use_test_ca",
    "service_config_json",
    "additional_metadata",
    "skip",
    "soak_iterations",
    "soak_max_failures",
    "soak_per_iteration_max_acceptable_latency_ms",
    "soak_overall_timeout_seconds",
    "soak_min_time_ms_between_rpcs",
    "soak_request_size",
    "soak_response_size",
    "soak_num_threads",
];

fn parse_metadata(spec: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in spec.split(';').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once(':')
            .ok_or_else(|| format!("--additional_metadata: {pair:?} has no ':'"))?;
        let mut probe = grpc_channel::MetadataMap::new();
        probe
            .append(k, v)
            .map_err(|e| format!("--additional_metadata: {e}"))?;
        out.push((k.to_owned(), v.to_owned()));
    }
    Ok(out)
}

fn setup() -> Result<(Context, Vec<String>, Vec<String>), String> {
    let flags = Flags::parse(std::env::args().skip(1), FLAGS)?;
    if flags.bool("use_tls", false)? {
        return Err("--use_tls=true is not supported yet: TLS has its own work item".to_owned());
    }
    let _ = flags.bool("use_test_ca", false)?;
    let host = flags.str("server_host").unwrap_or("localhost").to_owned();
    let port: u16 = flags.num("server_port", 0)?;
    if port == 0 {
        return Err("--server_port is required".to_owned());
    }
    let target = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let authority = flags
        .str("server_host_override")
        .filter(|h| !h.is_empty())
        .map(|h| format!("{h}:{port}"));
    let mut builder = Channel::builder(target.clone());
    if let Some(a) = &authority {
        builder = builder.authority(a.clone());
    }
    // The standard meaning: no service config lookup, and this JSON as the default config.
    if let Some(json) = flags.str("service_config_json").filter(|j| !j.is_empty()) {
        builder = builder
            .service_config_lookup(false)
            .default_service_config(json);
    }
    let channel = builder.build().map_err(|e| e.to_string())?;
    let iterations: u32 = flags.num("soak_iterations", SoakConfig::default().iterations)?;
    let max_latency_ms: u64 = flags.num("soak_per_iteration_max_acceptable_latency_ms", 1000)?;
    let soak = SoakConfig {
        iterations,
        max_failures: flags.num("soak_max_failures", 0)?,
        max_latency: Duration::from_millis(max_latency_ms),
        overall_timeout: Duration::from_secs(
            flags.num(
                "soak_overall_timeout_seconds",
                (max_latency_ms * u64::from(iterations))
                    .div_ceil(1000)
                    .max(10),
            )?,
        ),
        min_time_between: Duration::from_millis(flags.num("soak_min_time_ms_between_rpcs", 0)?),
        request_size: flags.num("soak_request_size", 271_828)?,
        response_size: flags.num("soak_response_size", 314_159)?,
        threads: flags.num("soak_num_threads", 1)?,
    };
    let metadata = parse_metadata(flags.str("additional_metadata").unwrap_or(""))?;
    let cases: Vec<String> = match flags.str("test_case").unwrap_or("all") {
        "all" => ALL_CASES.iter().map(|s| s.to_string()).collect(),
        list => list
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
    };
    for c in &cases {
        if !ALL_CASES.contains(&c.as_str()) {
            return Err(format!(
                "unknown test case {c:?}; known: all, {}",
                ALL_CASES.join(", ")
            ));
        }
    }
    let skip: Vec<String> = flags
        .str("skip")
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let ctx = Context {
        channel,
        target,
        authority,
        metadata,
        soak,
    };
    Ok((ctx, cases, skip))
}

#[tokio::main]
async fn main() -> ExitCode {
    let (ctx, cases, skip) = match setup() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("interop-client: {e}");
            return ExitCode::from(2);
        }
    };
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for case in &cases {
        if skip.contains(case) {
            println!("{case}: skipped");
            skipped += 1;
            continue;
        }
        let start = Instant::now();
        let result =
            tokio::time::timeout(Duration::from_secs(120), client::run_case(&ctx, case)).await;
        let ms = start.elapsed().as_millis();
        match result {
            Ok(Ok(())) => {
                passed += 1;
                println!("{case}: passed ({ms} ms)");
            }
            Ok(Err(reason)) => {
                failed += 1;
                println!("{case}: failed: {reason}");
            }
            Err(_) => {
                failed += 1;
                println!("{case}: failed: did not finish within 120 s");
            }
        }
    }
    if skipped > 0 {
        println!("{passed} passed, {failed} failed, {skipped} skipped");
    } else {
        println!("{passed} passed, {failed} failed");
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
