use super::*;
use crate::resource::duration::to_proto;
use crate::resource::testing::{any, any_of_type};
use envoy_types::pb::envoy::config::core::v3::{RuntimeFractionalPercent, TypedExtensionConfig};
use envoy_types::pb::envoy::config::route::v3::header_matcher::HeaderMatchSpecifier;
use envoy_types::pb::envoy::config::route::v3::route_action::hash_policy::{
    ConnectionProperties, Cookie, FilterState, Header, QueryParameter,
};
use envoy_types::pb::envoy::config::route::v3::route_action::MaxStreamDuration as ProtoMsd;
use envoy_types::pb::envoy::config::route::v3::route_match::ConnectMatcher;
use envoy_types::pb::envoy::config::route::v3::weighted_cluster::ClusterWeight as ProtoClusterWeight;
use envoy_types::pb::envoy::config::route::v3::{
    ClusterSpecifierPlugin, DirectResponseAction, FilterConfig,
    HeaderMatcher as ProtoHeaderMatcher, QueryParameterMatcher, RedirectAction,
    RetryPolicy as ProtoRetryPolicy,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{RegexMatchAndSubstitute, RegexMatcher};
use envoy_types::pb::envoy::r#type::v3::{FractionalPercent, Int64Range};
use envoy_types::pb::google::protobuf::UInt32Value;
use grpc_code::Code;

const FAULT: &str = "envoy.extensions.filters.http.fault.v3.HTTPFault";

fn prefix(p: &str) -> RouteMatch {
    RouteMatch {
        path_specifier: Some(PathSpecifier::Prefix(p.to_owned())),
        ..Default::default()
    }
}

fn action(ra: ProtoRouteAction) -> Option<Action> {
    Some(Action::Route(ra))
}

fn to_cluster(name: &str) -> ProtoRouteAction {
    ProtoRouteAction {
        cluster_specifier: Some(ClusterSpecifier::Cluster(name.to_owned())),
        ..Default::default()
    }
}

fn route(m: RouteMatch, action: Option<Action>) -> ProtoRoute {
    ProtoRoute {
        r#match: Some(m),
        action,
        ..Default::default()
    }
}

fn simple(p: &str, cluster: &str) -> ProtoRoute {
    route(prefix(p), action(to_cluster(cluster)))
}

fn host(domains: &[&str], routes: Vec<ProtoRoute>) -> ProtoVirtualHost {
    ProtoVirtualHost {
        domains: domains.iter().map(|d| d.to_string()).collect(),
        routes,
        ..Default::default()
    }
}

fn config(hosts: Vec<ProtoVirtualHost>) -> RouteConfiguration {
    RouteConfiguration {
        name: "rc".into(),
        virtual_hosts: hosts,
        ..Default::default()
    }
}

/// The routes of a one-host configuration with these routes.
fn routes_of(routes: Vec<ProtoRoute>) -> Vec<Route> {
    let mut rc = parse_route_config(&config(vec![host(&["*"], routes)])).expect("valid");
    rc.virtual_hosts.remove(0).routes
}

/// The NACK's field for a one-host configuration with these routes.
fn nack(routes: Vec<ProtoRoute>) -> String {
    parse_route_config(&config(vec![host(&["*"], routes)]))
        .expect_err("invalid")
        .field
}

#[test]
fn a_valid_configuration() {
    let rc = parse_route_config(&config(vec![
        host(&["a.example.com", "*.b.com"], vec![simple("/a.S/", "a")]),
        host(&["*"], vec![simple("", "default")]),
    ]))
    .expect("valid");
    assert_eq!(rc.name, "rc");
    assert_eq!(rc.virtual_hosts.len(), 2);
    assert_eq!(rc.virtual_hosts[0].domains, ["a.example.com", "*.b.com"]);
    let r = &rc.virtual_hosts[1].routes[0];
    assert_eq!(r.action, RouteAction::Cluster("default".into()));
    assert_eq!(
        r.matcher.path,
        PathMatcher::new(PathMatch::Prefix(String::new()), true)
    );
    assert_eq!(r.max_stream_duration, MaxStreamDuration::FromListener);
    assert_eq!(r.retry_policy, None);
}

#[test]
fn domains_are_required_and_valid() {
    let err = parse_route_config(&config(vec![host(&[], vec![])])).expect_err("no domains");
    assert_eq!(err.field, "virtual_hosts[0].domains");
    let err = parse_route_config(&config(vec![
        host(&["*"], vec![]),
        host(&["ok", "a*b"], vec![]),
    ]))
    .expect_err("bad pattern");
    assert_eq!(err.field, "virtual_hosts[1].domains[1]");
}

#[test]
fn path_specifiers() {
    let no_match = ProtoRoute {
        action: action(to_cluster("c")),
        ..Default::default()
    };
    assert_eq!(nack(vec![no_match]), "virtual_hosts[0].routes[0].match");
    let connect = RouteMatch {
        path_specifier: Some(PathSpecifier::ConnectMatcher(ConnectMatcher {})),
        ..Default::default()
    };
    assert_eq!(
        nack(vec![route(connect, action(to_cluster("c")))]),
        "virtual_hosts[0].routes[0].match"
    );
    let separated = RouteMatch {
        path_specifier: Some(PathSpecifier::PathSeparatedPrefix("/a".into())),
        ..Default::default()
    };
    assert_eq!(
        nack(vec![route(separated, action(to_cluster("c")))]),
        "virtual_hosts[0].routes[0].match"
    );
    assert_eq!(
        nack(vec![
            simple("", "c"),
            route(RouteMatch::default(), action(to_cluster("c")))
        ]),
        "virtual_hosts[0].routes[1].match"
    );
    let bad_regex = RouteMatch {
        path_specifier: Some(PathSpecifier::SafeRegex(RegexMatcher {
            regex: "(".into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    assert_eq!(
        nack(vec![route(bad_regex, action(to_cluster("c")))]),
        "virtual_hosts[0].routes[0].match.safe_regex.regex"
    );
}

#[test]
fn a_route_with_query_parameters_is_ignored_whatever_its_other_matchers() {
    // A28: the whole route is ignored, regardless of the other matchers, so none of them is validated.
    let with_query = |mut m: RouteMatch| {
        m.query_parameters.push(QueryParameterMatcher {
            name: "q".into(),
            ..Default::default()
        });
        route(m, action(to_cluster("ignored")))
    };
    let bad_regex = || RegexMatcher {
        regex: "(".into(),
        ..Default::default()
    };
    let mut bad_header = prefix("");
    #[allow(deprecated)]
    bad_header.headers.push(ProtoHeaderMatcher {
        name: "k".into(),
        header_match_specifier: Some(HeaderMatchSpecifier::SafeRegexMatch(bad_regex())),
        ..Default::default()
    });
    let bad_path = RouteMatch {
        path_specifier: Some(PathSpecifier::SafeRegex(bad_regex())),
        ..Default::default()
    };
    let mut bad_fraction = prefix("");
    bad_fraction.runtime_fraction = Some(RuntimeFractionalPercent {
        default_value: Some(FractionalPercent {
            numerator: 1,
            denominator: 99,
        }),
        ..Default::default()
    });
    let no_path = RouteMatch::default();
    let routes = routes_of(vec![
        with_query(bad_header),
        with_query(bad_path),
        with_query(bad_fraction),
        with_query(no_path),
        simple("", "kept"),
    ]);
    assert_eq!(routes.len(), 1, "{routes:?}");
    assert_eq!(routes[0].action, RouteAction::Cluster("kept".into()));
    assert_eq!(routes[0].index, 4);
}

#[test]
fn routes_that_can_never_match_are_ignored() {
    for kept in ["", "/", "/svc", "/svc/", "/svc/me"] {
        assert_eq!(
            routes_of(vec![simple(kept, "c")]).len(),
            1,
            "prefix {kept:?}"
        );
    }
    for ignored in ["svc", "//m", "/svc/method/x"] {
        assert!(
            routes_of(vec![simple(ignored, "c")]).is_empty(),
            "prefix {ignored:?}"
        );
    }
    let path = |p: &str| {
        route(
            RouteMatch {
                path_specifier: Some(PathSpecifier::Path(p.into())),
                ..Default::default()
            },
            action(to_cluster("c")),
        )
    };
    assert_eq!(routes_of(vec![path("/svc/m")]).len(), 1);
    for ignored in ["svc/m", "/svc", "/svc/", "//m", "/a/b/c"] {
        assert!(
            routes_of(vec![path(ignored)]).is_empty(),
            "path {ignored:?}"
        );
    }
}

#[test]
fn query_parameters_and_other_cluster_specifiers_ignore_the_route() {
    let mut m = prefix("");
    m.query_parameters.push(QueryParameterMatcher {
        name: "q".into(),
        ..Default::default()
    });
    let header = ProtoRouteAction {
        cluster_specifier: Some(ClusterSpecifier::ClusterHeader("x-cluster".into())),
        ..Default::default()
    };
    let inline = ProtoRouteAction {
        cluster_specifier: Some(ClusterSpecifier::InlineClusterSpecifierPlugin(
            Default::default(),
        )),
        ..Default::default()
    };
    let routes = routes_of(vec![
        route(m, action(to_cluster("q"))),
        route(prefix(""), action(header)),
        route(prefix(""), action(inline)),
        route(prefix(""), action(ProtoRouteAction::default())),
        simple("", "kept"),
    ]);
    assert_eq!(routes.len(), 1);
    assert_eq!(routes[0].action, RouteAction::Cluster("kept".into()));
}

#[test]
fn other_actions_keep_the_route_as_non_forwarding() {
    let routes = routes_of(vec![
        route(
            prefix("/a/"),
            Some(Action::Redirect(RedirectAction::default())),
        ),
        route(
            prefix("/b/"),
            Some(Action::DirectResponse(DirectResponseAction::default())),
        ),
        route(prefix("/c/"), None),
    ]);
    assert_eq!(routes.len(), 3);
    assert!(routes
        .iter()
        .all(|r| r.action == RouteAction::NonForwarding));
}

#[test]
fn header_matchers_are_parsed_with_their_path() {
    let mut m = prefix("");
    m.headers.push(ProtoHeaderMatcher {
        name: "X-A".into(),
        header_match_specifier: Some(HeaderMatchSpecifier::PresentMatch(true)),
        ..Default::default()
    });
    let routes = routes_of(vec![route(m.clone(), action(to_cluster("c")))]);
    assert_eq!(routes[0].matcher.headers[0].name, "x-a");
    m.headers.push(ProtoHeaderMatcher {
        name: "x-b".into(),
        header_match_specifier: Some(HeaderMatchSpecifier::RangeMatch(Int64Range {
            start: 2,
            end: 1,
        })),
        ..Default::default()
    });
    assert_eq!(
        nack(vec![route(m, action(to_cluster("c")))]),
        "virtual_hosts[0].routes[0].match.headers[1].range_match"
    );
}

#[test]
fn runtime_fraction_in_parts_per_million() {
    let with = |numerator, denominator| {
        let mut m = prefix("");
        m.runtime_fraction = Some(RuntimeFractionalPercent {
            default_value: Some(FractionalPercent {
                numerator,
                denominator,
            }),
            runtime_key: "ignored".into(),
        });
        route(m, action(to_cluster("c")))
    };
    let per_million = |numerator, denominator| {
        routes_of(vec![with(numerator, denominator)])[0]
            .matcher
            .fraction_per_million
    };
    assert_eq!(per_million(25, 0), Some(250_000), "HUNDRED");
    assert_eq!(per_million(25, 1), Some(2_500), "TEN_THOUSAND");
    assert_eq!(per_million(25, 2), Some(25), "MILLION");
    assert_eq!(per_million(500, 0), Some(1_000_000), "capped at a million");
    assert_eq!(per_million(u32::MAX, 0), Some(1_000_000));
    assert_eq!(
        nack(vec![with(1, 3)]),
        "virtual_hosts[0].routes[0].match.runtime_fraction.default_value.denominator"
    );
    assert_eq!(
        routes_of(vec![simple("", "c")])[0]
            .matcher
            .fraction_per_million,
        None
    );
}

#[allow(deprecated)]
fn weighted(entries: &[(&str, Option<u32>)]) -> ProtoRouteAction {
    ProtoRouteAction {
        cluster_specifier: Some(ClusterSpecifier::WeightedClusters(WeightedCluster {
            clusters: entries
                .iter()
                .map(|(n, w)| ProtoClusterWeight {
                    name: n.to_string(),
                    weight: w.map(|value| UInt32Value { value }),
                    ..Default::default()
                })
                .collect(),
            total_weight: Some(UInt32Value { value: 12345 }),
            ..Default::default()
        })),
        ..Default::default()
    }
}

#[test]
fn clusters_and_weighted_clusters() {
    assert_eq!(
        nack(vec![route(prefix(""), action(to_cluster("")))]),
        "virtual_hosts[0].routes[0].route.cluster"
    );
    let routes = routes_of(vec![route(
        prefix(""),
        action(weighted(&[
            ("a", Some(1)),
            ("zero", Some(0)),
            ("b", Some(3)),
        ])),
    )]);
    assert_eq!(
        routes[0].action,
        RouteAction::WeightedClusters(vec![
            ClusterWeight {
                name: "a".into(),
                weight: 1
            },
            ClusterWeight {
                name: "b".into(),
                weight: 3
            },
        ]),
        "0-weight entries dropped, total_weight not checked"
    );
    let field =
        |entries: &[(&str, Option<u32>)]| nack(vec![route(prefix(""), action(weighted(entries)))]);
    let base = "virtual_hosts[0].routes[0].route.weighted_clusters";
    assert_eq!(
        field(&[("a", Some(1)), ("", Some(1))]),
        format!("{base}.clusters[1].name")
    );
    assert_eq!(field(&[("a", None)]), format!("{base}.clusters[0].weight"));
    assert_eq!(field(&[("a", Some(0))]), format!("{base}.clusters"));
    assert_eq!(field(&[]), format!("{base}.clusters"));
    assert_eq!(
        field(&[("a", Some(u32::MAX)), ("b", Some(1))]),
        format!("{base}.clusters")
    );
    assert_eq!(
        routes_of(vec![route(
            prefix(""),
            action(weighted(&[("a", Some(u32::MAX - 1)), ("b", Some(1))]))
        )])
        .len(),
        1,
        "a sum of exactly 2^32 - 1 is fine"
    );
}

fn plugin(name: &str, optional: bool) -> ClusterSpecifierPlugin {
    ClusterSpecifierPlugin {
        extension: Some(TypedExtensionConfig {
            name: name.into(),
            typed_config: Some(any_of_type("grpc.lookup.v1.RouteLookupClusterSpecifier")),
        }),
        is_optional: optional,
    }
}

fn to_plugin(name: &str) -> ProtoRoute {
    route(
        prefix(""),
        action(ProtoRouteAction {
            cluster_specifier: Some(ClusterSpecifier::ClusterSpecifierPlugin(name.into())),
            ..Default::default()
        }),
    )
}

#[test]
fn cluster_specifier_plugins() {
    let with_plugins = |plugins: Vec<ClusterSpecifierPlugin>, routes| {
        let mut rc = config(vec![host(&["*"], routes)]);
        rc.cluster_specifier_plugins = plugins;
        parse_route_config(&rc)
    };
    let rc = with_plugins(
        vec![plugin("rls", true)],
        vec![to_plugin("rls"), simple("", "c")],
    )
    .expect("valid");
    assert_eq!(
        rc.virtual_hosts[0].routes.len(),
        1,
        "a route to an optional unknown plugin is ignored"
    );
    let err =
        with_plugins(vec![plugin("rls", false)], vec![]).expect_err("non-optional unknown plugin");
    assert_eq!(
        err.field,
        "cluster_specifier_plugins[0].extension.typed_config"
    );
    let err = with_plugins(vec![plugin("rls", true), plugin("rls", true)], vec![])
        .expect_err("duplicate");
    assert_eq!(err.field, "cluster_specifier_plugins[1].extension.name");
    let err =
        with_plugins(vec![plugin("rls", true)], vec![to_plugin("other")]).expect_err("undeclared");
    assert_eq!(
        err.field,
        "virtual_hosts[0].routes[0].route.cluster_specifier_plugin"
    );
    let no_extension = ClusterSpecifierPlugin {
        extension: None,
        is_optional: true,
    };
    let err = with_plugins(vec![no_extension], vec![]).expect_err("no extension");
    assert_eq!(err.field, "cluster_specifier_plugins[0].extension");
}

fn retry(retry_on: &str, num_retries: Option<u32>) -> ProtoRetryPolicy {
    ProtoRetryPolicy {
        retry_on: retry_on.into(),
        num_retries: num_retries.map(|value| UInt32Value { value }),
        ..Default::default()
    }
}

#[test]
fn a_route_retry_policy_replaces_the_virtual_host_one() {
    let mut with_own = to_cluster("own");
    with_own.retry_policy = Some(retry("internal", Some(3)));
    let mut with_unsupported = to_cluster("unsupported");
    with_unsupported.retry_policy = Some(retry("5xx", None));
    let mut vh = host(
        &["*"],
        vec![
            simple("/inherit/", "inherit"),
            route(prefix("/own/"), action(with_own)),
            route(prefix("/unsupported/"), action(with_unsupported)),
            route(prefix("/nf/"), None),
        ],
    );
    vh.retry_policy = Some(retry("unavailable,cancelled", None));
    let rc = parse_route_config(&config(vec![vh.clone()])).expect("valid");
    let host = &rc.virtual_hosts[0];
    let vhost_policy = host.retry_policy.as_ref().expect("the host's policy");
    assert_eq!(
        vhost_policy.retryable_codes(),
        &[Code::Unavailable, Code::Cancelled]
    );
    assert_eq!(host.routes[0].retry_policy.as_ref(), Some(vhost_policy));
    let own = host.routes[1]
        .retry_policy
        .as_ref()
        .expect("the route's policy");
    assert_eq!(
        (own.retryable_codes(), own.max_attempts()),
        (&[Code::Internal][..], 4)
    );
    assert_eq!(
        host.routes[2].retry_policy, None,
        "replaced, even by a policy with no gRPC code"
    );
    assert_eq!(host.routes[3].retry_policy, None, "non-forwarding");

    vh.retry_policy = Some(retry("unavailable", Some(0)));
    let err = parse_route_config(&config(vec![vh])).expect_err("0 retries");
    assert_eq!(err.field, "virtual_hosts[0].retry_policy.num_retries");
    let mut bad = to_cluster("c");
    bad.retry_policy = Some(retry("unavailable", Some(0)));
    assert_eq!(
        nack(vec![route(prefix(""), action(bad))]),
        "virtual_hosts[0].routes[0].route.retry_policy.num_retries"
    );
}

#[test]
fn max_stream_duration_precedence() {
    let with = |header_max: Option<Duration>, max: Option<Duration>| {
        let mut ra = to_cluster("c");
        ra.max_stream_duration = Some(ProtoMsd {
            grpc_timeout_header_max: header_max.map(to_proto),
            max_stream_duration: max.map(to_proto),
            grpc_timeout_header_offset: Some(to_proto(Duration::from_secs(1))),
        });
        routes_of(vec![route(prefix(""), action(ra))])[0].max_stream_duration
    };
    let s = Duration::from_secs;
    assert_eq!(with(None, None), MaxStreamDuration::FromListener);
    assert_eq!(with(None, Some(s(5))), MaxStreamDuration::Limit(s(5)));
    assert_eq!(with(None, Some(s(0))), MaxStreamDuration::Unlimited);
    assert_eq!(with(Some(s(2)), Some(s(5))), MaxStreamDuration::Limit(s(2)));
    assert_eq!(
        with(Some(s(0)), Some(s(5))),
        MaxStreamDuration::Unlimited,
        "header max wins even at 0"
    );
    assert_eq!(
        MaxStreamDuration::FromListener.resolve(Some(s(3))),
        Some(s(3))
    );
    assert_eq!(MaxStreamDuration::Unlimited.resolve(Some(s(3))), None);
    let mut ra = to_cluster("c");
    ra.max_stream_duration = Some(ProtoMsd {
        max_stream_duration: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: -1,
            nanos: 0,
        }),
        ..Default::default()
    });
    assert_eq!(
        nack(vec![route(prefix(""), action(ra))]),
        "virtual_hosts[0].routes[0].route.max_stream_duration.max_stream_duration"
    );
}

fn hash(spec: PolicySpecifier, terminal: bool) -> ProtoHashPolicy {
    ProtoHashPolicy {
        policy_specifier: Some(spec),
        terminal,
    }
}

fn header_hash(name: &str, rewrite: Option<RegexMatchAndSubstitute>) -> PolicySpecifier {
    PolicySpecifier::Header(Header {
        header_name: name.into(),
        regex_rewrite: rewrite,
    })
}

/// A route to `c` hashing header `k` rewritten by `pattern` into `substitution`.
fn hashing_route(pattern: &str, substitution: &str) -> ProtoRoute {
    let rewrite = RegexMatchAndSubstitute {
        pattern: Some(RegexMatcher {
            regex: pattern.into(),
            ..Default::default()
        }),
        substitution: substitution.into(),
    };
    let mut ra = to_cluster("c");
    ra.hash_policy = vec![hash(header_hash("k", Some(rewrite)), false)];
    route(prefix(""), action(ra))
}

#[test]
fn hash_policies_keep_header_and_channel_id_only() {
    let mut ra = to_cluster("c");
    ra.hash_policy = vec![
        hash(PolicySpecifier::Cookie(Cookie::default()), false),
        hash(header_hash("X-Key", None), false),
        hash(
            PolicySpecifier::ConnectionProperties(ConnectionProperties { source_ip: true }),
            false,
        ),
        hash(
            PolicySpecifier::QueryParameter(QueryParameter { name: "q".into() }),
            false,
        ),
        hash(
            PolicySpecifier::FilterState(FilterState {
                key: "other".into(),
            }),
            false,
        ),
        hash(
            PolicySpecifier::FilterState(FilterState {
                key: CHANNEL_ID_KEY.into(),
            }),
            true,
        ),
    ];
    let routes = routes_of(vec![route(prefix(""), action(ra))]);
    assert_eq!(
        routes[0].hash_policies,
        vec![
            HashPolicy {
                kind: HashPolicyKind::Header {
                    name: "x-key".into(),
                    rewrite: None
                },
                terminal: false
            },
            HashPolicy {
                kind: HashPolicyKind::ChannelId,
                terminal: true
            },
        ]
    );
}

#[test]
fn hash_policy_errors() {
    let field = |spec| {
        let mut ra = to_cluster("c");
        ra.hash_policy = vec![hash(header_hash("ok", None), false), hash(spec, false)];
        nack(vec![route(prefix(""), action(ra))])
    };
    let base = "virtual_hosts[0].routes[0].route.hash_policy[1]";
    assert_eq!(
        field(header_hash("", None)),
        format!("{base}.header.header_name")
    );
    let rewrite = |pattern: Option<&str>| {
        Some(RegexMatchAndSubstitute {
            pattern: pattern.map(|p| RegexMatcher {
                regex: p.into(),
                ..Default::default()
            }),
            substitution: "x".into(),
        })
    };
    assert_eq!(
        field(header_hash("k", rewrite(Some("(")))),
        format!("{base}.header.regex_rewrite.pattern.regex")
    );
    assert_eq!(
        field(header_hash("k", rewrite(None))),
        format!("{base}.header.regex_rewrite.pattern")
    );
}

#[test]
fn regex_rewrite_uses_re2_substitutions() {
    let r = RegexRewrite::new("([a-z]+)-([0-9]+)", r"\2:\1$").expect("valid");
    assert_eq!(
        r.apply("ab-12 cd-34"),
        b"12:ab$ 34:cd$",
        "every match, unanchored"
    );
    let r = RegexRewrite::new("a", r"\\").expect("valid");
    assert_eq!(r.apply("bab"), br"b\b");
    // The bytes of a value that is not UTF-8 are kept; an empty match at every position.
    let r = RegexRewrite::new("x*", "-").expect("valid");
    assert_eq!(r.apply(b"a\xe9"), b"-a-\xe9-");
    assert!(RegexRewrite::new("[", "").is_err());
}

#[test]
fn filter_overrides_are_validated_everywhere() {
    let unknown = || {
        [("fault".to_string(), any_of_type(FAULT))]
            .into_iter()
            .collect()
    };
    let optional = || {
        [(
            "fault".to_string(),
            any(&FilterConfig {
                config: Some(any_of_type(FAULT)),
                is_optional: true,
                disabled: false,
            }),
        )]
        .into_iter()
        .collect()
    };
    let mut vh = host(&["*"], vec![simple("", "c")]);
    vh.typed_per_filter_config = unknown();
    let err = parse_route_config(&config(vec![vh.clone()])).expect_err("vhost override");
    assert_eq!(
        err.field,
        "virtual_hosts[0].typed_per_filter_config[\"fault\"]"
    );
    vh.typed_per_filter_config = optional();
    assert!(parse_route_config(&config(vec![vh])).is_ok());

    let mut r = simple("", "c");
    r.typed_per_filter_config = unknown();
    assert_eq!(
        nack(vec![r]),
        "virtual_hosts[0].routes[0].typed_per_filter_config[\"fault\"]"
    );

    let mut ra = weighted(&[("a", Some(1))]);
    if let Some(ClusterSpecifier::WeightedClusters(wc)) = &mut ra.cluster_specifier {
        wc.clusters[0].typed_per_filter_config = unknown();
    }
    assert_eq!(
        nack(vec![route(prefix(""), action(ra))]),
        "virtual_hosts[0].routes[0].route.weighted_clusters.clusters[0].typed_per_filter_config[\"fault\"]"
    );
}

#[test]
fn from_an_any() {
    let rc = config(vec![host(&["*"], vec![simple("", "c")])]);
    let parsed = parse_route_config_any(&any(&rc)).expect("valid");
    assert_eq!(
        parsed.virtual_hosts[0].routes[0].action,
        RouteAction::Cluster("c".into())
    );
    assert!(parse_route_config_any(&any_of_type("envoy.config.cluster.v3.Cluster")).is_err());
}

#[test]
fn routes_keep_their_name_and_their_place_in_the_resource() {
    let named = ProtoRoute {
        name: "to-a".into(),
        ..simple("/a.S/", "a")
    };
    // A prefix no gRPC path can match: the route is ignored, and still counts for the places after it.
    let ignored = simple("no-slash", "x");
    let mut rc = parse_route_config(&config(vec![ProtoVirtualHost {
        name: "vh".into(),
        ..host(&["*"], vec![named, ignored, simple("", "b")])
    }]))
    .expect("valid");
    let vhost = rc.virtual_hosts.remove(0);
    assert_eq!(vhost.name, "vh");
    let kept: Vec<(&str, usize)> = vhost
        .routes
        .iter()
        .map(|r| (r.name.as_str(), r.index))
        .collect();
    assert_eq!(kept, [("to-a", 0), ("", 2)]);
}

mod budget;
mod query_parameters;
mod rewrite;
