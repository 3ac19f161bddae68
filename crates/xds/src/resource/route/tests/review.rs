//! Review attacks on a RouteConfiguration's regexes (`regex_rewrite` of hash policies) and on A28's
//! ignored routes.

use super::*;
use regex_automata::Input;

/// A route to `c` hashing header `k` rewritten by `pattern` into `substitution`.
fn hashing_route(pattern: &str, substitution: &str) -> ProtoRoute {
    let mut ra = to_cluster("c");
    ra.hash_policy = vec![hash(
        header_hash(
            "k",
            Some(RegexMatchAndSubstitute {
                pattern: Some(RegexMatcher {
                    regex: pattern.into(),
                    ..Default::default()
                }),
                substitution: substitution.into(),
            }),
        ),
        false,
    )];
    route(prefix(""), action(ra))
}

/// The rewrite of the one hash policy of a parsed one-route configuration.
fn the_rewrite(routes: &[Route]) -> &RegexRewrite {
    match &routes[0].hash_policies[0].kind {
        HashPolicyKind::Header {
            rewrite: Some(r), ..
        } => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_regex_rewrite_within_its_limit_needs_memory_to_rewrite_in_proportion_to_its_size() {
    // As for `safe_regex`: 300 groups, 34 KB compiled; a rewrite needs the groups, so its PikeVM cache
    // holds a slot per group per state (quadratic in the groups).
    let routes = routes_of(vec![hashing_route(&"([ab]*)".repeat(300), r"\1")]);
    let rewrite = the_rewrite(&routes);
    // A value long enough for the PikeVM (the bounded backtracker takes short ones).
    let value = "ab".repeat(1000);
    assert_eq!(rewrite.apply(&value), value.as_bytes());
    let mut cache = rewrite.regex.create_cache();
    let mut caps = rewrite.regex.create_captures();
    rewrite
        .regex
        .search_captures_with(&mut cache, &Input::new(value.as_bytes()), &mut caps);
    let (size, needed) = (rewrite.regex.memory_usage(), cache.memory_usage());
    assert!(
        needed <= 8 * size,
        "a rewrite of {size} compiled bytes needs {needed} bytes to rewrite a {}-byte value",
        value.len()
    );
}

#[test]
fn a_regex_rewrite_is_held_to_the_per_regex_limit_inside_a_resource() {
    // An alternation of 100,000 literals (900 KB of pattern, within a 4 MiB response) is built as an
    // Aho-Corasick automaton without an NFA, so the NFA size limit (1 MiB) never applies to it.
    let pattern = (0..100_000)
        .map(|i| format!("w{i:07}"))
        .collect::<Vec<_>>()
        .join("|");
    let alone = RegexRewrite::new(&pattern, "x").map(|r| r.regex.memory_usage());
    assert!(alone.is_err(), "alone: {alone:?}");
    let rc = parse_route_config(&config(vec![host(
        &["*"],
        vec![hashing_route(&pattern, "x")],
    )]));
    if let Ok(mut rc) = rc {
        let routes = rc.virtual_hosts.remove(0).routes;
        let size = the_rewrite(&routes).regex.memory_usage();
        assert!(
            size <= 1 << 20,
            "one regex of {size} compiled bytes accepted (the limit of one regex is 1 MiB)"
        );
    }
}

#[test]
fn a_route_with_query_parameters_is_ignored_whatever_its_action() {
    // A28: nothing but `query_parameters` is looked at: not the action, its hash policies, its retry
    // policy, nor the route's filter overrides.
    let with_query = |mut r: ProtoRoute| {
        if let Some(m) = r.r#match.as_mut() {
            m.query_parameters.push(QueryParameterMatcher {
                name: "q".into(),
                ..Default::default()
            });
        }
        r
    };
    let mut empty_weights = to_cluster("x");
    empty_weights.cluster_specifier = Some(ClusterSpecifier::WeightedClusters(Default::default()));
    let mut bad_retry = to_cluster("x");
    bad_retry.retry_policy = Some(ProtoRetryPolicy {
        num_retries: Some(UInt32Value { value: 0 }),
        ..Default::default()
    });
    let mut bad_override = simple("", "x");
    bad_override
        .typed_per_filter_config
        .insert(String::new(), any_of_type(FAULT));
    let routes = routes_of(vec![
        with_query(route(prefix(""), action(empty_weights))),
        with_query(hashing_route("(", "")),
        with_query(route(prefix(""), action(bad_retry))),
        with_query(bad_override),
        with_query(route(prefix(""), action(to_cluster("")))),
        simple("", "kept"),
    ]);
    assert_eq!(routes.len(), 1, "{routes:?}");
    assert_eq!(routes[0].action, RouteAction::Cluster("kept".into()));
}
