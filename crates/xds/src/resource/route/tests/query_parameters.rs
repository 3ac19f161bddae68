//! A28: a route with `query_parameters` is ignored, and nothing else of it is looked at: not the
//! action, its hash policies, its retry policy, nor the route's filter overrides.

use super::*;

#[test]
fn a_route_with_query_parameters_is_ignored_whatever_its_action() {
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
