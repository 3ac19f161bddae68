//! The ADS stream against the test management server (tonic's HTTP/2 server, envoy-types' messages) over
//! loopback: subscriptions, ACKs, NACKs keeping the last good value, restarts that resubscribe with the
//! ACKed version, the does-not-exist timer, and one stream shared by two users of the same server.

use std::sync::Arc;
use std::time::Duration;

use grpc_xds::resource::{Resource, ResourceType};
use grpc_xds::Bootstrap;
use interop::xds_resources::{eds_cluster, named, type_url};
use interop::xds_server::ManagementServer;

use super::ads::{AdsClient, ResourceWatch, WatchState, Watchers, TASK_ENDED};

/// Waits (bounded, on tokio's clock) until the watch's state satisfies `what`.
async fn until(watch: &mut ResourceWatch, what: impl Fn(&WatchState) -> bool) -> WatchState {
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
    let mut client: grpc_xds::XdsClient<Resource> = grpc_xds::XdsClient::new(
        grpc_xds::ServerFeatures::default(),
        std::time::Instant::now(),
        Box::new(grpc_retry::SplitMix64::new(1)),
    );
    let id = client.watch(ResourceType::Cluster, "c1");
    let (slot, state) = tokio::sync::watch::channel(WatchState::default());
    let notify = Arc::new(tokio::sync::Notify::new());
    let mut watchers = Watchers::default();
    watchers.insert(1, id, slot, notify.clone());
    drop(watchers);
    tokio::time::timeout(Duration::from_secs(5), notify.notified())
        .await
        .expect("the watch is woken");
    let state = state.borrow().clone();
    assert_eq!(state.error.as_deref(), Some(TASK_ENDED));
    assert!(state.value.is_none() && !state.does_not_exist);
}
