//! What a hash policy's `regex_rewrite` may cost: it keeps only the capture groups its substitution
//! refers to, the search memory of those groups counts against the regex budget, and it is held to the
//! per-regex limit inside a resource as alone, whatever the engine built for it.

use super::*;
use crate::resource::matcher::RESOURCE_REGEX_BUDGET;
use regex_automata::util::primitives::PatternID;
use regex_automata::Input;

/// The rewrite of the one hash policy of a parsed one-route configuration.
fn the_rewrite(routes: &[Route]) -> &RegexRewrite {
    match &routes[0].hash_policies[0].kind {
        HashPolicyKind::Header {
            rewrite: Some(r), ..
        } => r,
        other => panic!("{other:?}"),
    }
}

/// The memory a rewrite's search of `value` needs: the search cache `captures_iter` takes from the
/// regex's pool, sized on the first search.
fn rewrite_memory(rewrite: &RegexRewrite, value: &[u8]) -> usize {
    let mut cache = rewrite.regex.create_cache();
    let mut caps = rewrite.regex.create_captures();
    rewrite
        .regex
        .search_captures_with(&mut cache, &Input::new(value), &mut caps);
    cache.memory_usage()
}

/// The groups a rewrite's regex keeps, the whole match included.
fn groups(rewrite: &RegexRewrite) -> usize {
    rewrite.regex.group_info().group_len(PatternID::ZERO)
}

#[test]
fn a_regex_rewrite_within_its_limit_needs_memory_to_rewrite_in_proportion_to_its_size() {
    // 300 groups, 34 KB compiled. Kept, the groups took a slot each per NFA state in the PikeVM's
    // cache, quadratic in the groups (11.6 MB here); `\1` needs only the first.
    let routes = routes_of(vec![hashing_route(&"([ab]*)".repeat(300), r"\1")]);
    let rewrite = the_rewrite(&routes);
    let value = "ab".repeat(1000);
    assert_eq!(rewrite.apply(&value), value.as_bytes());
    let (size, needed) = (
        rewrite.regex.memory_usage(),
        rewrite_memory(rewrite, value.as_bytes()),
    );
    assert!(
        needed <= 8 * size,
        "a rewrite of {size} compiled bytes needs {needed} bytes to rewrite a {}-byte value",
        value.len()
    );
}

#[test]
fn a_rewrite_keeps_only_the_groups_its_substitution_refers_to() {
    let r = RegexRewrite::new(r"(\w+)@(example|test)\.(com|org)", r"\1").expect("valid");
    assert_eq!(groups(&r), 2);
    assert_eq!(r.apply("to ann@test.org, bo@example.com"), b"to ann, bo");
    let r = RegexRewrite::new("(a)(b)(c)(d)", r"\2\1\0").expect("valid");
    assert_eq!(groups(&r), 3);
    assert_eq!(r.apply("xabcdx"), b"xbaabcdx");
    // Nested and repeated groups keep their numbers; a later one only groups.
    let r = RegexRewrite::new("((a)|(b))+(c)", r"\3-\2").expect("valid");
    assert_eq!(groups(&r), 4);
    assert_eq!(r.apply("abc"), b"b-a");
    let r = RegexRewrite::new("(a)(b)", "-").expect("valid");
    assert_eq!(groups(&r), 1);
    assert_eq!(r.apply("abab"), b"--");
    // A group the pattern lacks is empty, as before.
    let r = RegexRewrite::new("(a)", r"\9\1").expect("valid");
    assert_eq!(groups(&r), 2);
    assert_eq!(r.apply("a"), b"a");
}

#[test]
fn the_groups_a_rewrite_keeps_count_against_its_budget() {
    // Nine groups, then more of the same without groups: what a search takes grows with the groups
    // kept, and so does the charge.
    let pattern = "([ab]*)".repeat(9) + &"(?:[ab]*)".repeat(1000);
    let charged = |substitution: &str| {
        let mut budget = RegexBudget::resource();
        let rewrite =
            RegexRewrite::within(&pattern, substitution, &mut budget).expect("within the limit");
        let needed = rewrite_memory(&rewrite, "ab".repeat(100).as_bytes());
        (rewrite.regex.memory_usage(), budget.spent(), needed)
    };
    let (size1, charged1, needed1) = charged(r"\1");
    let (size9, charged9, needed9) = charged(r"\9");
    assert!(needed9 > 3 * needed1, "{needed1} {needed9}");
    for (size, charged, needed) in [(size1, charged1, needed1), (size9, charged9, needed9)] {
        assert!(charged >= size);
        assert!(
            needed <= 2 * charged,
            "{needed} bytes to search, {charged} charged ({size} compiled)"
        );
    }
    assert!(charged9 > 4 * size9, "{charged9} charged, {size9} compiled");
    // Four times as long: still within the limit with one group, over it with nine.
    let pattern = "([ab]*)".repeat(9) + &"(?:[ab]*)".repeat(4000);
    assert!(RegexRewrite::new(&pattern, r"\1").is_ok());
    let err = RegexRewrite::new(&pattern, r"\9").expect_err("over the limit of one regex");
    assert!(err.contains("more than the 1048576"), "{err}");
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
    let rc = config(vec![host(&["*"], vec![hashing_route(&pattern, "x")])]);
    let mut budget = RegexBudget::resource();
    let err = match parse_route_config_within(&rc, &mut budget) {
        Ok(mut rc) => {
            let routes = rc.virtual_hosts.remove(0).routes;
            let size = the_rewrite(&routes).regex.memory_usage();
            panic!("one regex of {size} compiled bytes accepted (the limit of one regex is 1 MiB)")
        }
        Err(e) => e,
    };
    assert_eq!(
        err.field,
        "virtual_hosts[0].routes[0].route.hash_policy[0].header.regex_rewrite.pattern.regex"
    );
    assert!(err.reason.contains("more than the 1048576"), "{err:.200}");
    // The NACK quotes the start of the pattern and its length, not 900 KB of it.
    assert!(
        err.reason.len() < 400,
        "{} bytes: {err:.200}",
        err.reason.len()
    );
    assert!(
        err.reason.contains(&format!("({} bytes)", pattern.len())),
        "{err:.300}"
    );
    // Charged what one regex may take, as a compilation stopped at the limit is.
    assert_eq!(budget.spent(), 1 << 20);
    assert!(budget.spent() < RESOURCE_REGEX_BUDGET);
}
