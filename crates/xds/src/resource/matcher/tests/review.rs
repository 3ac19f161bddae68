//! Review attacks on the regex budget: what a regex within its budget costs to *match*, which the budget
//! (compiled bytes) does not count.

use super::*;
use regex_automata::Input;

/// The memory a search of `value` by `re` needs: the search cache `is_match` takes from the regex's
/// pool (and keeps there, one per thread that matched), sized on the first search.
fn match_memory(re: &Regex, value: &[u8]) -> usize {
    let mut cache = re.create_cache();
    let _ = re.search_half_with(&mut cache, &Input::new(value).earliest(true));
    cache.memory_usage()
}

#[test]
fn a_safe_regex_within_its_limit_needs_memory_to_match_in_proportion_to_its_size() {
    // 300 capture groups in 2 KB of pattern: 34 KB compiled, far within the 1 MiB of one regex. The
    // PikeVM's cache holds a slot per group per NFA state, so it grows with the square of the groups:
    // 11.6 MB here, 1.15 GB for 3,000 groups (336 KB compiled; 49 of them fit in one resource's budget).
    let re = SafeRegex::new(&"([ab]*)".repeat(300), true).expect("within the per-regex limit");
    let value = "ab".repeat(100);
    assert!(re.matches(&value));
    let needed = match_memory(&re.regex, value.as_bytes());
    assert!(
        needed <= 8 * re.compiled_size(),
        "a regex of {} compiled bytes needs {needed} bytes to match a {}-byte value",
        re.compiled_size(),
        value.len()
    );
}

#[test]
#[ignore = "a probe (wall-clock figures, printed): cargo test -p grpc-xds --lib probe_ -- --ignored --nocapture"]
fn probe_nfa_only_match_cost() {
    // The same regex, NFA only (as compiled here) and with the lazy DFA, on an 8 KiB value.
    for (pat, k) in [
        ("(?:[ab]*)", 1000usize),
        ("(?:[a-z]+-?)", 2000),
        ("(?:.)", 8192),
    ] {
        let p = format!("^(?:{})$", pat.repeat(k));
        let mut budget = RegexBudget::resource();
        let nfa = budget.compile(&p, &p, false).expect("fits");
        let dfa = Regex::builder()
            .syntax(syntax::Config::new().unicode(false).utf8(false))
            .configure(Regex::config().utf8_empty(false))
            .build(&p)
            .expect("builds");
        let value = "ab".repeat(4096);
        let t = std::time::Instant::now();
        let a = nfa.is_match(value.as_bytes());
        let tn = t.elapsed();
        let t = std::time::Instant::now();
        let b = dfa.is_match(value.as_bytes());
        let td = t.elapsed();
        eprintln!(
            "{pat} x{k}: {} bytes; NFA only {tn:?} ({a}), lazy DFA {td:?} ({b})",
            nfa.memory_usage()
        );
    }
}
