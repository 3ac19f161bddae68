//! The ADS stream against the test management server (tonic's HTTP/2 server, envoy-types' messages) over
//! loopback: subscriptions, ACKs, NACKs keeping the last good value, restarts that resubscribe with the
//! ACKed version, the does-not-exist timer, and one stream shared by two users of the same server.

use std::sync::Arc;
use std::time::Duration;

use grpc_xds::resource::{Resource, ResourceType};
use grpc_xds::Bootstrap;
use interop::xds_resources::{eds_cluster, named, type_url};
use interop::xds_server::ManagementServer;

use super::ads::{off_runtime, AdsClient, ResourceWatch, WatchState, Watchers, TASK_ENDED};

/// Waits (bounded, on tokio's clock) until the watch's state satisfies `what`.
pub(super) async fn until(
    watch: &mut ResourceWatch,
    what: impl Fn(&WatchState) -> bool,
) -> WatchState {
    let wait = async {
        loop {
            let state = watch.state();
            if what(&state) {
                return state;
            }
            if !watch.changed().await {
                return watch.state();
            }
        }
    };
    match tokio::time::timeout(Duration::from_secs(30), wait).await {
        Ok(state) => state,
        Err(_) => panic!(
            "the watch never reached the expected state: {:?}",
            watch.state()
        ),
    }
}

fn cluster_name(state: &WatchState) -> Option<String> {
    match state.value.as_deref() {
        Some(Resource::Cluster(c)) => Some(c.name.clone()),
        _ => None,
    }
}

async fn server_with_cluster() -> (ManagementServer, Bootstrap) {
    let server = ManagementServer::start().await.expect("management server");
    server.set(
        type_url::CLUSTER,
        vec![named("c1", type_url::CLUSTER, &eds_cluster("c1"))],
    );
    let bootstrap = Bootstrap::parse(&server.bootstrap_json()).expect("bootstrap");
    (server, bootstrap)
}

#[tokio::test]
async fn a_watched_cluster_arrives_and_is_acked_with_the_node_on_the_first_request() {
    let (server, bootstrap) = server_with_cluster().await;
    let ads = AdsClient::shared(&bootstrap).expect("ads");
    let mut watch = ads.watch(ResourceType::Cluster, "c1", Arc::default());
    let state = until(&mut watch, |s| s.value.is_some()).await;
    assert_eq!(cluster_name(&state).as_deref(), Some("c1"));
    let ack = server
        .wait_for_request(Duration::from_secs(10), |r| {
            r.type_url == type_url::CLUSTER && r.version_info == "1" && r.response_nonce == "1"
        })
        .await
        .expect("an ACK of version 1");
    assert!(ack.error_detail.is_none());
    let requests = server.requests();
    let first = &requests[0];
    let node = first.node.clone().expect("the node on the first request");
    assert_eq!(node.id, "test-node");
    assert_eq!(node.user_agent_name, "grpc-rust-channel");
    assert!(requests[1..].iter().all(|r| r.node.is_none()), "node once");
}

#[tokio::test]
async fn an_invalid_update_is_nacked_and_the_last_good_value_stays() {
    let (server, bootstrap) = server_with_cluster().await;
    let ads = AdsClient::shared(&bootstrap).expect("ads");
    let mut watch = ads.watch(ResourceType::Cluster, "c1", Arc::default());
    until(&mut watch, |s| s.value.is_some()).await;
    // A cluster with no discovery type (STATIC) is not one a gRPC client takes.
    let mut bad = eds_cluster("c1");
    bad.cluster_discovery_type = None;
    server.set(
        type_url::CLUSTER,
        vec![named("c1", type_url::CLUSTER, &bad)],
    );
    let nack = server
        .wait_for_request(Duration::from_secs(10), |r| r.error_detail.is_some())
        .await
        .expect("a NACK");
    assert_eq!(
        nack.version_info, "1",
        "a NACK carries the last ACKed version"
    );
    assert_eq!(nack.response_nonce, "2");
    let detail = nack.error_detail.map(|s| s.message).unwrap_or_default();
    assert!(detail.contains("c1"), "{detail}");
    let state = until(&mut watch, |s| s.error.is_some()).await;
    assert_eq!(
        cluster_name(&state).as_deref(),
        Some("c1"),
        "kept: {state:?}"
    );
}

#[tokio::test]
async fn a_restarted_server_gets_the_subscriptions_again_with_the_acked_version() {
    let (mut server, bootstrap) = server_with_cluster().await;
    let ads = AdsClient::shared(&bootstrap).expect("ads");
    let mut watch = ads.watch(ResourceType::Cluster, "c1", Arc::default());
    until(&mut watch, |s| s.value.is_some()).await;
    server.restart().await.expect("restart");
    let again = server
        .wait_for_request(Duration::from_secs(20), |r| {
            r.node.is_some() && r.version_info == "1" && r.response_nonce.is_empty()
        })
        .await
        .expect("the subscription again, on a new stream");
    assert_eq!(again.resource_names, vec!["c1".to_owned()]);
    assert!(server.streams_opened() >= 2);
    assert_eq!(cluster_name(&watch.state()).as_deref(), Some("c1"));
}

#[tokio::test(start_paused = true)]
async fn a_resource_never_sent_does_not_exist_after_15_seconds() {
    let (_server, bootstrap) = server_with_cluster().await;
    let ads = AdsClient::shared(&bootstrap).expect("ads");
    let start = tokio::time::Instant::now();
    let mut watch = ads.watch(ResourceType::Cluster, "missing", Arc::default());
    until(&mut watch, |s| s.does_not_exist).await;
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(15) && waited < Duration::from_secs(17),
        "{waited:?}"
    );
}

#[tokio::test]
async fn channels_naming_the_same_server_share_one_stream() {
    let (server, bootstrap) = server_with_cluster().await;
    let a = AdsClient::shared(&bootstrap).expect("ads");
    let b = AdsClient::shared(&bootstrap).expect("ads");
    let mut wa = a.watch(ResourceType::Cluster, "c1", Arc::default());
    let mut wb = b.watch(ResourceType::Cluster, "c1", Arc::default());
    until(&mut wa, |s| s.value.is_some()).await;
    until(&mut wb, |s| s.value.is_some()).await;
    assert_eq!(server.streams_opened(), 1);
}

/// Should the ADS task end while watches remain (a panic: it ends by itself only once every handle is
/// gone), each watch keeps its value, gets the error and is woken, so a resolver still waiting for a
/// resource fails its channel instead of waiting forever.
#[tokio::test]
async fn watches_left_when_the_task_ends_get_an_error() {
    let (slot, state) = tokio::sync::watch::channel(WatchState::default());
    let notify = Arc::new(tokio::sync::Notify::new());
    let mut watchers = Watchers::default();
    watchers.insert(1, ResourceType::Cluster, "c1", slot, notify.clone());
    drop(watchers);
    tokio::time::timeout(Duration::from_secs(5), notify.notified())
        .await
        .expect("the watch is woken");
    let state = state.borrow().clone();
    assert_eq!(state.error.as_deref(), Some(TASK_ENDED));
    assert!(state.value.is_none() && !state.does_not_exist);
}

/// A client whose task ended (here: the runtime it ran on shut down) while channels still hold it is
/// passed over by `shared`: the client started in its place must be the one every later channel shares,
/// not a new client (and a new ADS stream) per channel.
#[tokio::test]
async fn after_a_task_ended_later_channels_share_one_new_client() {
    let (server, bootstrap) = server_with_cluster().await;
    let dead = {
        let bootstrap = bootstrap.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let ads = runtime
                .block_on(async { AdsClient::shared(&bootstrap) })
                .expect("ads");
            drop(runtime);
            ads
        })
        .join()
        .expect("the other runtime's thread")
    };
    let a = AdsClient::shared(&bootstrap).expect("ads");
    let b = AdsClient::shared(&bootstrap).expect("ads");
    assert!(!Arc::ptr_eq(&dead, &a), "the dead client is passed over");
    let mut wa = a.watch(ResourceType::Cluster, "c1", Arc::default());
    let mut wb = b.watch(ResourceType::Cluster, "c1", Arc::default());
    until(&mut wa, |s| s.value.is_some()).await;
    until(&mut wb, |s| s.value.is_some()).await;
    assert!(
        Arc::ptr_eq(&a, &b),
        "two channels got two clients ({} ADS streams) while the dead one is held",
        server.streams_opened()
    );
    assert_eq!(server.streams_opened(), 1);
    drop(dead);
}

/// A watch whose command is still in the task's queue when the task ends (a panic, or its runtime
/// shutting down) must get the task's error and be woken like the watches the task had taken, or a
/// resolver waiting for its Listener waits forever.
#[tokio::test]
async fn a_watch_queued_when_the_task_ends_gets_the_error() {
    let (_server, bootstrap) = server_with_cluster().await;
    let (ads, watch, notify) = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // The task is spawned but not run yet when `block_on` returns.
        let ads = runtime
            .block_on(async { AdsClient::shared(&bootstrap) })
            .expect("ads");
        let notify = Arc::new(tokio::sync::Notify::new());
        let watch = ads.watch(ResourceType::Cluster, "c1", notify.clone());
        // The task ends with the watch's command in its queue.
        drop(runtime);
        (ads, watch, notify)
    })
    .join()
    .expect("the other runtime's thread");
    let woken = tokio::time::timeout(Duration::from_secs(5), notify.notified()).await;
    let state = watch.state();
    assert!(
        woken.is_ok() && state.error.as_deref() == Some(TASK_ENDED),
        "woken: {}, state: {state:?}",
        woken.is_ok()
    );
    drop(ads);
}

/// gRFC A57 (shared/spec/beyond-a6.md §4): the does-not-exist timer starts once the request naming the
/// resource was actually sent (C-core: its send completed), never while it waits to be written. The
/// server here takes the ADS stream but gives it no flow-control window and, like a grpc-go server,
/// sends no response headers before its first response: no byte of any request reaches it, so after
/// 30 s the resource must still be waited for, not declared absent. (A server that answers the headers
/// at once commits the call, whose writer task then writes the request under flow control: the same
/// holds.)
#[tokio::test(start_paused = true)]
async fn a_request_the_server_never_took_starts_no_does_not_exist_timer() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let streams = Arc::new(AtomicUsize::new(0));
    let data_seen = Arc::new(AtomicBool::new(false));
    let (s, d) = (streams.clone(), data_seen.clone());
    tokio::spawn(async move {
        let Ok((tcp, _)) = listener.accept().await else {
            return;
        };
        let Ok(mut conn) = h2::server::Builder::new()
            .initial_window_size(0)
            .handshake::<_, bytes::Bytes>(tcp)
            .await
        else {
            return;
        };
        let mut held = Vec::new();
        while let Some(Ok((request, respond))) = conn.accept().await {
            s.fetch_add(1, Ordering::SeqCst);
            let mut body = request.into_body();
            let d = d.clone();
            // Reads (never releasing capacity) only to notice a DATA frame.
            tokio::spawn(async move {
                if let Some(Ok(_)) = body.data().await {
                    d.store(true, Ordering::SeqCst);
                }
                std::future::pending::<()>().await;
            });
            held.push(respond);
        }
    });
    let json = format!(
        r#"{{"xds_servers":[{{"server_uri":"127.0.0.1:{}","channel_creds":[{{"type":"insecure"}}]}}],"node":{{"id":"silent-{}"}}}}"#,
        addr.port(),
        addr.port()
    );
    let bootstrap = Bootstrap::parse(&json).expect("bootstrap");
    let ads = AdsClient::shared(&bootstrap).expect("ads");
    let watch = ads.watch(ResourceType::Cluster, "c1", Arc::default());
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(streams.load(Ordering::SeqCst), 1, "the ADS stream opened");
    assert!(
        !data_seen.load(Ordering::SeqCst),
        "no request byte reached the server"
    );
    let state = watch.state();
    assert!(
        !state.does_not_exist,
        "declared absent though its request never left: {state:?}"
    );
}

#[tokio::test]
#[allow(deprecated)]
async fn a_route_configuration_past_the_regex_budget_is_nacked_naming_the_regex() {
    use envoy_types::pb::envoy::config::route::v3::header_matcher::HeaderMatchSpecifier;
    use envoy_types::pb::envoy::config::route::v3::HeaderMatcher;
    use envoy_types::pb::envoy::r#type::matcher::v3::RegexMatcher;
    use interop::xds_resources::{route_configuration, route_to_cluster, RouteMatchSpec};
    // The review's resource: 1,500 header matchers of `(?:.){9000}` (about 35 KB).
    let mut route = route_to_cluster(&RouteMatchSpec::any(), "c1");
    if let Some(m) = route.r#match.as_mut() {
        m.headers = (0..1500)
            .map(|i| HeaderMatcher {
                name: format!("h{i}"),
                header_match_specifier: Some(HeaderMatchSpecifier::SafeRegexMatch(RegexMatcher {
                    regex: "(?:.){9000}".into(),
                    ..Default::default()
                })),
                ..Default::default()
            })
            .collect();
    }
    let (server, bootstrap) = server_with_cluster().await;
    server.set(
        type_url::ROUTE,
        vec![named(
            "r",
            type_url::ROUTE,
            &route_configuration("r", &["*"], vec![route]),
        )],
    );
    let ads = AdsClient::shared(&bootstrap).expect("ads");
    let mut watch = ads.watch(ResourceType::RouteConfiguration, "r", Arc::default());
    let nack = server
        .wait_for_request(Duration::from_secs(10), |r| r.error_detail.is_some())
        .await
        .expect("a NACK");
    let detail = nack.error_detail.map(|s| s.message).unwrap_or_default();
    assert!(
        detail.contains("virtual_hosts[0].routes[0].match.headers[")
            && detail.contains("safe_regex_match.regex: the regular expressions of the resource"),
        "{detail}"
    );
    let state = until(&mut watch, |s| s.error.is_some()).await;
    assert!(state.value.is_none(), "{state:?}");
}

/// A response's decoding (here one that cannot finish before a timer of another task has fired), in a
/// task as the ADS task's, runs while the runtime's workers go on with other tasks: `false` when the
/// timer never fired (the wait is bounded, so decoding on a worker fails the test instead of hanging it).
async fn a_timer_fires_while_a_response_is_decoded() -> bool {
    let (fired, wait) = std::sync::mpsc::channel::<()>();
    let ads = tokio::spawn(off_runtime(move || {
        wait.recv_timeout(Duration::from_secs(10)).is_ok()
    }));
    let other = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let _ = fired.send(());
    });
    let decoded = ads.await;
    other.abort();
    matches!(decoded, Ok(Some(true)))
}

#[tokio::test(flavor = "current_thread")]
async fn a_response_is_decoded_off_a_current_thread_runtime() {
    assert!(
        a_timer_fires_while_a_response_is_decoded().await,
        "another task's timer was held up by the decoding"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_response_is_decoded_off_a_multi_thread_runtime() {
    assert!(
        a_timer_fires_while_a_response_is_decoded().await,
        "another task's timer was held up by the decoding"
    );
}
