use super::*;
use envoy_types::pb::envoy::r#type::v3::Int64Range;

/// A resource's regex budget.
fn budget() -> RegexBudget {
    RegexBudget::resource()
}

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
fn a_pattern_is_parsed_on_its_own_before_it_is_anchored() {
    // Written into `^(?:…)$`, this was the valid `^(?:a)|(b)$`, matching any value starting with `a`.
    let err = SafeRegex::new("a)|(b", true).expect_err("not a regex");
    assert_eq!(err, r#"invalid regex "a)|(b": unopened group at byte 1"#);
    let err = SafeRegex::new("[a", true).expect_err("not a regex");
    assert_eq!(
        err,
        r#"invalid regex "[a": unclosed character class at byte 0"#
    );
}

#[test]
fn perl_and_posix_classes_are_ascii_as_in_re2() {
    let w = SafeRegex::new(r"\w{100}", true).expect("small enough to repeat");
    assert!(w.matches("a_1".repeat(33).chars().chain(['Z']).collect::<String>()));
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
    let m = |p, ic| parse_string_matcher(&string_matcher(p, ic), &mut budget()).expect("valid");
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
    let err = parse_string_matcher(
        &string_matcher(MatchPattern::SafeRegex(regex("(")), false),
        &mut budget(),
    )
    .expect_err("bad regex");
    assert_eq!(err.field, "safe_regex.regex");
    let err = parse_string_matcher(
        &string_matcher(MatchPattern::Custom(Default::default()), false),
        &mut budget(),
    )
    .expect_err("custom");
    assert_eq!(err.field, "custom");
    assert!(parse_string_matcher(&ProtoStringMatcher::default(), &mut budget()).is_err());
}

#[test]
#[allow(deprecated)]
fn every_header_kind() {
    let check = |kind, value: Option<&str>| {
        parse_header_matcher(&header("X-Key", kind, false), &mut budget())
            .expect("valid")
            .matches(value.map(str::as_bytes))
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
    let m = parse_header_matcher(
        &header("X-Key", HeaderMatchSpecifier::PresentMatch(true), false),
        &mut budget(),
    )
    .expect("valid");
    assert_eq!(m.name, "x-key", "names are lower-cased");
}

#[test]
#[allow(deprecated)]
fn absent_headers_and_inversion() {
    let m = |kind, invert| {
        parse_header_matcher(&header("k", kind, invert), &mut budget()).expect("valid")
    };
    let exact = m(HeaderMatchSpecifier::ExactMatch("v".into()), false);
    assert!(!exact.matches(None));
    let inverted = m(HeaderMatchSpecifier::ExactMatch("v".into()), true);
    assert!(inverted.matches(Some(b"w")));
    assert!(!inverted.matches(Some(b"v")));
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
            p.matches(Some(b"x")),
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
#[allow(deprecated)]
fn a_value_that_is_not_utf8_is_present_and_matched_on_its_bytes() {
    // obs-text (bytes 0x80-0xFF) is a valid HTTP field value; grpc-go and C-core match the raw value.
    let value: &[u8] = b"caf\xe9-1";
    let m = |kind, invert| {
        parse_header_matcher(&header("k", kind, invert), &mut budget())
            .expect("valid")
            .matches(Some(value))
    };
    assert!(m(HeaderMatchSpecifier::PresentMatch(true), false));
    assert!(!m(HeaderMatchSpecifier::PresentMatch(false), false));
    assert!(m(HeaderMatchSpecifier::PresentMatch(false), true));
    assert!(m(HeaderMatchSpecifier::PrefixMatch("caf".into()), false));
    assert!(m(HeaderMatchSpecifier::SuffixMatch("-1".into()), false));
    assert!(m(HeaderMatchSpecifier::ContainsMatch("f".into()), false));
    assert!(m(HeaderMatchSpecifier::ContainsMatch("-1".into()), false));
    assert!(
        !m(HeaderMatchSpecifier::ContainsMatch("é".into()), false),
        "é is two other bytes"
    );
    assert!(!m(HeaderMatchSpecifier::ExactMatch("caf".into()), false));
    assert!(m(HeaderMatchSpecifier::ExactMatch("caf".into()), true));
    assert!(m(
        HeaderMatchSpecifier::SafeRegexMatch(regex("caf.-[0-9]")),
        false
    ));
    assert!(!m(
        HeaderMatchSpecifier::SafeRegexMatch(regex("caf-[0-9]")),
        false
    ));
    // Not a number: a range never matches, so its inversion does.
    let range = || HeaderMatchSpecifier::RangeMatch(Int64Range { start: 0, end: 10 });
    assert!(!m(range(), false));
    assert!(m(range(), true));
    let ignoring_case = |pattern: &str| {
        HeaderMatchSpecifier::StringMatch(string_matcher(
            MatchPattern::Contains(pattern.into()),
            true,
        ))
    };
    assert!(m(ignoring_case("CAF"), false));
}

#[test]
fn contains_finds_text_around_bytes_that_are_not_utf8() {
    for (value, pattern, expected) in [
        (&b"\xe9ab\xff"[..], "ab", true),
        (b"a\xc3b", "ab", false),
        (b"\xe0\xc3\xa9x", "\u{e9}x", true),
        (b"\xf0\x9f\x98", "x", false),
        (b"", "", true),
        (b"\xff", "", true),
    ] {
        let m = StringMatch::Contains {
            value: pattern.into(),
            ignore_case: false,
        };
        assert_eq!(m.matches(value), expected, "{value:?} contains {pattern:?}");
    }
}

#[test]
fn bad_header_matchers_are_nacked() {
    let err = parse_header_matcher(
        &header(
            "k",
            HeaderMatchSpecifier::RangeMatch(Int64Range { start: 5, end: 4 }),
            false,
        ),
        &mut budget(),
    )
    .expect_err("end before start");
    assert_eq!(err.field, "range_match");
    #[allow(deprecated)]
    let err = parse_header_matcher(
        &header("k", HeaderMatchSpecifier::SafeRegexMatch(regex("[")), false),
        &mut budget(),
    )
    .expect_err("bad regex");
    assert_eq!(err.field, "safe_regex_match.regex");
    let err = parse_header_matcher(
        &header(
            "k",
            HeaderMatchSpecifier::StringMatch(ProtoStringMatcher::default()),
            false,
        ),
        &mut budget(),
    )
    .expect_err("empty string matcher");
    assert_eq!(err.field, "string_match");
    let none = ProtoHeaderMatcher {
        name: "k".into(),
        ..Default::default()
    };
    assert!(parse_header_matcher(&none, &mut budget()).is_err());
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
mod match_memory;
