//! The regex budget of a RouteConfiguration (`matcher`'s `RegexBudget`): the review's resource of 1,500
//! large header regexes is NACKed at the first that does not fit, and ordinary ones fit by the thousand.

use super::*;
use crate::resource::matcher::RESOURCE_REGEX_BUDGET;
use crate::resource::testing::header_regexes;
use crate::resource::{HeaderMatch, SafeRegex, StringMatch};

/// A route to `c` whose match has `count` header matchers, each the `safe_regex_match` `pattern`.
fn route_with_header_regexes(count: usize, pattern: &str) -> ProtoRoute {
    let mut m = prefix("");
    m.headers = header_regexes(count, pattern);
    route(m, action(to_cluster("c")))
}

#[test]
fn a_resource_whose_regexes_exceed_the_budget_is_nacked_at_the_first_over_it() {
    // The review's RouteConfiguration: 1,500 header matchers of `(?:.){9000}`, each within the per-regex
    // limit, about 35 KB on the wire (it was accepted, holding 1.4 GB of automata).
    let pattern = "(?:.){9000}";
    let one = SafeRegex::new(pattern, true)
        .expect("within the per-regex limit")
        .compiled_size();
    let rc = config(vec![host(
        &["*"],
        vec![route_with_header_regexes(1500, pattern)],
    )]);
    let mut budget = RegexBudget::resource();
    let err = match parse_route_config_within(&rc, &mut budget) {
        Ok(_) => panic!("1,500 regexes of {one} compiled bytes each were accepted"),
        Err(e) => e,
    };
    // The NACK names the first regex that does not fit: about as many fit as the budget holds (the last
    // may fail a little early, as compiling needs some room beyond the final size)...
    assert!(
        err.reason.contains("budget of 16777216 compiled bytes"),
        "{err}"
    );
    let first_over: usize = err
        .field
        .strip_prefix("virtual_hosts[0].routes[0].match.headers[")
        .and_then(|rest| rest.strip_suffix("].safe_regex_match.regex"))
        .and_then(|i| i.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    let fit = RESOURCE_REGEX_BUDGET / one;
    assert!(
        first_over <= fit && first_over + 1 >= fit && fit < 100,
        "failed at {first_over}, {fit} of {one} bytes fit"
    );
    // ... and the parse stopped there: the regexes that fit, then that one, and no other was compiled.
    assert_eq!(budget.compiled(), first_over + 1);
    assert_eq!(
        budget.spent(),
        RESOURCE_REGEX_BUDGET,
        "all of it, and no more"
    );
    assert_eq!(parse_route_config(&rc).expect_err("the same NACK"), err);
    // Those that fit are accepted, and hold no more than the budget.
    let rc = config(vec![host(
        &["*"],
        vec![route_with_header_regexes(first_over, pattern)],
    )]);
    let parsed = parse_route_config(&rc).expect("within the budget");
    let held: usize = parsed.virtual_hosts[0].routes[0]
        .matcher
        .headers
        .iter()
        .map(|h| match &h.kind {
            HeaderMatch::String(StringMatch::Regex(re)) => re.compiled_size(),
            other => panic!("{other:?}"),
        })
        .sum();
    assert!(held <= RESOURCE_REGEX_BUDGET, "{held}");
}

#[test]
fn a_resource_with_many_ordinary_regexes_parses() {
    // 1,000 routes, each with a path regex and a header regex.
    let routes = (0..1000)
        .map(|i| {
            let mut r = route_with_header_regexes(1, "[a-z0-9-]+");
            let m = r.r#match.as_mut().expect("a match");
            m.path_specifier = Some(PathSpecifier::SafeRegex(RegexMatcher {
                regex: format!(r"/pkg{i}\.v[0-9]+\.Service/(Get|List|Put)[A-Z][a-z]*"),
                ..Default::default()
            }));
            r
        })
        .collect();
    let mut budget = RegexBudget::resource();
    let rc = parse_route_config_within(&config(vec![host(&["*"], routes)]), &mut budget)
        .expect("ordinary regexes fit");
    assert_eq!(rc.virtual_hosts[0].routes.len(), 1000);
    assert_eq!(budget.compiled(), 2000);
    assert!(
        budget.spent() < RESOURCE_REGEX_BUDGET / 2,
        "{}",
        budget.spent()
    );
}
