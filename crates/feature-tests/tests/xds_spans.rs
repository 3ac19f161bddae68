//! The `grpc.call` span of an xDS channel's call names the route and the cluster the call took
//! (`xds.route`: the route's `name`, else `virtual host name/index`; `xds.cluster`), over real loopback
//! sockets with the test management server. (Its own test binary: tracing caches callsite interest per
//! process, and a test without a subscriber running in parallel would disable the callsites for this one.)

use grpc_test_support as support;

use grpc_channel::{Channel, Request};
use interop::xds_resources::{
    assignment, eds_cluster, named, rds_listener, route_configuration, route_to_cluster, type_url,
    LocalitySpec, RouteMatchSpec,
};
use interop::xds_server::ManagementServer;
use interop_proto::grpc_testing::Empty;
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::guards::NO_HANG;
use support::interop_server;
use support::spans::{Capture, SeenSpan};
use tracing_subscriber::layer::SubscriberExt;

const NAME: &str = "svc.test";

/// The `grpc.call` spans of `method` (without its leading slash).
fn call_spans(capture: &Capture, method: &str) -> Vec<SeenSpan> {
    capture
        .spans()
        .into_iter()
        .filter(|s| {
            s.name == "grpc.call" && s.fields.get("grpc.method").map(String::as_str) == Some(method)
        })
        .collect()
}

#[tokio::test]
async fn a_call_span_names_the_route_and_the_cluster() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let a = interop_server().await;
    let b = interop_server().await;
    let server = ManagementServer::start().await.expect("management server");
    server.set(
        type_url::LISTENER,
        vec![named(
            NAME,
            type_url::LISTENER,
            &rds_listener(NAME, "routes"),
        )],
    );
    let mut named_route = route_to_cluster(&RouteMatchSpec::path(paths::EMPTY_CALL), "cluster-a");
    named_route.name = "empty-call".to_owned();
    let routes = vec![
        named_route,
        route_to_cluster(&RouteMatchSpec::any(), "cluster-b"),
    ];
    server.set(
        type_url::ROUTE,
        vec![named(
            "routes",
            type_url::ROUTE,
            &route_configuration("routes", &["*"], routes),
        )],
    );
    let clusters = [("cluster-a", a), ("cluster-b", b)];
    server.set(
        type_url::CLUSTER,
        clusters
            .iter()
            .map(|(c, _)| named(c, type_url::CLUSTER, &eds_cluster(c)))
            .collect(),
    );
    server.set(
        type_url::ENDPOINTS,
        clusters
            .iter()
            .map(|(c, addr)| {
                let localities = [LocalitySpec::new("z1", &[*addr])];
                named(c, type_url::ENDPOINTS, &assignment(c, &localities))
            })
            .collect(),
    );
    let channel = Channel::builder(format!("xds:///{NAME}"))
        .xds_bootstrap(server.bootstrap_json())
        .build()
        .expect("channel");

    let empty = channel.unary::<_, Empty>(paths::EMPTY_CALL, Request::new(Empty {}));
    let result = tokio::time::timeout(NO_HANG, empty).await.expect("no hang");
    assert!(result.is_ok(), "{result:?}");
    let unary = channel
        .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(SimpleRequest::default()));
    let result = tokio::time::timeout(NO_HANG, unary).await.expect("no hang");
    assert!(result.is_ok(), "{result:?}");

    let method = |path: &str| path.trim_start_matches('/').to_owned();
    let empty_spans = call_spans(&capture, &method(paths::EMPTY_CALL));
    assert_eq!(empty_spans.len(), 1, "{:#?}", capture.spans());
    assert_eq!(empty_spans[0].fields["xds.route"], "empty-call");
    assert_eq!(empty_spans[0].fields["xds.cluster"], "cluster-a");
    assert_eq!(empty_spans[0].fields["grpc.status"], "OK");
    // An unnamed route: its virtual host's name and its place in the host.
    let unary_spans = call_spans(&capture, &method(paths::UNARY_CALL));
    assert_eq!(unary_spans.len(), 1, "{:#?}", capture.spans());
    assert_eq!(unary_spans[0].fields["xds.route"], "vh/1");
    assert_eq!(unary_spans[0].fields["xds.cluster"], "cluster-b");

    // The ADS stream's own call runs on a channel that is not xDS: no route, no cluster.
    let ads: Vec<SeenSpan> = capture
        .spans()
        .into_iter()
        .filter(|s| {
            s.name == "grpc.call" && s.fields["grpc.method"].ends_with("StreamAggregatedResources")
        })
        .collect();
    assert!(!ads.is_empty(), "{:#?}", capture.spans());
    for span in ads {
        assert!(!span.fields.contains_key("xds.route"), "{span:?}");
        assert!(!span.fields.contains_key("xds.cluster"), "{span:?}");
    }
}
