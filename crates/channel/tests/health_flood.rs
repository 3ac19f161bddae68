//! Client-side health checking (gRFC A17) under a flood: a backend whose Watch sends millions of status
//! changes as fast as flow control allows. Alone in its test binary: it reads the process's peak memory
//! (VmHWM), which other tests running beside it would raise.

use grpc_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use interop::health::ServingStatus;
use interop::server;
use support::h2_server::{handler, H2Server};

const WATCH: &str = "/grpc.health.v1.Health/Watch";
const SVC: &str = "grpc.testing.TestService";

fn rr_health(service: &str) -> String {
    format!(
        r#"{{"healthCheckConfig":{{"serviceName":"{service}"}},"loadBalancingConfig":[{{"round_robin":{{}}}}]}}"#
    )
}

fn vm_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("a VmHWM line")
}

/// A backend whose Watch sends 3 million status flips (SERVING, NOT_SERVING, ... ending NOT_SERVING, 21 MB
/// of 7-byte messages) as fast as flow control lets it, then holds the stream open. The control plane must
/// not buffer what the Watch reads faster than it applies: its memory stays flat and it shows the final
/// status.
///
/// Measures the peak RSS growth and how long the control plane takes to show the final status. Real time,
/// two worker threads (the channel's tasks run in parallel, as in an application). With one event per
/// answer the backlog grew about 75 bytes per answer (3 M flips: +221 MiB); with one slot per watch it
/// stays flat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_status_flips_keeps_memory_flat() {
    const FLIPS: usize = 3_000_000;
    const PER_CHUNK: usize = 10_000;
    let good = server::start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("server");
    good.health().set(SVC, ServingStatus::Serving);
    let sent = Arc::new(AtomicUsize::new(0));
    let sent2 = sent.clone();
    let flood = H2Server::tcp(
        support::h2_server::defaults,
        handler(move |mut stream| {
            let sent = sent2.clone();
            async move {
                if stream.path != WATCH {
                    stream.ok(b"");
                    return;
                }
                let _ = stream.read_to_end().await;
                let Some(mut send) = stream.headers() else {
                    return;
                };
                let mut chunk = Vec::with_capacity(PER_CHUNK * 7);
                for i in 0..PER_CHUNK {
                    let status = if i % 2 == 0 { 1u8 } else { 2u8 };
                    chunk.extend_from_slice(&[0, 0, 0, 0, 2, 8, status]);
                }
                let chunk = Bytes::from(chunk);
                for _ in 0..FLIPS / PER_CHUNK {
                    send.reserve_capacity(chunk.len());
                    while send.capacity() < chunk.len() {
                        match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
                            Some(Ok(_)) => {}
                            _ => return,
                        }
                    }
                    if send.send_data(chunk.clone(), false).is_err() {
                        return;
                    }
                    sent.fetch_add(PER_CHUNK, Ordering::SeqCst);
                }
                let _ = std::future::poll_fn(|cx| send.poll_reset(cx)).await;
            }
        }),
    )
    .await;
    let ch = support::channel_with_config(
        &support::ipv4_target(&[good.addr, flood.addr()]),
        rr_health(SVC),
    );
    let hwm_before = vm_kib("VmHWM:");
    let start = std::time::Instant::now();
    ch.connect();
    let mut all_sent_at = None;
    let mut caught_up_at = None;
    let mut max_rss = 0;
    for _ in 0..6000 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        max_rss = max_rss.max(vm_kib("VmRSS:"));
        if all_sent_at.is_none() && sent.load(Ordering::SeqCst) == FLIPS {
            all_sent_at = Some(start.elapsed());
        }
        if all_sent_at.is_some() && ch.stats().not_serving_addresses == [flood.addr().to_string()] {
            // The final status shows (it may show mid-flood too: check it stays).
            tokio::time::sleep(Duration::from_millis(200)).await;
            if ch.stats().not_serving_addresses == [flood.addr().to_string()] {
                caught_up_at = Some(start.elapsed());
                break;
            }
        }
    }
    let hwm_after = vm_kib("VmHWM:");
    eprintln!(
        "flood: all {FLIPS} flips sent at {all_sent_at:?}, control plane caught up at {caught_up_at:?}; \
         VmHWM {hwm_before} KiB -> {hwm_after} KiB (+{} MiB), max RSS sampled {} MiB",
        (hwm_after - hwm_before) / 1024,
        max_rss / 1024
    );
    assert!(caught_up_at.is_some(), "the control plane never caught up");
    let grown_mib = (hwm_after - hwm_before) / 1024;
    assert!(
        grown_mib < 64,
        "the process grew by {grown_mib} MiB while a backend sent 21 MB of health answers: the control \
         plane's unbounded queue buffers what the Watch reads faster than the loop applies it"
    );
}
