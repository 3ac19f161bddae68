//! Review attacks on a response's regex budget: a resource over its own budget does not take the others
//! down, and the next response starts afresh.

use super::*;

#[test]
fn a_resource_over_its_budget_is_nacked_alone_and_the_next_response_has_a_fresh_budget() {
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
