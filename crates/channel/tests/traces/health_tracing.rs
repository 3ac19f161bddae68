//! Health checking (gRFC A17) in tracing events: a server without the health service is logged once (as
//! an error, A17), not once per connection; a backend that stops serving, and its return, are logged with
//! its address and the service.
//!
//! Runs alone, as every test of this binary does: `tracing` caches each callsite's interest, and a test
//! running in parallel that reaches the same callsite first, while this test installs its subscriber,
//! can leave the callsite disabled for it.

use grpc_test_support as support;

use std::time::Duration;

use grpc_channel::{Channel, Request};
use interop::health::ServingStatus;
use interop::server;
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::guards::guarded;
use support::h2_server::{handler, H2Server};
use support::tracing_capture;

const SVC: &str = "grpc.testing.TestService";

fn config() -> String {
    format!(
        r#"{{"healthCheckConfig":{{"serviceName":"{SVC}"}},
            "loadBalancingConfig":[{{"round_robin":{{}}}}]}}"#
    )
}

async fn call(ch: &Channel) {
    guarded(
        "unary call",
        ch.unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(SimpleRequest::default())),
    )
    .await
    .expect("the call succeeds");
}

#[tokio::test(start_paused = true)]
async fn health_is_traced_and_a_missing_health_service_is_logged_once() {
    let (capture, _installed) = tracing_capture::install().await;

    // No health service: the Watch is UNIMPLEMENTED on every connection; GOAWAY makes a second one.
    let bare = H2Server::tcp(
        support::h2_server::defaults,
        handler(|mut stream| async move {
            if stream.path == "/grpc.health.v1.Health/Watch" {
                stream.trailers_only("12", &[]);
            } else {
                stream.ok(b"");
            }
        }),
    )
    .await;
    let ch = support::channel_with_config(&bare.target(), config());
    call(&ch).await;
    bare.goaway();
    tokio::time::sleep(Duration::from_millis(100)).await;
    call(&ch).await;
    assert_eq!(bare.connections(), 2, "a second connection");
    assert_eq!(
        bare.opens_of("/grpc.health.v1.Health/Watch"),
        2,
        "a Watch on each"
    );
    let logged = capture.lines_containing("no health service");
    assert_eq!(logged.len(), 1, "logged once: {logged:#?}");
    assert!(logged[0].contains("level=ERROR"), "{}", logged[0]);
    assert!(
        logged[0].contains(&format!("addr={}", bare.addr())),
        "{}",
        logged[0]
    );

    // A backend that stops serving, and comes back.
    let a = server::start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("server");
    a.health().set(SVC, ServingStatus::Serving);
    let ch = support::channel_with_config(&format!("ipv4:{}", a.addr), config());
    call(&ch).await;
    a.health().set(SVC, ServingStatus::NotServing);
    tokio::time::sleep(Duration::from_millis(10)).await;
    a.health().set(SVC, ServingStatus::Serving);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let lines = capture.lines_containing("health check:");
    let addr = format!("addr={}", a.addr);
    let of_a: Vec<&String> = lines.iter().filter(|l| l.contains(&addr)).collect();
    assert_eq!(of_a.len(), 3, "serving, not serving, serving: {of_a:#?}");
    assert!(of_a[1].contains("not serving"), "{}", of_a[1]);
    assert!(
        of_a.iter().all(|l| l.contains(&format!("service={SVC}"))),
        "{of_a:#?}"
    );
}
