use super::*;
use crate::resource::duration::to_proto;
use crate::resource::{parse_route_config, RouteConfig};
use envoy_types::pb::envoy::config::core::v3::RuntimeFractionalPercent;
use envoy_types::pb::envoy::config::route::v3::header_matcher::HeaderMatchSpecifier;
use envoy_types::pb::envoy::config::route::v3::route::Action;
use envoy_types::pb::envoy::config::route::v3::route_action::{
    ClusterSpecifier, MaxStreamDuration,
};
use envoy_types::pb::envoy::config::route::v3::route_match::PathSpecifier;
use envoy_types::pb::envoy::config::route::v3::weighted_cluster::ClusterWeight;
use envoy_types::pb::envoy::config::route::v3::{
    HeaderMatcher as ProtoHeaderMatcher, NonForwardingAction, Route as ProtoRoute,
    RouteAction as ProtoRouteAction, RouteConfiguration, RouteMatch,
    VirtualHost as ProtoVirtualHost, WeightedCluster,
};
use envoy_types::pb::envoy::r#type::matcher::v3::RegexMatcher;
use envoy_types::pb::envoy::r#type::v3::FractionalPercent;
use envoy_types::pb::google::protobuf::{BoolValue, UInt32Value};

/// Draws in a scripted order; panics (test only) when a draw was not expected.
struct Draws(Vec<u64>);

impl Rng for Draws {
    fn next_u64(&mut self) -> u64 {
        assert!(!self.0.is_empty(), "an unexpected random draw");
        self.0.remove(0)
    }
}

fn no_draws() -> Draws {
    Draws(Vec::new())
}

fn prefix(p: &str) -> RouteMatch {
    RouteMatch {
        path_specifier: Some(PathSpecifier::Prefix(p.to_owned())),
        ..Default::default()
    }
}

fn to_cluster(name: &str) -> Option<Action> {
    Some(Action::Route(ProtoRouteAction {
        cluster_specifier: Some(ClusterSpecifier::Cluster(name.to_owned())),
        ..Default::default()
    }))
}

fn route(m: RouteMatch, action: Option<Action>) -> ProtoRoute {
    ProtoRoute {
        r#match: Some(m),
        action,
        ..Default::default()
    }
}

fn vhost(routes: Vec<ProtoRoute>) -> VirtualHost {
    let rc = RouteConfiguration {
        virtual_hosts: vec![ProtoVirtualHost {
            domains: vec!["*".into()],
            routes,
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut config = parse_route_config(&rc).expect("valid");
    config.virtual_hosts.remove(0)
}

fn cluster_of(outcome: RouteOutcome<'_>) -> Option<(&str, usize)> {
    match outcome {
        RouteOutcome::Routed(r) => Some((r.cluster, r.route_index)),
        _ => None,
    }
}

const NO_HEADERS: &[(&str, &str)] = &[];

#[test]
fn the_first_matching_route_wins() {
    let vh = vhost(vec![
        route(prefix("/a."), to_cluster("a")),
        route(prefix("/a.S/"), to_cluster("a-s")),
        route(prefix(""), to_cluster("default")),
    ]);
    let go = |path| cluster_of(route_call(&vh, path, NO_HEADERS, None, &mut no_draws()));
    assert_eq!(go("/a.S/M"), Some(("a", 0)), "order, not specificity");
    assert_eq!(go("/b.S/M"), Some(("default", 2)));
}

#[test]
fn no_route_and_non_forwarding() {
    let vh = vhost(vec![
        route(
            prefix("/a.S/"),
            Some(Action::NonForwardingAction(NonForwardingAction {})),
        ),
        route(prefix("/b.S/"), to_cluster("b")),
    ]);
    assert_eq!(
        route_call(&vh, "/a.S/M", NO_HEADERS, None, &mut no_draws()),
        RouteOutcome::NonForwarding { route_index: 0 }
    );
    assert_eq!(
        route_call(&vh, "/c.S/M", NO_HEADERS, None, &mut no_draws()),
        RouteOutcome::NoRoute
    );
}

#[test]
fn path_kinds_and_case_sensitivity() {
    let mut exact = RouteMatch {
        path_specifier: Some(PathSpecifier::Path("/S/M".into())),
        ..Default::default()
    };
    let mut regex = RouteMatch {
        path_specifier: Some(PathSpecifier::SafeRegex(RegexMatcher {
            regex: "/S/M[0-9]".into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    let vh = vhost(vec![
        route(exact.clone(), to_cluster("exact")),
        route(regex.clone(), to_cluster("regex")),
    ]);
    fn go(vh: &VirtualHost, path: &str) -> Option<String> {
        cluster_of(route_call(vh, path, NO_HEADERS, None, &mut no_draws())).map(|c| c.0.to_owned())
    }
    assert_eq!(go(&vh, "/S/M").as_deref(), Some("exact"));
    assert_eq!(go(&vh, "/s/m"), None);
    assert_eq!(go(&vh, "/S/M1").as_deref(), Some("regex"));
    assert_eq!(go(&vh, "/S/M1x"), None, "the regex matches the whole path");
    exact.case_sensitive = Some(BoolValue { value: false });
    regex.case_sensitive = Some(BoolValue { value: false });
    let vh = vhost(vec![
        route(exact, to_cluster("exact")),
        route(regex, to_cluster("regex")),
    ]);
    assert_eq!(go(&vh, "/s/m").as_deref(), Some("exact"));
    assert_eq!(go(&vh, "/s/m1").as_deref(), Some("regex"));
}

fn with_header(mut m: RouteMatch, name: &str, kind: HeaderMatchSpecifier) -> RouteMatch {
    m.headers.push(ProtoHeaderMatcher {
        name: name.into(),
        header_match_specifier: Some(kind),
        ..Default::default()
    });
    m
}

#[test]
#[allow(deprecated)]
fn every_header_must_match_in_the_header_view() {
    let m = with_header(
        with_header(
            prefix(""),
            "x-a",
            HeaderMatchSpecifier::ExactMatch("1".into()),
        ),
        "x-b",
        HeaderMatchSpecifier::PresentMatch(true),
    );
    let vh = vhost(vec![route(m, to_cluster("both"))]);
    let go = |h: &[(&str, &str)]| {
        cluster_of(route_call(&vh, "/S/M", h, None, &mut no_draws())).is_some()
    };
    assert!(go(&[("x-a", "1"), ("X-B", "")]));
    assert!(!go(&[("x-a", "1")]));
    assert!(!go(&[("x-a", "2"), ("x-b", "")]));
    assert!(
        !go(&[("x-a", "1"), ("x-a", "1"), ("x-b", "")]),
        "repeated values are joined: 1,1"
    );

    let joined = vhost(vec![route(
        with_header(
            prefix(""),
            "x-a",
            HeaderMatchSpecifier::ExactMatch("1,2".into()),
        ),
        to_cluster("c"),
    )]);
    assert!(cluster_of(route_call(
        &joined,
        "/S/M",
        &[("x-a", "1"), ("x-a", "2")][..],
        None,
        &mut no_draws()
    ))
    .is_some());
}

#[test]
#[allow(deprecated)]
fn a_value_that_is_not_utf8_is_present_in_the_header_view() {
    // obs-text: a valid HTTP field value that is not UTF-8. It is present, matched and hashed on its bytes.
    let headers: &[(&str, &[u8])] = &[("x-user", b"caf\xe9"), ("x-user", b"x")];
    let vh = vhost(vec![
        route(
            with_header(
                prefix(""),
                "x-user",
                HeaderMatchSpecifier::PresentMatch(false),
            ),
            to_cluster("absent"),
        ),
        route(
            with_header(
                prefix(""),
                "x-user",
                HeaderMatchSpecifier::SuffixMatch(",x".into()),
            ),
            to_cluster("present"),
        ),
    ]);
    assert_eq!(
        cluster_of(route_call(&vh, "/S/M", headers, None, &mut no_draws())),
        Some(("present", 1))
    );
    let user = header_policy("x-user", None, false);
    assert_eq!(
        request_hash(std::slice::from_ref(&user), headers, 9),
        Some(xxhash_rust::xxh64::xxh64(b"caf\xe9,x", 0))
    );
}

#[test]
#[allow(deprecated)]
fn bin_headers_are_absent_and_content_type_is_grpc() {
    let present = |name: &str| {
        vhost(vec![route(
            with_header(prefix(""), name, HeaderMatchSpecifier::PresentMatch(true)),
            to_cluster("c"),
        )])
    };
    let headers = [
        ("x-key-bin", "AAAA"),
        ("content-type", "application/grpc+proto"),
        (":path", "/S/M"),
    ];
    let go = |vh: &VirtualHost| {
        cluster_of(route_call(vh, "/S/M", &headers[..], None, &mut no_draws())).is_some()
    };
    assert!(!go(&present("x-key-bin")));
    assert!(!go(&present(":path")));
    let ct = vhost(vec![route(
        with_header(
            prefix(""),
            "content-type",
            HeaderMatchSpecifier::ExactMatch("application/grpc".into()),
        ),
        to_cluster("c"),
    )]);
    assert!(
        go(&ct),
        "content-type is application/grpc whatever the metadata says"
    );
    assert!(cluster_of(route_call(&ct, "/S/M", NO_HEADERS, None, &mut no_draws())).is_some());
}

#[test]
fn the_fraction_draws_once_per_candidate_route() {
    let mut m = prefix("");
    m.runtime_fraction = Some(RuntimeFractionalPercent {
        default_value: Some(FractionalPercent {
            numerator: 25,
            denominator: 0, // HUNDRED
        }),
        runtime_key: String::new(),
    });
    let vh = vhost(vec![
        route(prefix("/other/"), to_cluster("never")),
        route(m, to_cluster("quarter")),
        route(prefix(""), to_cluster("rest")),
    ]);
    let go = |draw| {
        let mut rng = Draws(vec![draw]);
        let got = cluster_of(route_call(&vh, "/S/M", NO_HEADERS, None, &mut rng)).map(|c| c.0);
        assert!(rng.0.is_empty(), "exactly one draw");
        got
    };
    assert_eq!(go(0), Some("quarter"));
    assert_eq!(go(249_999), Some("quarter"));
    assert_eq!(go(250_000), Some("rest"));
    assert_eq!(
        go(1_000_000 + 10),
        Some("quarter"),
        "draws are taken modulo a million"
    );
}

#[test]
fn weighted_clusters_by_cumulative_weight() {
    let weighted = |entries: &[(&str, u32)]| {
        Some(Action::Route(ProtoRouteAction {
            cluster_specifier: Some(ClusterSpecifier::WeightedClusters(WeightedCluster {
                clusters: entries
                    .iter()
                    .map(|(n, w)| ClusterWeight {
                        name: n.to_string(),
                        weight: Some(UInt32Value { value: *w }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })),
            ..Default::default()
        }))
    };
    let vh = vhost(vec![route(
        prefix(""),
        weighted(&[("a", 10), ("zero", 0), ("b", 30)]),
    )]);
    let go = |draw| {
        cluster_of(route_call(
            &vh,
            "/S/M",
            NO_HEADERS,
            None,
            &mut Draws(vec![draw]),
        ))
        .map(|c| c.0)
    };
    assert_eq!(go(0), Some("a"));
    assert_eq!(go(9), Some("a"));
    assert_eq!(go(10), Some("b"));
    assert_eq!(go(39), Some("b"));
    assert_eq!(go(40), Some("a"), "the draw is taken modulo the total");
}

fn msd(header_max: Option<Duration>, max: Option<Duration>) -> Option<Action> {
    Some(Action::Route(ProtoRouteAction {
        cluster_specifier: Some(ClusterSpecifier::Cluster("c".into())),
        max_stream_duration: Some(MaxStreamDuration {
            grpc_timeout_header_max: header_max.map(to_proto),
            max_stream_duration: max.map(to_proto),
            grpc_timeout_header_offset: None,
        }),
        ..Default::default()
    }))
}

fn limit_of(action: Option<Action>, listener: Option<Duration>) -> Option<Duration> {
    let vh = vhost(vec![route(prefix(""), action)]);
    match route_call(&vh, "/S/M", NO_HEADERS, listener, &mut no_draws()) {
        RouteOutcome::Routed(r) => r.max_stream_duration,
        other => panic!("not routed: {other:?}"),
    }
}

#[test]
fn a31_examples() {
    const S: fn(u64) -> Duration = Duration::from_secs;
    let start = Instant::now();
    let at = |d: Duration| start + d;
    // (application deadline, grpc_timeout_header_max, max_stream_duration) -> deadline.
    let any = [None, Some(Duration::ZERO), Some(S(5)), Some(S(30))];
    type Case = (
        Option<Duration>,
        Option<Duration>,
        Option<Duration>,
        Option<Duration>,
    );
    let mut cases: Vec<Case> = vec![
        (None, None, Some(S(10)), Some(S(10))),
        (Some(S(20)), None, Some(S(10)), Some(S(10))),
        (Some(S(20)), None, Some(Duration::ZERO), Some(S(20))),
    ];
    for m in any {
        cases.push((None, Some(Duration::ZERO), m, None));
        cases.push((Some(S(20)), Some(Duration::ZERO), m, Some(S(20))));
        cases.push((Some(S(20)), Some(S(10)), m, Some(S(10))));
    }
    for (app, header_max, max, want) in cases {
        let limit = limit_of(msd(header_max, max), None);
        assert_eq!(
            capped_deadline(app.map(at), start, limit),
            want.map(at),
            "app {app:?}, grpc_timeout_header_max {header_max:?}, max_stream_duration {max:?}"
        );
    }
}

#[test]
fn the_listener_limit_applies_only_when_the_route_sets_none() {
    let listener = Some(Duration::from_secs(7));
    assert_eq!(limit_of(to_cluster("c"), listener), listener);
    assert_eq!(limit_of(msd(None, None), listener), listener);
    assert_eq!(
        limit_of(msd(None, Some(Duration::ZERO)), listener),
        None,
        "0 on the route: no limit"
    );
    assert_eq!(
        limit_of(
            msd(Some(Duration::ZERO), Some(Duration::from_secs(3))),
            listener
        ),
        None
    );
    assert_eq!(
        limit_of(msd(None, Some(Duration::from_secs(3))), listener),
        Some(Duration::from_secs(3))
    );
    assert_eq!(limit_of(to_cluster("c"), Some(Duration::ZERO)), None);
}

#[test]
fn a_limit_never_extends_a_deadline() {
    let start = Instant::now();
    let app = start + Duration::from_secs(1);
    assert_eq!(
        capped_deadline(Some(app), start, Some(Duration::from_secs(5))),
        Some(app)
    );
    assert_eq!(capped_deadline(Some(app), start, None), Some(app));
    assert_eq!(capped_deadline(None, start, None), None);
    assert_eq!(
        capped_deadline(Some(app), start, Some(Duration::MAX)),
        Some(app),
        "an overflowing limit caps nothing"
    );
}

#[test]
fn routed_calls_carry_the_route_settings() {
    let vh = vhost(vec![route(prefix(""), to_cluster("c"))]);
    let RouteOutcome::Routed(r) = route_call(&vh, "/S/M", NO_HEADERS, None, &mut no_draws()) else {
        panic!("routed");
    };
    assert_eq!(r.route, &vh.routes[0]);
    assert_eq!(r.retry_policy, None);
    assert!(r.hash_policies.is_empty());
}

#[test]
fn the_slice_header_view() {
    let h = [("A", "1"), ("b", "2"), ("a", "3"), ("a", "4")];
    assert_eq!(h[..].value("a").as_deref(), Some(&b"1,3,4"[..]));
    assert_eq!(h[..].value("b").as_deref(), Some(&b"2"[..]));
    assert_eq!(h[..].value("c"), None);
    assert_eq!(
        call_header(&h[..], "content-type").as_deref(),
        Some(&b"application/grpc"[..])
    );
}

#[test]
fn from_a_listener_to_a_routed_call() {
    use crate::resource::testing::{any, router};
    use crate::resource::{parse_listener_any, RouteSource};
    use envoy_types::pb::envoy::config::listener::v3::{ApiListener, Listener};
    use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
        http_connection_manager::RouteSpecifier, HttpConnectionManager,
    };
    let host = |domain: &str, cluster: &str| ProtoVirtualHost {
        domains: vec![domain.into()],
        routes: vec![route(prefix(""), to_cluster(cluster))],
        ..Default::default()
    };
    let hcm = HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::RouteConfig(RouteConfiguration {
            virtual_hosts: vec![host("*", "fallback"), host("svc.example.com:443", "svc")],
            ..Default::default()
        })),
        http_filters: vec![router()],
        ..Default::default()
    };
    let listener = Listener {
        name: "svc.example.com:443".into(),
        api_listener: Some(ApiListener {
            api_listener: Some(any(&hcm)),
        }),
        ..Default::default()
    };
    let parsed = parse_listener_any(&any(&listener)).expect("valid");
    let RouteSource::Inline(rc) = &parsed.route_source else {
        panic!("inline routes");
    };
    let go = |authority| {
        let vh = rc.virtual_host(authority).expect("a host");
        cluster_of(route_call(
            vh,
            "/S/M",
            NO_HEADERS,
            parsed.max_stream_duration,
            &mut no_draws(),
        ))
        .map(|c| c.0.to_owned())
    };
    assert_eq!(go("SVC.example.com:443").as_deref(), Some("svc"));
    assert_eq!(go("other:443").as_deref(), Some("fallback"));
    let no_wildcard = RouteConfig {
        name: String::new(),
        virtual_hosts: vec![],
    };
    assert!(no_wildcard.virtual_host("x").is_none());
}

fn header_policy(name: &str, rewrite: Option<(&str, &str)>, terminal: bool) -> HashPolicy {
    HashPolicy {
        kind: HashPolicyKind::Header {
            name: name.to_owned(),
            rewrite: rewrite
                .map(|(p, s)| crate::resource::RegexRewrite::new(p, s).expect("a regex")),
        },
        terminal,
    }
}

#[test]
fn request_hash_from_headers_channel_id_rotate_xor_and_terminal() {
    let xxh = |s: &str| xxhash_rust::xxh64::xxh64(s.as_bytes(), 0);
    let headers: &[(&str, &str)] = &[("x-user", "alice"), ("x-tag", "a"), ("x-tag", "b")];
    // One header: XXH64 of its value; repeated values joined by `,`.
    let user = header_policy("x-user", None, false);
    assert_eq!(
        request_hash(std::slice::from_ref(&user), headers, 9),
        Some(xxh("alice"))
    );
    let tag = header_policy("x-tag", None, false);
    assert_eq!(
        request_hash(std::slice::from_ref(&tag), headers, 9),
        Some(xxh("a,b"))
    );
    // The rewrite applies to the value before hashing.
    let rewritten = header_policy("x-user", Some(("^(.)l", "\\1L")), false);
    assert_eq!(request_hash(&[rewritten], headers, 9), Some(xxh("aLice")));
    // Absent headers (and `-bin` ones) produce nothing: no hash at all, or the others' hash.
    let absent = header_policy("x-none", None, false);
    assert_eq!(
        request_hash(std::slice::from_ref(&absent), headers, 9),
        None
    );
    assert_eq!(
        request_hash(&[absent, user.clone()], headers, 9),
        Some(xxh("alice"))
    );
    // Several: h = rotl(h, 1) ^ p, in order.
    let both = request_hash(&[user.clone(), tag.clone()], headers, 9);
    assert_eq!(both, Some(xxh("alice").rotate_left(1) ^ xxh("a,b")));
    // The channel id is a policy like any other.
    let id = HashPolicy {
        kind: HashPolicyKind::ChannelId,
        terminal: false,
    };
    assert_eq!(request_hash(std::slice::from_ref(&id), headers, 9), Some(9));
    // A terminal policy that produced a hash ends the walk; one that produced none does not.
    let terminal_user = header_policy("x-user", None, true);
    assert_eq!(
        request_hash(&[terminal_user, tag.clone()], headers, 9),
        Some(xxh("alice"))
    );
    let terminal_absent = header_policy("x-none", None, true);
    assert_eq!(request_hash(&[terminal_absent, id], headers, 9), Some(9));
    assert_eq!(request_hash(&[], headers, 9), None);
}
