//! The matchers of a RouteConfiguration's routes (gRFC A28, A63; the envoy `RouteMatch` path specifiers
//! and `HeaderMatcher`): each is parsed from its proto into a typed value that can only hold a valid
//! matcher, and answers `matches` for one value. `safe_regex` is RE2 syntax (the `regex` crate, linear
//! time) anchored to the whole value; `max_program_size` is ignored, but compiled programs are bounded so
//! that a control plane cannot make the client hold large automata. As in RE2, `\w`, `\d`, `\s` and
//! the POSIX classes are ASCII, which also keeps programs small; regexes run on bytes, so `.` is one
//! byte. gRPC paths and header values are ASCII, where this is RE2's behaviour exactly; Unicode classes
//! (`\pL`) are not supported (a NACK).
//!
//! Not here: which header value a call shows (the header view of `routing`), runtime fractions, query
//! parameters, and the route-level "route ignored" rules (all in `route`).

use envoy_types::pb::envoy::config::route::v3::header_matcher::HeaderMatchSpecifier;
use envoy_types::pb::envoy::config::route::v3::HeaderMatcher as ProtoHeaderMatcher;
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::envoy::r#type::matcher::v3::{
    RegexMatcher, StringMatcher as ProtoStringMatcher,
};
use regex::bytes::{Regex, RegexBuilder};

use super::ResourceError;

/// The compiled size bound of one regular expression: generous for real routes, small enough that many
/// of them stay cheap.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A compiled `safe_regex` that must match a whole value.
#[derive(Clone, Debug)]
pub struct SafeRegex {
    /// The pattern as the resource wrote it.
    pattern: String,
    /// Whether case matters.
    case_sensitive: bool,
    /// `^(?:pattern)$`, compiled.
    regex: Regex,
}

impl SafeRegex {
    /// Compiles `pattern` (RE2 syntax) to match whole values, ignoring case when `case_sensitive` is
    /// false.
    pub fn new(pattern: &str, case_sensitive: bool) -> Result<SafeRegex, String> {
        let regex = RegexBuilder::new(&format!("^(?:{pattern})$"))
            .unicode(false)
            .case_insensitive(!case_sensitive)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| format!("invalid regex {pattern:?}: {e}"))?;
        Ok(SafeRegex {
            pattern: pattern.to_owned(),
            case_sensitive,
            regex,
        })
    }

    /// The pattern as the resource wrote it (without the anchors).
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether the whole of `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        self.regex.is_match(value.as_bytes())
    }
}

impl PartialEq for SafeRegex {
    fn eq(&self, other: &SafeRegex) -> bool {
        self.pattern == other.pattern && self.case_sensitive == other.case_sensitive
    }
}

impl Eq for SafeRegex {}

/// `pattern` compiled unanchored (for `regex_rewrite`, which replaces every match), with the same bounds.
pub(crate) fn compile_unanchored(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(pattern)
        .unicode(false)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| format!("invalid regex {pattern:?}: {e}"))
}

/// A `RegexMatcher` (`engine_type` and `max_program_size` are ignored: every regex is RE2-style here).
pub(crate) fn parse_regex(
    m: &RegexMatcher,
    case_sensitive: bool,
) -> Result<SafeRegex, ResourceError> {
    SafeRegex::new(&m.regex, case_sensitive).map_err(|e| ResourceError::new("regex", e))
}

/// A string matcher (`envoy.type.matcher.v3.StringMatcher`, or one of `HeaderMatcher`'s older string
/// kinds, which never ignore case).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StringMatch {
    /// The whole value equals this.
    Exact {
        /// The expected value (lower-cased when `ignore_case`).
        value: String,
        /// Compare without regard to ASCII case.
        ignore_case: bool,
    },
    /// The value starts with this.
    Prefix {
        /// The prefix (lower-cased when `ignore_case`).
        value: String,
        /// Compare without regard to ASCII case.
        ignore_case: bool,
    },
    /// The value ends with this.
    Suffix {
        /// The suffix (lower-cased when `ignore_case`).
        value: String,
        /// Compare without regard to ASCII case.
        ignore_case: bool,
    },
    /// The value contains this.
    Contains {
        /// The substring (lower-cased when `ignore_case`).
        value: String,
        /// Compare without regard to ASCII case.
        ignore_case: bool,
    },
    /// The whole value matches this regex (`ignore_case` does not apply to regexes).
    Regex(SafeRegex),
}

impl StringMatch {
    fn text(value: &str, ignore_case: bool, make: fn(String, bool) -> StringMatch) -> StringMatch {
        let value = if ignore_case {
            value.to_ascii_lowercase()
        } else {
            value.to_owned()
        };
        make(value, ignore_case)
    }

    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        let folded;
        let (pattern, ignore_case) = match self {
            StringMatch::Regex(re) => return re.matches(value),
            StringMatch::Exact { value, ignore_case }
            | StringMatch::Prefix { value, ignore_case }
            | StringMatch::Suffix { value, ignore_case }
            | StringMatch::Contains { value, ignore_case } => (value.as_str(), *ignore_case),
        };
        let value = if ignore_case {
            folded = value.to_ascii_lowercase();
            folded.as_str()
        } else {
            value
        };
        match self {
            StringMatch::Exact { .. } => value == pattern,
            StringMatch::Prefix { .. } => value.starts_with(pattern),
            StringMatch::Suffix { .. } => value.ends_with(pattern),
            StringMatch::Contains { .. } => value.contains(pattern),
            StringMatch::Regex(_) => false,
        }
    }
}

/// An `envoy.type.matcher.v3.StringMatcher`: `exact`, `prefix`, `suffix`, `contains` (each with
/// `ignore_case`) or `safe_regex`; `custom` or no pattern is a NACK.
pub(crate) fn parse_string_matcher(m: &ProtoStringMatcher) -> Result<StringMatch, ResourceError> {
    let ic = m.ignore_case;
    Ok(match &m.match_pattern {
        Some(MatchPattern::Exact(v)) => StringMatch::text(v, ic, |value, ignore_case| {
            StringMatch::Exact { value, ignore_case }
        }),
        Some(MatchPattern::Prefix(v)) => StringMatch::text(v, ic, |value, ignore_case| {
            StringMatch::Prefix { value, ignore_case }
        }),
        Some(MatchPattern::Suffix(v)) => StringMatch::text(v, ic, |value, ignore_case| {
            StringMatch::Suffix { value, ignore_case }
        }),
        Some(MatchPattern::Contains(v)) => StringMatch::text(v, ic, |value, ignore_case| {
            StringMatch::Contains { value, ignore_case }
        }),
        Some(MatchPattern::SafeRegex(re)) => {
            StringMatch::Regex(parse_regex(re, true).map_err(|e| e.within("safe_regex"))?)
        }
        Some(MatchPattern::Custom(_)) => {
            return Err(ResourceError::new(
                "custom",
                "custom string matchers are not supported",
            ))
        }
        None => return Err(ResourceError::new("", "no match pattern")),
    })
}

/// What a header matcher tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderMatch {
    /// The value matches this string matcher.
    String(StringMatch),
    /// The value is a decimal int64 in `[start, end)`.
    Range {
        /// Inclusive.
        start: i64,
        /// Exclusive.
        end: i64,
    },
    /// The header's presence equals this.
    Present(bool),
}

/// One of a route's header matchers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderMatcher {
    /// The header name, lower-cased.
    pub name: String,
    /// What the value must satisfy.
    pub kind: HeaderMatch,
    /// The result is inverted (but an absent header fails every kind except `Present`, inverted or not).
    pub invert: bool,
}

impl HeaderMatcher {
    /// Whether a header with `value` (`None`: absent) matches.
    pub fn matches(&self, value: Option<&str>) -> bool {
        let Some(value) = value else {
            return match self.kind {
                // Absent: matches when `present` is false, then `invert` flips.
                HeaderMatch::Present(present) => present == self.invert,
                _ => false,
            };
        };
        let matched = match &self.kind {
            HeaderMatch::Present(present) => *present,
            HeaderMatch::Range { start, end } => {
                value.parse::<i64>().is_ok_and(|n| *start <= n && n < *end)
            }
            HeaderMatch::String(s) => s.matches(value),
        };
        matched != self.invert
    }
}

/// A `HeaderMatcher`: `exact`, `safe_regex`, `range`, `present`, `prefix`, `suffix`, `contains`,
/// `string_match`, with `invert_match`. No kind, a bad regex, a custom string matcher or a range whose end
/// is before its start is a NACK.
pub(crate) fn parse_header_matcher(m: &ProtoHeaderMatcher) -> Result<HeaderMatcher, ResourceError> {
    let text = |v: &str, make: fn(String, bool) -> StringMatch| {
        HeaderMatch::String(StringMatch::text(v, false, make))
    };
    #[allow(deprecated)]
    let kind = match &m.header_match_specifier {
        Some(HeaderMatchSpecifier::ExactMatch(v)) => text(v, |value, ignore_case| {
            StringMatch::Exact { value, ignore_case }
        }),
        Some(HeaderMatchSpecifier::PrefixMatch(v)) => text(v, |value, ignore_case| {
            StringMatch::Prefix { value, ignore_case }
        }),
        Some(HeaderMatchSpecifier::SuffixMatch(v)) => text(v, |value, ignore_case| {
            StringMatch::Suffix { value, ignore_case }
        }),
        Some(HeaderMatchSpecifier::ContainsMatch(v)) => text(v, |value, ignore_case| {
            StringMatch::Contains { value, ignore_case }
        }),
        Some(HeaderMatchSpecifier::SafeRegexMatch(re)) => HeaderMatch::String(StringMatch::Regex(
            parse_regex(re, true).map_err(|e| e.within("safe_regex_match"))?,
        )),
        Some(HeaderMatchSpecifier::RangeMatch(r)) => {
            if r.end < r.start {
                return Err(ResourceError::new(
                    "range_match",
                    format!("range end {} is before its start {}", r.end, r.start),
                ));
            }
            HeaderMatch::Range {
                start: r.start,
                end: r.end,
            }
        }
        Some(HeaderMatchSpecifier::PresentMatch(p)) => HeaderMatch::Present(*p),
        Some(HeaderMatchSpecifier::StringMatch(s)) => {
            HeaderMatch::String(parse_string_matcher(s).map_err(|e| e.within("string_match"))?)
        }
        None => {
            return Err(ResourceError::new(
                "",
                "header matcher without a match kind",
            ))
        }
    };
    Ok(HeaderMatcher {
        name: m.name.to_ascii_lowercase(),
        kind,
        invert: m.invert_match,
    })
}

/// How a route matches the call's path (`/pkg.Service/Method`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathMatch {
    /// The path starts with this (`""` matches every path).
    Prefix(String),
    /// The path is exactly this.
    Exact(String),
    /// The whole path matches this regex.
    Regex(SafeRegex),
}

/// A route's path matcher with its case sensitivity (which applies to the path only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathMatcher {
    /// The kind; for case-insensitive prefix and exact matchers the text is lower-cased.
    pub kind: PathMatch,
    /// `case_sensitive` (default true).
    pub case_sensitive: bool,
}

impl PathMatcher {
    /// A path matcher; a prefix or exact text is lower-cased when `case_sensitive` is false. A regex must
    /// already be compiled with the same sensitivity.
    pub(crate) fn new(kind: PathMatch, case_sensitive: bool) -> PathMatcher {
        let kind = match kind {
            PathMatch::Prefix(p) if !case_sensitive => PathMatch::Prefix(p.to_ascii_lowercase()),
            PathMatch::Exact(p) if !case_sensitive => PathMatch::Exact(p.to_ascii_lowercase()),
            other => other,
        };
        PathMatcher {
            kind,
            case_sensitive,
        }
    }

    /// Whether `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        let folded;
        let path = if self.case_sensitive {
            path
        } else {
            folded = path.to_ascii_lowercase();
            folded.as_str()
        };
        match &self.kind {
            PathMatch::Prefix(prefix) => path.starts_with(prefix.as_str()),
            PathMatch::Exact(exact) => path == exact,
            PathMatch::Regex(re) => re.matches(path),
        }
    }
}

#[cfg(test)]
mod tests;
