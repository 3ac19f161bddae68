//! Helpers of grpc-channel's xDS tests (the `xds` test binary, `xds_grpcio.rs`): a
//! management server, channels to `xds:///svc.test` (or another name) with its bootstrap, publishing a
//! Listener → RouteConfiguration → EDS clusters chain (round_robin, or a ring_hash cluster behind a header
//! hash policy; [`one_backend`] for the simplest, every call to one backend), the Listeners a channel
//! holds, and calls that report which backend answered.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::route::v3::Route;
use grpc_channel::{Channel, Request, ResolverOptions, Status};
use interop::xds_resources::{
    assignment, eds_cluster, logical_dns_cluster, named, rds_listener, ring_hash_cluster,
    route_configuration, route_to_cluster, type_url, with_header_hash_policy, LocalitySpec,
    RouteMatchSpec,
};
use interop::xds_server::ManagementServer;
use interop_proto::paths;

use crate::{served_by, with_metadata};

/// The bound of every test.
pub const BOUND: Duration = Duration::from_secs(30);

/// The bound of one call.
pub const CALL: Duration = Duration::from_secs(10);

/// The service name: the target is `xds:///svc.test`, its Listener `svc.test`.
pub const NAME: &str = "svc.test";

/// The RouteConfiguration the Listener names.
pub const ROUTES: &str = "svc.test-routes";

/// Runs `test` under [`BOUND`] (on tokio's clock).
pub async fn bounded<F: Future<Output = ()>>(what: &str, test: F) {
    if tokio::time::timeout(BOUND, test).await.is_err() {
        panic!("{what}: did not finish within {BOUND:?}");
    }
}

/// A management server on a free loopback port.
pub async fn management_server() -> ManagementServer {
    ManagementServer::start()
        .await
        .expect("start the management server")
}

/// A channel to `xds:///<NAME>` with `server`'s bootstrap.
pub fn xds_channel(server: &ManagementServer) -> Channel {
    xds_channel_for(server, NAME)
}

/// A channel to `xds:///<name>` with `server`'s bootstrap.
pub fn xds_channel_for(server: &ManagementServer, name: &str) -> Channel {
    Channel::builder(format!("xds:///{name}"))
        .xds_bootstrap(server.bootstrap_json())
        .build()
        .expect("xds channel")
}

/// A channel to `xds:///<NAME>` with `server`'s bootstrap, resolving with `options` (a LOGICAL_DNS
/// cluster's names: the test DNS server as `options`' default server).
pub fn xds_channel_resolving(server: &ManagementServer, options: ResolverOptions) -> Channel {
    Channel::builder(format!("xds:///{NAME}"))
        .xds_bootstrap(server.bootstrap_json())
        .resolver_options(options)
        .build()
        .expect("xds channel")
}

/// A channel to `xds:///<NAME>` with a bootstrap naming `server` with these extra `server_features`.
pub fn xds_channel_with_features(server: &ManagementServer, features: &[&str]) -> Channel {
    xds_channel_at(&server.server_uri(), features)
}

/// A channel to `xds:///<NAME>` with a bootstrap naming the management server at `server_uri` (which
/// may be unreachable) with these extra `server_features`.
pub fn xds_channel_at(server_uri: &str, features: &[&str]) -> Channel {
    let mut all = vec!["\"xds_v3\"".to_owned()];
    all.extend(features.iter().map(|f| format!("\"{f}\"")));
    let bootstrap = format!(
        r#"{{"xds_servers":[{{"server_uri":"{server_uri}","channel_creds":[{{"type":"insecure"}}],"server_features":[{}]}}],"node":{{"id":"test-node"}}}}"#,
        all.join(",")
    );
    Channel::builder(format!("xds:///{NAME}"))
        .xds_bootstrap(bootstrap)
        .build()
        .expect("xds channel")
}

/// Publishes the Listener [`NAME`] (RDS, [`ROUTES`]), the RouteConfiguration [`ROUTES`] with one virtual
/// host of `domains` and `routes`, and for each `(cluster, localities)` an EDS cluster and its assignment.
pub fn publish(
    server: &ManagementServer,
    domains: &[&str],
    routes: Vec<Route>,
    clusters: &[(&str, Vec<LocalitySpec>)],
) {
    server.set(
        type_url::LISTENER,
        vec![named(NAME, type_url::LISTENER, &rds_listener(NAME, ROUTES))],
    );
    set_routes(server, domains, routes);
    set_clusters(server, clusters);
}

/// Publishes the Listener [`NAME`] and a route of every call (any domain) to the EDS cluster `c`, one
/// locality with `backend` alone.
pub fn publish_one_backend(server: &ManagementServer, backend: SocketAddr) {
    publish(
        server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), "c")],
        &[("c", locality(&[backend]))],
    );
}

/// An interop backend and a management server (started in that order) publishing every call to it
/// ([`publish_one_backend`]).
pub async fn one_backend() -> (interop::server::ServerHandle, ManagementServer) {
    let backend = crate::interop_server_handle().await;
    let server = management_server().await;
    publish_one_backend(&server, backend.addr);
    (backend, server)
}

/// The names of the Listeners `channel` holds (panics if it has no xDS resources to show).
pub fn listener_names(channel: &Channel) -> Vec<String> {
    channel
        .xds_resources()
        .expect("resources")
        .resources
        .into_iter()
        .filter(|r| r.resource_type == grpc_channel::XdsResourceType::Listener)
        .map(|r| r.name)
        .collect()
}

/// Sets the CDS and EDS resources: an EDS cluster per entry, with its assignment.
pub fn set_clusters(server: &ManagementServer, clusters: &[(&str, Vec<LocalitySpec>)]) {
    server.set(
        type_url::CLUSTER,
        clusters
            .iter()
            .map(|(c, _)| named(c, type_url::CLUSTER, &eds_cluster(c)))
            .collect(),
    );
    set_endpoints(server, clusters);
}

/// Publishes the Listener and a route of every call to the RING_HASH cluster `cluster` (rings of 1024 to
/// 4096 entries), hashing calls by header `header`, and the cluster's endpoints.
pub fn publish_ring_hash(
    server: &ManagementServer,
    header: &str,
    cluster: &str,
    localities: Vec<LocalitySpec>,
) {
    let route = with_header_hash_policy(route_to_cluster(&RouteMatchSpec::any(), cluster), header);
    publish(server, &["*"], vec![route], &[]);
    server.set(
        type_url::CLUSTER,
        vec![named(
            cluster,
            type_url::CLUSTER,
            &ring_hash_cluster(cluster, 1024, 4096),
        )],
    );
    set_endpoints(server, &[(cluster, localities)]);
}

/// Sets the EDS resources only.
pub fn set_endpoints(server: &ManagementServer, clusters: &[(&str, Vec<LocalitySpec>)]) {
    server.set(
        type_url::ENDPOINTS,
        clusters
            .iter()
            .map(|(c, l)| named(c, type_url::ENDPOINTS, &assignment(c, l)))
            .collect(),
    );
}

/// Publishes the Listener and a route of every call to "dns", a LOGICAL_DNS cluster of `host:port`.
pub fn publish_logical_dns(server: &ManagementServer, host: &str, port: u16) {
    publish(
        server,
        &["*"],
        vec![route_to_cluster(&RouteMatchSpec::any(), "dns")],
        &[],
    );
    server.set(
        type_url::CLUSTER,
        vec![named(
            "dns",
            type_url::CLUSTER,
            &logical_dns_cluster("dns", host, port),
        )],
    );
}

/// Two interop servers on one port: the first at 127.0.0.1, the second at 127.0.0.2 (as a LOGICAL_DNS
/// cluster's name may resolve to both).
pub async fn backends_on_one_port() -> (interop::server::ServerHandle, interop::server::ServerHandle)
{
    let first = crate::interop_server_handle().await;
    let second = interop::server::start(SocketAddr::from(([127, 0, 0, 2], first.addr.port())))
        .await
        .expect("a second backend on 127.0.0.2");
    (first, second)
}

/// One locality (priority 0) with these endpoints.
pub fn locality(endpoints: &[SocketAddr]) -> Vec<LocalitySpec> {
    vec![LocalitySpec::new("z1", endpoints)]
}

/// A `UnaryCall` (with these metadata entries) asking which server answers it.
pub async fn unary_served_by(
    channel: &Channel,
    metadata: &[(&str, &str)],
) -> Result<String, Status> {
    let request = interop_proto::SimpleRequest {
        fill_server_id: true,
        ..interop_proto::SimpleRequest::default()
    };
    let call = channel.unary::<_, interop_proto::SimpleResponse>(
        paths::UNARY_CALL,
        with_metadata(Request::new(request), metadata),
    );
    tokio::time::timeout(CALL, call)
        .await
        .expect("the call ends by itself")
        .map(|r| r.into_inner().server_id)
}

/// `n` calls; how many each server answered. Panics on a failed call.
pub async fn tally(channel: &Channel, n: usize) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for i in 0..n {
        match served_by(channel, CALL).await {
            Ok(id) => *counts.entry(id).or_default() += 1,
            Err(status) => panic!("call {i} failed: {status:?}"),
        }
    }
    counts
}

/// Calls (one at a time, 10 ms apart, at most 500) until one's outcome satisfies `done`; returns it.
pub async fn call_until(
    channel: &Channel,
    what: &str,
    done: impl Fn(&Result<String, Status>) -> bool,
) -> Result<String, Status> {
    let mut last = None;
    for _ in 0..500 {
        let outcome = served_by(channel, CALL).await;
        if done(&outcome) {
            return outcome;
        }
        last = Some(outcome);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}; last outcome {last:?}");
}

/// A server-streaming call of `n` responses `interval` apart, started and read up to its first response;
/// the rest of the stream is returned.
pub async fn slow_stream(
    channel: &Channel,
    n: usize,
    interval: Duration,
) -> grpc_channel::Streaming<interop_proto::StreamingOutputCallResponse> {
    let request = interop_proto::StreamingOutputCallRequest {
        response_parameters: (0..n)
            .map(|i| interop_proto::ResponseParameters {
                size: 10,
                interval_us: if i == 0 {
                    0
                } else {
                    i32::try_from(interval.as_micros()).expect("interval")
                },
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut stream = tokio::time::timeout(
        CALL,
        channel.server_streaming::<_, interop_proto::StreamingOutputCallResponse>(
            paths::STREAMING_OUTPUT_CALL,
            Request::new(request),
        ),
    )
    .await
    .expect("the call starts")
    .expect("response headers")
    .into_inner();
    let first = tokio::time::timeout(CALL, stream.message())
        .await
        .expect("the first response comes");
    assert!(matches!(first, Ok(Some(_))), "{first:?}");
    stream
}

/// Replaces the RouteConfiguration [`ROUTES`] with one virtual host of `domains` and `routes`.
pub fn set_routes(server: &ManagementServer, domains: &[&str], routes: Vec<Route>) {
    server.set(
        type_url::ROUTE,
        vec![named(
            ROUTES,
            type_url::ROUTE,
            &route_configuration(ROUTES, domains, routes),
        )],
    );
}

/// Replaces the Listener [`NAME`] with one without `api_listener` (every client NACKs it).
pub fn set_listener_without_api_listener(server: &ManagementServer) {
    server.set(
        type_url::LISTENER,
        vec![named(
            NAME,
            type_url::LISTENER,
            &interop::xds_resources::listener_without_api_listener(NAME),
        )],
    );
}

/// Replaces the routes with one route to `cluster` carrying a filter override of a type no client knows
/// and not optional (every client NACKs the RouteConfiguration, A39).
pub fn set_routes_with_unknown_filter(server: &ManagementServer, cluster: &str) {
    set_routes(
        server,
        &["*"],
        vec![interop::xds_resources::with_unknown_filter_override(
            interop::xds_resources::route_to_cluster(
                &interop::xds_resources::RouteMatchSpec::any(),
                cluster,
            ),
        )],
    );
}

/// The first NACK (a request with `error_detail`) of `type_url` within 10 s; panics naming `who` without.
pub async fn nack_of(
    server: &ManagementServer,
    type_url: &str,
    who: &str,
) -> envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest {
    server
        .wait_for_request(Duration::from_secs(10), |r| {
            r.type_url == type_url && r.error_detail.is_some()
        })
        .await
        .unwrap_or_else(|| panic!("{who} sent no NACK of {type_url}: {:?}", server.requests()))
}

/// Routes `EmptyCall` to `cluster-a` (at `a`) and every other method to `cluster-b` (at `b`).
pub fn publish_empty_call_split(server: &ManagementServer, a: SocketAddr, b: SocketAddr) {
    publish(
        server,
        &["*"],
        vec![
            interop::xds_resources::route_to_cluster(
                &interop::xds_resources::RouteMatchSpec::path(paths::EMPTY_CALL),
                "cluster-a",
            ),
            interop::xds_resources::route_to_cluster(
                &interop::xds_resources::RouteMatchSpec::any(),
                "cluster-b",
            ),
        ],
        &[("cluster-a", locality(&[a])), ("cluster-b", locality(&[b]))],
    );
}
