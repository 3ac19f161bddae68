//! Client-side health checking (gRFC A17) end to end, on tokio's paused clock: round_robin with the service
//! config's `healthCheckConfig` over loopback interop servers, whose health service (`grpc.health.v1`) a
//! test switches through their handles; a scriptable h2 server for a Watch that fails; a DNS server on
//! loopback for config changes. Which backend served a call is what `fill_server_id` answers.

mod support;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use grpc_channel::{Channel, Code, Request, ResolverOptions, Status};
use interop::dns::TestDns;
use interop::health::ServingStatus;
use interop::server::{self, ServerHandle, ServerOptions};
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use prost::Message;
use support::guards::guarded;
use support::h2_server::{handler, H2Server};

const SVC: &str = "grpc.testing.TestService";

fn config(service: &str) -> String {
    format!(
        r#"{{"healthCheckConfig":{{"serviceName":"{service}"}},
            "loadBalancingConfig":[{{"round_robin":{{}}}}]}}"#
    )
}

async fn backend() -> ServerHandle {
    server::start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("server")
}

async fn serving(service: &str) -> ServerHandle {
    let server = backend().await;
    server.health().set(service, ServingStatus::Serving);
    server
}

fn channel(servers: &[&ServerHandle], config: &str) -> Channel {
    let addrs: Vec<SocketAddr> = servers.iter().map(|s| s.addr).collect();
    support::channel_with_config(&support::ipv4_target(&addrs), config)
}

/// One call; which server answered it.
async fn call(ch: &Channel) -> Result<String, Status> {
    let request = SimpleRequest {
        fill_server_id: true,
        ..SimpleRequest::default()
    };
    guarded(
        "unary call",
        ch.unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(request)),
    )
    .await
    .map(|r| r.into_inner().server_id)
}

/// `n` calls, which must all succeed: how many each server answered.
async fn spread(ch: &Channel, n: usize) -> HashMap<String, usize> {
    let mut served = HashMap::new();
    for _ in 0..n {
        let id = call(ch).await.expect("the call succeeds");
        *served.entry(id).or_insert(0) += 1;
    }
    served
}

/// Waits (on the paused clock, at most 10 s) until the stats list exactly `expected` as not serving.
async fn until_not_serving(ch: &Channel, expected: &[SocketAddr]) {
    let expected: Vec<String> = expected.iter().map(ToString::to_string).collect();
    for _ in 0..10_000 {
        if ch.stats().not_serving_addresses == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!(
        "not serving: {:?}, expected {expected:?}",
        ch.stats().not_serving_addresses
    );
}

fn id(server: &ServerHandle) -> String {
    server.addr.to_string()
}

#[tokio::test(start_paused = true)]
async fn a_backend_not_serving_gets_no_calls_until_it_serves_again() {
    let (a, b, c) = (serving(SVC).await, serving(SVC).await, serving(SVC).await);
    let ch = channel(&[&a, &b, &c], &config(SVC));
    let served = spread(&ch, 30).await;
    assert_eq!(served.len(), 3, "all three serve: {served:?}");
    for server in [&a, &b, &c] {
        assert_eq!(server.health().watchers(SVC), 1, "one Watch per backend");
    }

    b.health().set(SVC, ServingStatus::NotServing);
    until_not_serving(&ch, &[b.addr]).await;
    let served = spread(&ch, 60).await;
    assert_eq!(
        served.get(&id(&b)),
        None,
        "no call reaches the backend that is not serving: {served:?}"
    );
    assert_eq!(served.len(), 2);
    assert_eq!(
        b.health().watchers(SVC),
        1,
        "its connection and its Watch are kept"
    );

    b.health().set(SVC, ServingStatus::Serving);
    until_not_serving(&ch, &[]).await;
    let served = spread(&ch, 30).await;
    assert_eq!(served.len(), 3, "back in the rotation: {served:?}");
    assert_eq!(ch.stats().calls_failed, 0);
}

#[tokio::test(start_paused = true)]
async fn service_unknown_is_not_serving_and_the_empty_name_checks_the_whole_server() {
    // `b` has never heard of the service: its Watch says SERVICE_UNKNOWN.
    let (a, b) = (serving(SVC).await, backend().await);
    let ch = channel(&[&a, &b], &config(SVC));
    ch.connect();
    until_not_serving(&ch, &[b.addr]).await;
    let served = spread(&ch, 20).await;
    assert_eq!(served.get(&id(&a)), Some(&20), "{served:?}");
    // A status it learns later follows on the same Watch.
    b.health().set(SVC, ServingStatus::Serving);
    until_not_serving(&ch, &[]).await;
    assert_eq!(spread(&ch, 20).await.len(), 2);

    // "" is the server as a whole, SERVING on the interop server.
    let ch = channel(&[&a, &b], &config(""));
    assert_eq!(spread(&ch, 20).await.len(), 2);
    assert_eq!(b.health().watchers(""), 1);
}

#[tokio::test(start_paused = true)]
async fn a_server_without_the_health_service_stays_in_rotation() {
    let a = serving(SVC).await;
    let b = server::start_with(
        "127.0.0.1:0".parse().expect("addr"),
        ServerOptions::new().without_health_service(),
    )
    .await
    .expect("server");
    let ch = channel(&[&a, &b], &config(SVC));
    let served = spread(&ch, 20).await;
    assert_eq!(
        served.len(),
        2,
        "UNIMPLEMENTED counts as healthy: {served:?}"
    );
    assert!(ch.stats().not_serving_addresses.is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_application_can_turn_health_checking_off() {
    let (a, b) = (serving(SVC).await, serving(SVC).await);
    b.health().set(SVC, ServingStatus::NotServing);
    let ch = Channel::builder(support::ipv4_target(&[a.addr, b.addr]))
        .default_service_config(config(SVC))
        .service_config_lookup(false)
        .health_checks(false)
        .build()
        .expect("channel");
    let served = spread(&ch, 20).await;
    assert_eq!(served.len(), 2, "health is not checked: {served:?}");
    assert_eq!(b.health().watchers(SVC), 0, "no Watch");
}

#[tokio::test(start_paused = true)]
async fn pick_first_does_not_health_check() {
    let a = serving(SVC).await;
    a.health().set(SVC, ServingStatus::NotServing);
    let ch = channel(
        &[&a],
        &format!(
            r#"{{"healthCheckConfig":{{"serviceName":"{SVC}"}},
                "loadBalancingConfig":[{{"pick_first":{{}}}}]}}"#
        ),
    );
    assert_eq!(spread(&ch, 5).await.get(&id(&a)), Some(&5));
    assert_eq!(a.health().watchers(SVC), 0);
}

#[tokio::test(start_paused = true)]
async fn the_only_backend_not_serving_fails_calls_as_unavailable_and_wait_for_ready_waits() {
    let a = serving(SVC).await;
    a.health().set(SVC, ServingStatus::NotServing);
    let ch = channel(&[&a], &config(SVC));
    ch.connect();
    until_not_serving(&ch, &[a.addr]).await;
    let status = call(&ch).await.expect_err("no backend serves");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("health"),
        "the status names the health check: {status:?}"
    );
    let waiting = {
        let ch = ch.clone();
        tokio::spawn(async move {
            let request = SimpleRequest {
                fill_server_id: true,
                ..SimpleRequest::default()
            };
            ch.unary::<_, SimpleResponse>(
                paths::UNARY_CALL,
                Request::new(request).with_wait_for_ready(true),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "a wait-for-ready call waits");
    a.health().set(SVC, ServingStatus::Serving);
    let response = guarded("wait-for-ready call", waiting)
        .await
        .expect("joined")
        .expect("served once the backend serves");
    assert_eq!(response.into_inner().server_id, id(&a));
}

/// The Watch opens on a scriptable server: the first two end UNAVAILABLE before any answer, the third
/// answers SERVING and is then reset by the server, the fourth answers SERVING and stays open. Calls go to
/// the same server.
#[tokio::test(start_paused = true)]
async fn a_failed_watch_is_restarted_with_backoff_and_at_once_after_an_answer() {
    let watch_starts: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
    let starts = watch_starts.clone();
    let server = H2Server::tcp(
        support::h2_server::defaults,
        handler(move |mut stream| {
            let starts = starts.clone();
            async move {
                if stream.path != "/grpc.health.v1.Health/Watch" {
                    stream.ok(b"");
                    return;
                }
                let n = {
                    let mut starts = starts.lock().expect("lock");
                    starts.push(tokio::time::Instant::now());
                    starts.len()
                };
                let _ = stream.read_to_end().await;
                if n <= 2 {
                    stream.trailers_only("14", &[("grpc-message", "not yet")]);
                    return;
                }
                let Some(mut send) = stream.headers() else {
                    return;
                };
                let serving = interop_proto::grpc_health_v1::HealthCheckResponse {
                    status: ServingStatus::Serving as i32,
                };
                let _ = send.send_data(
                    support::frames::grpc_message(&serving.encode_to_vec()),
                    false,
                );
                if n == 3 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    send.send_reset(h2::Reason::INTERNAL_ERROR);
                } else {
                    let _ = std::future::poll_fn(|cx| send.poll_reset(cx)).await;
                }
            }
        }),
    )
    .await;
    let ch = support::channel_with_config(&server.target(), config(SVC));
    ch.connect();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let starts = watch_starts.lock().expect("lock").clone();
    assert_eq!(starts.len(), 4, "four Watch streams: {starts:?}");
    let gap = |i: usize| starts[i] - starts[i - 1];
    assert_eq!(
        gap(1),
        Duration::from_secs(1),
        "1 s after the first failure"
    );
    assert!(
        (Duration::from_millis(1280)..=Duration::from_millis(1920)).contains(&gap(2)),
        "1.6 s ± 20 % after the second: {:?}",
        gap(2)
    );
    assert!(
        gap(3) < Duration::from_millis(20),
        "at once after a Watch that answered: {:?}",
        gap(3)
    );
    assert!(ch.stats().not_serving_addresses.is_empty());
    call(&ch).await.expect("the backend serves");
    // The Watch is not a user call: only the one call above is counted.
    assert_eq!(ch.stats().calls_started, 1);
}

#[tokio::test(start_paused = true)]
async fn a_config_change_restarts_or_stops_the_watches() {
    // Two backends on one port of 127.0.0.1-2, and 127.0.0.4 where nothing listens: its failed connection
    // attempts make round_robin ask DNS again, which brings each new config.
    let a = backend().await;
    let port = a.addr.port();
    let b = server::start(SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), port)))
        .await
        .expect("a second loopback address");
    for server in [&a, &b] {
        server.health().set("one", ServingStatus::Serving);
        server.health().set("two", ServingStatus::Serving);
    }
    b.health().set("one", ServingStatus::NotServing);
    let dns = TestDns::start().await.expect("dns");
    for n in [1, 2, 4] {
        dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, n)).await;
    }
    let choice = |service: Option<&str>| {
        let health = service
            .map(|s| format!(r#""healthCheckConfig":{{"serviceName":"{s}"}},"#))
            .unwrap_or_default();
        format!(
            r#"[{{"serviceConfig":{{{health}"loadBalancingConfig":[{{"round_robin":{{}}}}]}}}}]"#
        )
    };
    dns.set_service_config("svc.test", &choice(Some("one")))
        .await;
    let ch = Channel::builder(format!("dns://{}/svc.test:{port}", dns.addr))
        .resolver_options(
            ResolverOptions::default()
                .with_min_interval(Duration::from_millis(100))
                .with_query_timeout(Duration::from_secs(2)),
        )
        .build()
        .expect("channel");
    let b_id = b.addr.to_string();
    assert_eq!(
        spread(&ch, 20).await.get(&b_id),
        None,
        "b is not serving one"
    );
    assert_eq!(b.health().watchers("one"), 1);

    // A new service name: the watches move to it.
    dns.set_service_config("svc.test", &choice(Some("two")))
        .await;
    let mut moved = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if b.health().watchers("two") == 1 && b.health().watchers("one") == 0 {
            moved = true;
            break;
        }
    }
    assert!(moved, "the Watch moved to the new service name");
    until_not_serving(&ch, &[]).await;
    assert!(spread(&ch, 20).await.contains_key(&b_id));

    // No healthCheckConfig: the watches stop, and health no longer matters.
    b.health().set("two", ServingStatus::NotServing);
    dns.set_service_config("svc.test", &choice(None)).await;
    let mut stopped = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if a.health().watchers("two") == 0 && b.health().watchers("two") == 0 {
            stopped = true;
            break;
        }
    }
    assert!(stopped, "the Watch streams stopped");
    assert!(ch.stats().not_serving_addresses.is_empty());
    assert!(spread(&ch, 20).await.contains_key(&b_id));
}
