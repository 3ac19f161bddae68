//! The chaos soak's sick-backend scenario (endpoint health: gRFC A17 health checking and A50 outlier
//! detection): four interop backends behind round_robin, one of them sick. The chaos server runs them
//! ([`start_backends`]); the chaos client drives unary calls through four channels, one per flavour
//! ([`run`]), and reports each flavour's success rate.
//!
//! The backends are `TestService` interop servers without injected faults, so the figures show the
//! balancing alone. Three are healthy: every `UnaryCall` succeeds and their health service says
//! [`SERVICE`] is SERVING. The sick one fails every `UnaryCall` with UNAVAILABLE and its health service says
//! NOT_SERVING. The flavours (all round_robin, no retry policy, so that a failure is what the balancer
//! chose):
//!
//! | flavour | service config | expected success rate |
//! |---|---|---|
//! | `none` | round_robin only | about 75 %: a quarter of the calls reach the sick backend |
//! | `health` | `healthCheckConfig` | 100 %: the sick backend is NOT_SERVING before the first call |
//! | `outlier` | `outlier_detection_experimental` (failure percentage, 100 ms interval) | about 99 %: the sick backend fails until the first sweep ejects it (`baseEjectionTime` 30 s outlasts the run) |
//! | `both` | both | 100 % |
//!
//! The checks: `none` between 60 % and 90 % (the sick backend must hurt, or the scenario proves nothing);
//! `health` and `both` at least 99.9 %; `outlier` at least 95 %. Each flavour runs for the same time with
//! the same number of calls in flight, on a fresh channel.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use grpc_channel::{Channel, Code, Request, Status};
use interop_proto::{paths, SimpleRequest, SimpleResponse};

use crate::health::ServingStatus;
use crate::server::{self, ServerHandle, ServerOptions};

/// The service the backends' health services report on, and the channels' `healthCheckConfig` names.
pub const SERVICE: &str = "grpc.testing.TestService";

/// How many calls each flavour keeps in flight.
const CONCURRENCY: usize = 16;

/// The lowest success rates (module docs).
const MIN_OK_HEALTH: f64 = 0.999;
const MIN_OK_OUTLIER: f64 = 0.95;
const OK_WITHOUT: std::ops::RangeInclusive<f64> = 0.60..=0.90;

/// The scenario's backends, served while this is kept: the healthy ones first, the sick one last.
pub struct Backends {
    servers: Vec<ServerHandle>,
}

impl Backends {
    /// Their ports, the sick backend's last.
    pub fn ports(&self) -> Vec<u16> {
        self.servers.iter().map(|s| s.addr.port()).collect()
    }
}

/// Starts three healthy backends and a sick one on loopback.
pub async fn start_backends() -> std::io::Result<Backends> {
    let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let mut servers = Vec::new();
    for _ in 0..3 {
        let s = server::start(any).await?;
        s.health().set(SERVICE, ServingStatus::Serving);
        servers.push(s);
    }
    let sick = server::start_with(
        any,
        ServerOptions::new()
            .fail_unary_calls(Status::new(Code::Unavailable, "this backend is sick")),
    )
    .await?;
    sick.health().set(SERVICE, ServingStatus::NotServing);
    servers.push(sick);
    Ok(Backends { servers })
}

/// The flavours: name, service config, and the success rate it must reach.
fn flavours() -> [(&'static str, String); 4] {
    let health = format!(r#""healthCheckConfig":{{"serviceName":"{SERVICE}"}},"#);
    let round_robin = r#"[{"round_robin":{}}]"#;
    let outlier = format!(
        r#"[{{"outlier_detection_experimental":{{"interval":"0.1s","baseEjectionTime":"30s",
            "maxEjectionPercent":50,"failurePercentageEjection":{{"threshold":50,
            "enforcementPercentage":100,"minimumHosts":3,"requestVolume":10}},
            "childPolicy":{round_robin}}}}}]"#
    );
    [
        (
            "none",
            format!(r#"{{"loadBalancingConfig":{round_robin}}}"#),
        ),
        (
            "health",
            format!(r#"{{{health}"loadBalancingConfig":{round_robin}}}"#),
        ),
        ("outlier", format!(r#"{{"loadBalancingConfig":{outlier}}}"#)),
        (
            "both",
            format!(r#"{{{health}"loadBalancingConfig":{outlier}}}"#),
        ),
    ]
}

/// One flavour's figures.
#[derive(Debug, Default)]
struct Figures {
    ok: AtomicU64,
    failed: AtomicU64,
    /// Failures other than the sick backend's UNAVAILABLE (there should be none).
    unexpected: AtomicU64,
}

/// Runs every flavour for `per_flavour` against the backends on `ports` (127.0.0.1, the sick one last),
/// prints a line per flavour and returns whether every check passed.
pub fn run(ports: &[u16], per_flavour: Duration) -> bool {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("chaos-client: cannot start a runtime: {e}");
            return false;
        }
    };
    let target = format!(
        "ipv4:{}",
        ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut passed = true;
    eprintln!(
        "sick backend: 4 backends (127.0.0.1:{} sick: UNAVAILABLE and NOT_SERVING), {CONCURRENCY} unary calls in flight, {} s per flavour",
        ports.last().copied().unwrap_or_default(),
        per_flavour.as_secs_f64()
    );
    for (name, config) in flavours() {
        let figures = runtime.block_on(flavour(&target, &config, per_flavour));
        let (ok, failed, unexpected) = (
            figures.ok.load(Ordering::Relaxed),
            figures.failed.load(Ordering::Relaxed),
            figures.unexpected.load(Ordering::Relaxed),
        );
        if ok + failed == 0 {
            eprintln!("sick backend: flavour={name}: no call ended");
            passed = false;
            continue;
        }
        let rate = ok as f64 / (ok + failed).max(1) as f64;
        let pass = unexpected == 0
            && match name {
                "none" => OK_WITHOUT.contains(&rate),
                "outlier" => rate >= MIN_OK_OUTLIER,
                _ => rate >= MIN_OK_HEALTH,
            };
        passed &= pass;
        println!(
            "sick backend: flavour={name:<7} calls={} ok={ok} failed={failed} unexpected={unexpected} success={:.2}% {}",
            ok + failed,
            rate * 100.0,
            if pass { "PASS" } else { "FAIL" },
        );
    }
    runtime.shutdown_timeout(Duration::from_secs(2));
    passed
}

/// One flavour: a fresh channel, [`CONCURRENCY`] workers calling for `duration`.
async fn flavour(target: &str, config: &str, duration: Duration) -> Figures {
    let figures = Arc::new(Figures::default());
    let channel = match Channel::builder(target)
        .default_service_config(config)
        .service_config_lookup(false)
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sick backend: cannot build the channel: {e}");
            return Figures::default();
        }
    };
    let end = Instant::now() + duration;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (channel, figures) = (channel.clone(), figures.clone());
        workers.spawn(async move {
            while Instant::now() < end {
                let request =
                    Request::new(SimpleRequest::default()).with_timeout(Duration::from_secs(5));
                match channel
                    .unary::<_, SimpleResponse>(paths::UNARY_CALL, request)
                    .await
                {
                    Ok(_) => figures.ok.fetch_add(1, Ordering::Relaxed),
                    Err(status) => {
                        let expected =
                            status.code() == Code::Unavailable && status.message().contains("sick");
                        if !expected && figures.unexpected.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("sick backend: unexpected failure: {status}");
                        }
                        figures.failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        });
    }
    while workers.join_next().await.is_some() {}
    channel.close();
    Arc::try_unwrap(figures).unwrap_or_else(|shared| Figures {
        ok: AtomicU64::new(shared.ok.load(Ordering::Relaxed)),
        failed: AtomicU64::new(shared.failed.load(Ordering::Relaxed)),
        unexpected: AtomicU64::new(shared.unexpected.load(Ordering::Relaxed)),
    })
}
