//! The router's request hashes (A42): a call's route hash, else a random one; header values that are
//! not UTF-8.

use super::*;
use interop::xds_resources::{
    route_configuration, route_to_cluster, with_header_hash_policy, RouteMatchSpec,
};

fn router(route: envoy_types::pb::envoy::config::route::v3::Route) -> XdsRouter {
    let rc = route_configuration("r", &["*"], vec![route]);
    let parsed = grpc_xds::resource::parse_route_config(&rc).expect("valid routes");
    let vhost = parsed.virtual_hosts.into_iter().next().expect("a vhost");
    XdsRouter::new(vhost, None, 42)
}

fn hash(router: &XdsRouter, user: Option<&str>) -> Option<u64> {
    let mut metadata = MetadataMap::new();
    if let Some(user) = user {
        metadata.append("x-user", user).expect("metadata");
    }
    router.route("/a.B/C", &metadata).expect("routed").hash
}

#[test]
fn a_call_gets_its_routes_hash_else_a_random_one() {
    let hashed = router(with_header_hash_policy(
        route_to_cluster(&RouteMatchSpec::any(), "c"),
        "x-user",
    ));
    let alice = grpc_lb::xxh64(b"alice");
    assert_eq!(hash(&hashed, Some("alice")), Some(alice));
    assert_eq!(hash(&hashed, Some("alice")), Some(alice));
    // No header: a random hash per call.
    let (a, b) = (hash(&hashed, None), hash(&hashed, None));
    assert!(a.is_some() && b.is_some() && a != b, "{a:?} {b:?}");
    // Routes without hash policies: random too.
    let plain = router(route_to_cluster(&RouteMatchSpec::any(), "c"));
    assert_ne!(hash(&plain, Some("alice")), hash(&plain, Some("alice")));
}

#[test]
fn a_header_value_that_is_not_utf8_is_present_to_route_matching() {
    use envoy_types::pb::envoy::config::route::v3::header_matcher::HeaderMatchSpecifier;
    use envoy_types::pb::envoy::config::route::v3::HeaderMatcher;
    // obs-text: a valid HTTP field value that is not UTF-8.
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "x-user",
        http::HeaderValue::from_bytes(b"caf\xe9").expect("obs-text is a valid field value"),
    );
    let metadata = MetadataMap::from_headers(headers);
    let mut route = route_to_cluster(&RouteMatchSpec::any(), "c");
    route
        .r#match
        .as_mut()
        .expect("a match")
        .headers
        .push(HeaderMatcher {
            name: "x-user".into(),
            header_match_specifier: Some(HeaderMatchSpecifier::PresentMatch(true)),
            ..Default::default()
        });
    let routed = router(route)
        .route("/a.B/C", &metadata)
        .expect("the header is present");
    assert_eq!(&*routed.cluster, "c");
}
