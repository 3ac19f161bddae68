//! Client-side health checking (gRFC A17): a connection lost under a running health Watch, as the tracing
//! shows it. Runs alone, as every test of this binary does (tracing caches callsite interest; see `main.rs`).

use grpc_test_support as support;

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::Request;
use interop::health::ServingStatus;
use support::h2_server::{handler, H2Server};
use support::tracing_capture;

const SVC: &str = "grpc.testing.TestService";
const WATCH: &str = "/grpc.health.v1.Health/Watch";

/// Backend `b` answers SERVING on its Watch, then the whole server goes away (its connections drop).
/// A17: when the connection leaves READY the Watch is cancelled without awaiting its status; the loss of
/// the connection is a connectivity event, not a health one: no "not serving" event, no Watch restarted
/// on the dead connection.
#[tokio::test(start_paused = true)]
async fn a_lost_connection_is_not_a_health_failure() {
    let (capture, _installed) = tracing_capture::install().await;
    let good = interop::server::start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("server");
    good.health().set(SVC, ServingStatus::Serving);
    let b = H2Server::tcp(
        support::h2_server::defaults,
        handler(|mut stream| async move {
            if stream.path != WATCH {
                stream.ok(b"");
                return;
            }
            support::health_watch::answer_serving(stream).await;
        }),
    )
    .await;
    let ch = support::channel_with_config(
        &support::ipv4_target(&[good.addr, b.addr()]),
        format!(
            r#"{{"healthCheckConfig":{{"serviceName":"{SVC}"}},
                "loadBalancingConfig":[{{"round_robin":{{}}}}]}}"#
        ),
    );
    ch.connect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(ch.stats().not_serving_addresses.is_empty());
    let addr = format!("addr={}", b.addr());
    let before = capture.lines_containing("not serving").len();

    b.kill();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = ch
        .unary_raw(
            "/t.S/Unary",
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(1)),
        )
        .await;
    let lines: Vec<String> = capture
        .lines_containing("not serving")
        .into_iter()
        .skip(before)
        .filter(|l| l.contains(&addr))
        .collect();
    let failed: Vec<String> = capture
        .lines_containing("the health Watch failed")
        .into_iter()
        .filter(|l| l.contains(&addr))
        .collect();
    assert!(
        lines.is_empty() && failed.is_empty(),
        "the lost connection was reported as a health failure:\n{lines:#?}\n{failed:#?}"
    );
}
