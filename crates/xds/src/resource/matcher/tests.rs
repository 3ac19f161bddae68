use super::*;
use envoy_types::pb::envoy::r#type::v3::Int64Range;

fn regex(pattern: &str) -> RegexMatcher {
    RegexMatcher {
        regex: pattern.to_owned(),
        ..Default::default()
    }
}

fn header(name: &str, kind: HeaderMatchSpecifier, invert: bool) -> ProtoHeaderMatcher {
    ProtoHeaderMatcher {
        name: name.to_owned(),
        header_match_specifier: Some(kind),
        invert_match: invert,
        ..Default::default()
    }
}

fn string_matcher(p: MatchPattern, ignore_case: bool) -> ProtoStringMatcher {
    ProtoStringMatcher {
        match_pattern: Some(p),
        ignore_case,
    }
}

#[test]
fn safe_regex_matches_the_whole_value() {
    let re = SafeRegex::new("a+b", true).expect("compiles");
    assert!(re.matches("aab"));
    assert!(!re.matches("xaab"), "anchored at the start");
    assert!(!re.matches("aabx"), "anchored at the end");
    let alt = SafeRegex::new("a|b", true).expect("compiles");
    assert!(
        !alt.matches("ab"),
        "the alternation is grouped inside the anchors"
    );
    let ci = SafeRegex::new("ab", false).expect("compiles");
    assert!(ci.matches("AB"));
    assert!(!re.matches("AAB"));
    assert!(SafeRegex::new("(", true).is_err());
    assert!(
        SafeRegex::new("a{100000}{100000}", true).is_err(),
        "compiled size is bounded"
    );
}

#[test]
fn perl_and_posix_classes_are_ascii_as_in_re2() {
    let w = SafeRegex::new(r"\w{100}", true).expect("small enough to repeat");
    assert!(w.matches(&"a_1".repeat(33).chars().chain(['Z']).collect::<String>()));
    assert!(!SafeRegex::new(r"\w", true).expect("compiles").matches("é"));
    let mixed = SafeRegex::new(r"\d{20}-[[:alpha:]]+\s", true).expect("compiles");
    assert!(mixed.matches("01234567890123456789-ab "));
    assert!(SafeRegex::new(r"a.b", true)
        .expect("compiles")
        .matches("a-b"));
    assert!(SafeRegex::new(r"\pL", true).is_err(), "no Unicode classes");
}

#[test]
fn string_matchers_with_and_without_case() {
    let m = |p, ic| parse_string_matcher(&string_matcher(p, ic)).expect("valid");
    let exact = m(MatchPattern::Exact("Foo".into()), false);
    assert!(exact.matches("Foo") && !exact.matches("foo") && !exact.matches("Foox"));
    let exact_ic = m(MatchPattern::Exact("Foo".into()), true);
    assert!(exact_ic.matches("fOO") && !exact_ic.matches("fOOx"));
    let prefix = m(MatchPattern::Prefix("Ab".into()), true);
    assert!(prefix.matches("abc") && !prefix.matches("cab"));
    let suffix = m(MatchPattern::Suffix("Ab".into()), false);
    assert!(suffix.matches("cAb") && !suffix.matches("cab"));
    let contains = m(MatchPattern::Contains("B".into()), true);
    assert!(contains.matches("abc") && !contains.matches("ac"));
    let re = m(MatchPattern::SafeRegex(regex("[0-9]+")), true);
    assert!(re.matches("123") && !re.matches("12a"));
}

#[test]
fn bad_string_matchers_are_nacked_with_their_field() {
    let err = parse_string_matcher(&string_matcher(MatchPattern::SafeRegex(regex("(")), false))
        .expect_err("bad regex");
    assert_eq!(err.field, "safe_regex.regex");
    let err = parse_string_matcher(&string_matcher(
        MatchPattern::Custom(Default::default()),
        false,
    ))
    .expect_err("custom");
    assert_eq!(err.field, "custom");
    assert!(parse_string_matcher(&ProtoStringMatcher::default()).is_err());
}

#[test]
#[allow(deprecated)]
fn every_header_kind() {
    let check = |kind, value: Option<&str>| {
        parse_header_matcher(&header("X-Key", kind, false))
            .expect("valid")
            .matches(value)
    };
    assert!(check(
        HeaderMatchSpecifier::ExactMatch("v".into()),
        Some("v")
    ));
    assert!(
        !check(HeaderMatchSpecifier::ExactMatch("v".into()), Some("V")),
        "exact is case-sensitive"
    );
    assert!(check(
        HeaderMatchSpecifier::PrefixMatch("ab".into()),
        Some("abc")
    ));
    assert!(check(
        HeaderMatchSpecifier::SuffixMatch("bc".into()),
        Some("abc")
    ));
    assert!(check(
        HeaderMatchSpecifier::ContainsMatch("b".into()),
        Some("abc")
    ));
    assert!(!check(
        HeaderMatchSpecifier::ContainsMatch("B".into()),
        Some("abc")
    ));
    assert!(check(
        HeaderMatchSpecifier::SafeRegexMatch(regex("a.c")),
        Some("abc")
    ));
    assert!(!check(
        HeaderMatchSpecifier::SafeRegexMatch(regex("a.c")),
        Some("abcd")
    ));
    let range = || HeaderMatchSpecifier::RangeMatch(Int64Range { start: -5, end: 10 });
    assert!(check(range(), Some("-5")));
    assert!(check(range(), Some("9")));
    assert!(!check(range(), Some("10")), "the end is exclusive");
    assert!(!check(range(), Some("3.0")), "an int64 only");
    assert!(!check(range(), Some("99999999999999999999")));
    assert!(check(HeaderMatchSpecifier::PresentMatch(true), Some("")));
    assert!(check(
        HeaderMatchSpecifier::StringMatch(string_matcher(MatchPattern::Exact("V".into()), true)),
        Some("v")
    ));
    let m = parse_header_matcher(&header(
        "X-Key",
        HeaderMatchSpecifier::PresentMatch(true),
        false,
    ))
    .expect("valid");
    assert_eq!(m.name, "x-key", "names are lower-cased");
}

#[test]
#[allow(deprecated)]
fn absent_headers_and_inversion() {
    let m = |kind, invert| parse_header_matcher(&header("k", kind, invert)).expect("valid");
    let exact = m(HeaderMatchSpecifier::ExactMatch("v".into()), false);
    assert!(!exact.matches(None));
    let inverted = m(HeaderMatchSpecifier::ExactMatch("v".into()), true);
    assert!(inverted.matches(Some("w")));
    assert!(!inverted.matches(Some("v")));
    assert!(
        !inverted.matches(None),
        "invert does not rescue an absent header"
    );
    // present_match: b matches when presence == b, then invert flips.
    for (b, invert, present, absent) in [
        (true, false, true, false),
        (false, false, false, true),
        (true, true, false, true),
        (false, true, true, false),
    ] {
        let p = m(HeaderMatchSpecifier::PresentMatch(b), invert);
        assert_eq!(
            p.matches(Some("x")),
            present,
            "present_match {b} invert {invert}"
        );
        assert_eq!(
            p.matches(None),
            absent,
            "present_match {b} invert {invert}, absent"
        );
    }
}

#[test]
fn bad_header_matchers_are_nacked() {
    let err = parse_header_matcher(&header(
        "k",
        HeaderMatchSpecifier::RangeMatch(Int64Range { start: 5, end: 4 }),
        false,
    ))
    .expect_err("end before start");
    assert_eq!(err.field, "range_match");
    #[allow(deprecated)]
    let err = parse_header_matcher(&header(
        "k",
        HeaderMatchSpecifier::SafeRegexMatch(regex("[")),
        false,
    ))
    .expect_err("bad regex");
    assert_eq!(err.field, "safe_regex_match.regex");
    let err = parse_header_matcher(&header(
        "k",
        HeaderMatchSpecifier::StringMatch(ProtoStringMatcher::default()),
        false,
    ))
    .expect_err("empty string matcher");
    assert_eq!(err.field, "string_match");
    let none = ProtoHeaderMatcher {
        name: "k".into(),
        ..Default::default()
    };
    assert!(parse_header_matcher(&none).is_err());
}

#[test]
fn path_matchers_and_case() {
    let p = PathMatcher::new(PathMatch::Prefix("/Svc/".into()), true);
    assert!(p.matches("/Svc/M") && !p.matches("/svc/M"));
    let p = PathMatcher::new(PathMatch::Prefix("/Svc/".into()), false);
    assert!(p.matches("/svc/M") && p.matches("/SVC/m"));
    let p = PathMatcher::new(PathMatch::Prefix(String::new()), true);
    assert!(p.matches("/a/b"), "the empty prefix matches every path");
    let p = PathMatcher::new(PathMatch::Exact("/S/M".into()), true);
    assert!(p.matches("/S/M") && !p.matches("/S/M2") && !p.matches("/s/m"));
    let p = PathMatcher::new(PathMatch::Exact("/S/M".into()), false);
    assert!(p.matches("/s/m"));
    let re = SafeRegex::new("/S/.*", false).expect("compiles");
    let p = PathMatcher::new(PathMatch::Regex(re), false);
    assert!(p.matches("/s/x") && !p.matches("/t/x"));
}
