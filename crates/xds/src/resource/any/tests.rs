use super::*;
use crate::resource::matcher::{RESOURCE_REGEX_BUDGET, RESPONSE_REGEX_BUDGET};
use crate::resource::testing::header_regexes;
use crate::resource::SafeRegex;
use envoy_types::pb::envoy::config::route::v3::route::Action;
use envoy_types::pb::envoy::config::route::v3::route_action::ClusterSpecifier;
use envoy_types::pb::envoy::config::route::v3::route_match::PathSpecifier;
use envoy_types::pb::envoy::config::route::v3::{Route, RouteAction, RouteMatch, VirtualHost};
use prost::Message;

/// A RouteConfiguration `name` whose one route has `count` header matchers of `pattern`, in an `Any`.
fn route_config_with_regexes(name: &str, count: usize, pattern: &str) -> Any {
    let headers = header_regexes(count, pattern);
    let rc = rds::RouteConfiguration {
        name: name.into(),
        virtual_hosts: vec![VirtualHost {
            domains: vec!["*".into()],
            routes: vec![Route {
                r#match: Some(RouteMatch {
                    path_specifier: Some(PathSpecifier::Prefix(String::new())),
                    headers,
                    ..Default::default()
                }),
                action: Some(Action::Route(RouteAction {
                    cluster_specifier: Some(ClusterSpecifier::Cluster("c".into())),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    Any {
        type_url: ResourceType::RouteConfiguration.type_url().into(),
        value: rc.encode_to_vec(),
    }
}

#[test]
fn a_response_is_decoded_within_one_budget_for_all_its_resources() {
    // Ten resources, each well within its own budget (a few regexes short of it)...
    let pattern = "(?:.){9000}";
    let one = SafeRegex::new(pattern, true)
        .expect("within the per-regex limit")
        .compiled_size();
    let per_resource = RESOURCE_REGEX_BUDGET / one - 2;
    let resources: Vec<Any> = (0..10)
        .map(|i| route_config_with_regexes(&format!("rc{i}"), per_resource, pattern))
        .collect();
    assert!(matches!(
        decode(ResourceType::RouteConfiguration, &resources[9]),
        Decoded::Valid { .. }
    ));
    // ... but together past the response's: those that fit are valid, every later one is invalid, named,
    // its error naming the first regex that did not fit.
    let mut budget = RegexBudget::response();
    let decoded = decode_response_within(
        ResourceType::RouteConfiguration,
        &resources,
        &DecodeContext::default(),
        &mut budget,
    );
    let whole = RESPONSE_REGEX_BUDGET / (per_resource * one);
    assert!((1..10).contains(&whole), "{whole}");
    for (i, d) in decoded.iter().enumerate() {
        match d {
            Decoded::Valid { name, .. } => {
                assert!(i < whole, "{name} valid");
                assert_eq!(name, &format!("rc{i}"));
            }
            Decoded::Invalid { name, reason } => {
                assert!(i >= whole, "rc{i}: {reason}");
                assert_eq!(name.as_deref(), Some(format!("rc{i}").as_str()));
                assert!(
                    reason.starts_with("virtual_hosts[0].routes[0].match.headers[")
                        && reason.contains("regular expressions of the response exceed"),
                    "{reason}"
                );
            }
        }
    }
    // The work is bounded by the response's budget, not by the number of resources: once it is spent,
    // no regex is compiled.
    assert!(
        budget.compiled() <= RESPONSE_REGEX_BUDGET / one + 1,
        "{} compiled",
        budget.compiled()
    );
    // The public entry point decodes the same.
    assert_eq!(
        decode_response(ResourceType::RouteConfiguration, &resources),
        decoded
    );
}

#[test]
fn a_resource_over_its_budget_is_nacked_alone_and_the_next_response_has_a_fresh_budget() {
    // A resource over its own budget does not take the others of its response down.
    let pattern = "(?:.){9000}";
    let one = SafeRegex::new(pattern, true)
        .expect("within the per-regex limit")
        .compiled_size();
    let fits = RESOURCE_REGEX_BUDGET / one - 2;
    let response = vec![
        route_config_with_regexes("good0", fits, pattern),
        route_config_with_regexes("bad", 1500, pattern),
        route_config_with_regexes("good1", fits, pattern),
        route_config_with_regexes("good2", fits, pattern),
    ];
    let valid = |decoded: &[Decoded<Resource>]| -> Vec<String> {
        decoded
            .iter()
            .filter_map(|d| match d {
                Decoded::Valid { name, .. } => Some(name.clone()),
                Decoded::Invalid { .. } => None,
            })
            .collect()
    };
    let first = decode_response(ResourceType::RouteConfiguration, &response);
    assert_eq!(valid(&first), ["good0", "good1", "good2"], "{first:?}");
    assert!(matches!(&first[1], Decoded::Invalid { name: Some(n), .. } if n == "bad"));
    // The same response again (as a control plane resends it) decodes the same.
    assert_eq!(
        decode_response(ResourceType::RouteConfiguration, &response),
        first
    );
}
