//! What matching a regex needs besides the regex: the search cache it takes from the regex's pool (and
//! keeps there, one per thread that matched at the same time). Run by the PikeVM alone, with no capture
//! group but the whole match, it is a few times the compiled size whatever the value, and the budget's
//! bound on compiled bytes bounds it too.

use super::*;
use regex_automata::Input;

/// The memory a search of `value` by `re` needs: the search cache `is_match` takes from the regex's
/// pool, sized on the first search.
fn match_memory(re: &Regex, value: &[u8]) -> usize {
    let mut cache = re.create_cache();
    let _ = re.search_half_with(&mut cache, &Input::new(value).earliest(true));
    cache.memory_usage()
}

#[test]
fn a_safe_regex_within_its_limit_needs_memory_to_match_in_proportion_to_its_size() {
    // 300 capture groups in 2 KB of pattern, far within the 1 MiB of one regex. The PikeVM's cache
    // holds a slot per kept group per NFA state: with every group kept it grew with the square of the
    // groups (11.6 MB for 34 KB compiled, 1.15 GB for 3,000 groups); a `safe_regex` keeps none.
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
fn the_memory_to_match_is_a_few_times_the_compiled_size_whatever_the_value() {
    // Patterns of several shapes, each with a short value and, where it is quick, a long one. A bounded
    // backtracker (which the meta engine runs on values up to 128 bytes) takes a bit per NFA state per
    // byte of the value and a stack frame per alternative left behind: 14 times the compiled size for
    // the star of 1,001 alternatives on 128 bytes, and it grows with the value.
    let long = 16 << 10;
    let repeated = (0..1000)
        .map(|i| format!("c{i:03}z+"))
        .collect::<Vec<_>>()
        .join("|");
    let alternatives = (0..3000)
        .map(|i| format!("w{i:07}"))
        .collect::<Vec<_>>()
        .join("|");
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            r"[a-z0-9-]+(?:\.[a-z0-9-]+)*".into(),
            vec!["abc.de".into(), "abc.".repeat(long / 4) + "x"],
        ),
        (
            r"/pkg\.v[0-9]+\.Service/(Get|List|Put)[A-Z][a-z]*".into(),
            vec![
                "/pkg.v1.Service/GetFoo".into(),
                "/pkg.v1.Service/GetF".to_owned() + &"x".repeat(long),
            ],
        ),
        ("([ab]*)".repeat(300), vec!["ab".into(), "ab".repeat(100)]),
        ("(?:.)".repeat(9000), vec!["a".repeat(9000)]),
        ("(?:foo|bar|baz|qux)".repeat(200), vec!["foo".repeat(200)]),
        ("(?:(?:a|bc|d*)*|x?)*".repeat(200), vec!["abcd".repeat(50)]),
        (format!("(?:{alternatives})+"), vec!["w0002999".repeat(25)]),
        ("(?:a?){1000}a{1000}".into(), vec!["a".repeat(1000)]),
        (
            format!("(?:a|{repeated})*"),
            vec!["a".into(), "a".repeat(128)],
        ),
    ];
    for (pattern, values) in cases {
        let re = SafeRegex::new(&pattern, true).expect("within the per-regex limit");
        for value in values {
            assert!(re.matches(&value), "{value:.40}");
            let needed = match_memory(&re.regex, value.as_bytes());
            assert!(
                needed <= 4 * re.compiled_size(),
                "{pattern:.40}: a regex of {} compiled bytes needs {needed} bytes to match a \
                 {}-byte value",
                re.compiled_size(),
                value.len()
            );
        }
    }
}
