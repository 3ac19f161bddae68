//! The matchers of a RouteConfiguration's routes (gRFC A28, A63; the envoy `RouteMatch` path specifiers
//! and `HeaderMatcher`): each is parsed from its proto into a typed value that can only hold a valid
//! matcher, and answers `matches` for one value. `safe_regex` is RE2 syntax (the `regex` crate's engine,
//! linear time) anchored to the whole value; `max_program_size` is ignored. As in RE2, `\w`, `\d`, `\s`
//! and the POSIX classes are ASCII, which also keeps programs small; regexes run on bytes, so `.` is one
//! byte. gRPC paths and header values are ASCII, where this is RE2's behaviour exactly; Unicode classes
//! (`\pL`) are not supported (a NACK).
//!
//! What regexes may cost is bounded, so that a control plane cannot make the client hold large automata
//! or spend long compiling them ([`RegexBudget`]): one regex takes at most 1 MiB, the regexes of one
//! resource at most [`RESOURCE_REGEX_BUDGET`] bytes in all (16 MiB), and those of one response, all its
//! resources together, at most [`RESPONSE_REGEX_BUDGET`] (64 MiB). What a regex takes is all the engine
//! built for it (its NFA and prefilter, or the Aho-Corasick automaton an alternation of literals becomes,
//! which has no NFA for the NFA size limit to stop), plus, for a `regex_rewrite`, the search memory of
//! its capture groups (below). Each compilation is given only what is left, so a resource past its
//! budget fails at the first regex that does not fit (a NACK naming that field) without compiling the
//! rest.
//!
//! A regex is its NFA, run by the PikeVM alone: neither the lazy DFA nor the one-pass DFA is built,
//! since they would multiply what a regex holds (up to tenfold) for little gain on the short values
//! routing matches, nor is the bounded backtracker used, whose memory grows with the value's length. The
//! memory a search needs (the regex keeps a cache for each thread that matches it at the same time) is
//! then set by the program alone, whatever the value: two tables with a row per NFA state, and in
//! each row two slots (a group's bounds) per capture group kept. A `safe_regex` keeps no group but the
//! whole match, so its search takes a few times its compiled size. A `regex_rewrite` keeps the groups
//! its substitution refers to (up to `\9`; later groups only group, as RE2's `GlobalReplace` tracks no
//! more), and the slots of those groups, 32 bytes per group per NFA state, count against the budget
//! with its compiled size.
//!
//! Header values are bytes: one that is not UTF-8 (obs-text) is present and matched as it is, as grpc-go
//! and C-core match the raw value; see [`HeaderMatcher::matches`].
//!
//! Not here: which header value a call shows (the header view of `routing`), runtime fractions, query
//! parameters, and the route-level "route ignored" rules (all in `route`).

use envoy_types::pb::envoy::config::route::v3::header_matcher::HeaderMatchSpecifier;
use envoy_types::pb::envoy::config::route::v3::HeaderMatcher as ProtoHeaderMatcher;
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use envoy_types::pb::envoy::r#type::matcher::v3::{
    RegexMatcher, StringMatcher as ProtoStringMatcher,
};
use regex_automata::meta::Regex;
use regex_automata::nfa::thompson::{State, WhichCaptures};
use regex_automata::util::primitives::NonMaxUsize;
use regex_automata::util::syntax;
use regex_syntax::hir::{Capture, Hir, HirKind, Look, Repetition};

use super::ResourceError;

/// The compiled size bound of one regular expression: generous for real routes.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// The compiled bytes all the regexes of one resource may take: thousands of ordinary regexes (a path
/// regex with classes and alternatives takes about 2 KB, a simple one about 1 KB).
pub(crate) const RESOURCE_REGEX_BUDGET: usize = 16 << 20;

/// The compiled bytes all the regexes of one response may take, its resources together (a response
/// holds many resources, each with its own budget).
pub(crate) const RESPONSE_REGEX_BUDGET: usize = 64 << 20;

/// What is left of a regex budget: each compilation may take at most what remains, and what it took
/// (its compiled size; the whole allowance when it failed on it) is subtracted. Once spent, every
/// further regex fails at once.
#[derive(Clone, Debug)]
pub(crate) struct RegexBudget {
    /// Bytes still allowed.
    left: usize,
    /// Bytes taken so far.
    spent: usize,
    /// Regexes compiled, or tried, so far.
    compiled: usize,
    /// Whose budget binds (for the error): `resource` or `response`.
    scope: &'static str,
    /// That budget's total (for the error).
    total: usize,
}

impl RegexBudget {
    /// The budget of one resource parsed on its own.
    pub(crate) fn resource() -> RegexBudget {
        RegexBudget::new(RESOURCE_REGEX_BUDGET, "resource")
    }

    /// The budget of one response's resources together.
    pub(crate) fn response() -> RegexBudget {
        RegexBudget::new(RESPONSE_REGEX_BUDGET, "response")
    }

    /// The budget of one regex compiled on its own (the per-regex limit only).
    pub(crate) fn single() -> RegexBudget {
        RegexBudget::new(REGEX_SIZE_LIMIT, "regex")
    }

    fn new(total: usize, scope: &'static str) -> RegexBudget {
        RegexBudget {
            left: total,
            spent: 0,
            compiled: 0,
            scope,
            total,
        }
    }

    /// The budget of one resource of the response whose budget this is: a resource's own, or what is
    /// left of the response's if that is less. Give back what it spent with [`RegexBudget::charge`].
    pub(crate) fn for_resource(&self) -> RegexBudget {
        if self.left < RESOURCE_REGEX_BUDGET {
            RegexBudget {
                left: self.left,
                spent: 0,
                compiled: 0,
                scope: self.scope,
                total: self.total,
            }
        } else {
            RegexBudget::resource()
        }
    }

    /// Counts what a resource's budget (from [`RegexBudget::for_resource`]) spent against this one.
    pub(crate) fn charge(&mut self, resource: &RegexBudget) {
        self.take(resource.spent);
        self.compiled += resource.compiled;
    }

    /// Compiled bytes taken so far.
    #[cfg(test)]
    pub(crate) fn spent(&self) -> usize {
        self.spent
    }

    /// Regexes compiled (or tried) so far.
    #[cfg(test)]
    pub(crate) fn compiled(&self) -> usize {
        self.compiled
    }

    fn take(&mut self, bytes: usize) {
        let bytes = bytes.min(self.left);
        self.left -= bytes;
        self.spent += bytes;
    }

    fn exhausted(&self) -> String {
        format!(
            "the regular expressions of the {} exceed their budget of {} compiled bytes",
            self.scope, self.total
        )
    }

    /// Compiles `pattern` (RE2 syntax), anchored to the whole value when `whole_value`, keeping the
    /// capture `groups` asked for, within what is left.
    fn compile(
        &mut self,
        pattern: &str,
        whole_value: bool,
        case_insensitive: bool,
        groups: Groups,
    ) -> Result<Regex, String> {
        let allowed = REGEX_SIZE_LIMIT.min(self.left);
        if allowed == 0 {
            return Err(self.exhausted());
        }
        self.compiled += 1;
        let invalid = |e: &dyn std::fmt::Display| format!("invalid regex {}: {e}", Quoted(pattern));
        let syntax = syntax::Config::new()
            .unicode(false)
            .utf8(false)
            .case_insensitive(case_insensitive);
        let mut hir = syntax::parse_with(pattern, &syntax).map_err(|e| invalid(&SyntaxError(e)))?;
        if whole_value {
            hir = Hir::concat(vec![Hir::look(Look::Start), hir, Hir::look(Look::End)]);
        }
        let which = match groups {
            Groups::WholeMatch => WhichCaptures::Implicit,
            Groups::UpTo(last) => {
                hir = keep_groups(hir, last);
                WhichCaptures::All
            }
        };
        let built = Regex::builder()
            .configure(
                Regex::config()
                    .which_captures(which)
                    .nfa_size_limit(Some(allowed))
                    .onepass(false)
                    .hybrid(false)
                    .backtrack(false)
                    .utf8_empty(false),
            )
            .build_from_hir(&hir);
        match built {
            Ok(regex) => {
                let size = regex
                    .memory_usage()
                    .saturating_add(group_slots_size(&regex));
                if size <= allowed {
                    self.take(size);
                    return Ok(regex);
                }
                // Built whole (an Aho-Corasick automaton has no NFA for the size limit to stop), but
                // it takes more than it may: charged the allowance, as a compilation stopped there.
                self.take(allowed);
                if size > REGEX_SIZE_LIMIT {
                    Err(invalid(&format_args!(
                        "it takes {size} bytes, more than the {REGEX_SIZE_LIMIT} one regex may take"
                    )))
                } else {
                    Err(self.exhausted())
                }
            }
            Err(e) if e.size_limit().is_some() => {
                // The compilation stopped at the allowance, having done that much work.
                self.take(allowed);
                if allowed < REGEX_SIZE_LIMIT {
                    Err(self.exhausted())
                } else {
                    Err(invalid(&e))
                }
            }
            Err(e) => Err(invalid(&e)),
        }
    }
}

/// A pattern as an error quotes it: whole when short, else its start and its length, so that a NACK
/// for a pattern of a megabyte is not a megabyte long.
struct Quoted<'a>(&'a str);

impl std::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const SHOWN: usize = 128;
        match self.0.char_indices().nth(SHOWN) {
            None => write!(f, "{:?}", self.0),
            Some((end, _)) => write!(f, "{:?}... ({} bytes)", &self.0[..end], self.0.len()),
        }
    }
}

/// The capture groups a compiled regex keeps: each costs two slots per NFA state in a search's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Groups {
    /// The whole match only (a `safe_regex`: whether it matches is all that is asked).
    WholeMatch,
    /// The whole match and the explicit groups numbered up to this one (a `regex_rewrite` whose
    /// substitution refers to no later group); later groups only group.
    UpTo(u32),
}

/// `hir` with its capture groups numbered after `last` made non-capturing. Groups are numbered by
/// their opening parenthesis, so the groups kept keep their numbers, and which text a regex matches does
/// not depend on its groups. The recursion is as deep as the pattern's nesting, which the parser limits.
fn keep_groups(hir: Hir, last: u32) -> Hir {
    if hir.properties().explicit_captures_len() == 0 {
        return hir;
    }
    match hir.into_kind() {
        HirKind::Capture(c) if c.index > last => keep_groups(*c.sub, last),
        HirKind::Capture(c) => Hir::capture(Capture {
            sub: Box::new(keep_groups(*c.sub, last)),
            ..c
        }),
        HirKind::Repetition(r) => Hir::repetition(Repetition {
            sub: Box::new(keep_groups(*r.sub, last)),
            ..r
        }),
        HirKind::Concat(subs) => {
            Hir::concat(subs.into_iter().map(|h| keep_groups(h, last)).collect())
        }
        HirKind::Alternation(subs) => {
            Hir::alternation(subs.into_iter().map(|h| keep_groups(h, last)).collect())
        }
        // Leaves hold no group (and are returned above).
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(literal) => Hir::literal(literal.0),
        HirKind::Class(class) => Hir::class(class),
        HirKind::Look(look) => Hir::look(look),
    }
}

/// The search memory of a regex's explicit capture groups: the PikeVM's two slot tables (the states of
/// this step and of the next) hold, per NFA state and one row more, two slots of 8 bytes per group.
/// The states are counted as many as the compiled size could hold (each takes at least the size of a
/// `State`), a bound that the engine's other parts only raise.
fn group_slots_size(regex: &Regex) -> usize {
    let slots = regex.group_info().slot_len().saturating_sub(2);
    if slots == 0 {
        return 0;
    }
    let rows = regex.memory_usage() / std::mem::size_of::<State>() + 1;
    rows.saturating_mul(slots)
        .saturating_mul(2 * std::mem::size_of::<Option<NonMaxUsize>>())
}

/// A pattern's syntax error on one line: what is wrong, and where.
struct SyntaxError(regex_syntax::Error);

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            regex_syntax::Error::Parse(e) => {
                write!(f, "{} at byte {}", e.kind(), e.span().start.offset)
            }
            regex_syntax::Error::Translate(e) => {
                write!(f, "{} at byte {}", e.kind(), e.span().start.offset)
            }
            other => write!(f, "{other}"),
        }
    }
}

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
        SafeRegex::within(pattern, case_sensitive, &mut RegexBudget::single())
    }

    /// [`SafeRegex::new`] within `budget`.
    pub(crate) fn within(
        pattern: &str,
        case_sensitive: bool,
        budget: &mut RegexBudget,
    ) -> Result<SafeRegex, String> {
        let regex = budget.compile(pattern, true, !case_sensitive, Groups::WholeMatch)?;
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

    /// The heap bytes of the compiled regex.
    pub fn compiled_size(&self) -> usize {
        self.regex.memory_usage()
    }

    /// Whether the whole of `value` matches.
    pub fn matches(&self, value: impl AsRef<[u8]>) -> bool {
        self.regex.is_match(value.as_ref())
    }
}

impl PartialEq for SafeRegex {
    fn eq(&self, other: &SafeRegex) -> bool {
        self.pattern == other.pattern && self.case_sensitive == other.case_sensitive
    }
}

impl Eq for SafeRegex {}

/// `pattern` compiled unanchored, keeping the capture groups up to `last_group` (for a `regex_rewrite`,
/// which replaces every match and may refer to groups), within `budget`.
pub(crate) fn compile_unanchored(
    pattern: &str,
    last_group: u32,
    budget: &mut RegexBudget,
) -> Result<Regex, String> {
    budget.compile(pattern, false, false, Groups::UpTo(last_group))
}

/// A `RegexMatcher` (`engine_type` and `max_program_size` are ignored: every regex is RE2-style here).
pub(crate) fn parse_regex(
    m: &RegexMatcher,
    case_sensitive: bool,
    budget: &mut RegexBudget,
) -> Result<SafeRegex, ResourceError> {
    SafeRegex::within(&m.regex, case_sensitive, budget).map_err(|e| ResourceError::new("regex", e))
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

    /// Whether `value` matches. The value's bytes are compared as they are (a value that is not UTF-8
    /// can match; `ignore_case` folds ASCII letters only).
    pub fn matches(&self, value: impl AsRef<[u8]>) -> bool {
        let value = value.as_ref();
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
            folded.as_slice()
        } else {
            value
        };
        match self {
            StringMatch::Exact { .. } => value == pattern.as_bytes(),
            StringMatch::Prefix { .. } => value.starts_with(pattern.as_bytes()),
            StringMatch::Suffix { .. } => value.ends_with(pattern.as_bytes()),
            StringMatch::Contains { .. } => contains(value, pattern),
            StringMatch::Regex(_) => false,
        }
    }
}

/// Whether `value` holds `pattern`. A match of `pattern` (UTF-8) is UTF-8 wherever it occurs, and lies
/// inside one of the valid runs `utf8_chunks` splits `value` into (it never absorbs a lead byte into an
/// invalid sequence), so each run is searched as text (linear time, as `str::contains`).
fn contains(value: &[u8], pattern: &str) -> bool {
    pattern.is_empty()
        || value
            .utf8_chunks()
            .any(|chunk| chunk.valid().contains(pattern))
}

/// An `envoy.type.matcher.v3.StringMatcher`: `exact`, `prefix`, `suffix`, `contains` (each with
/// `ignore_case`) or `safe_regex` (within `budget`); `custom` or no pattern is a NACK.
pub(crate) fn parse_string_matcher(
    m: &ProtoStringMatcher,
    budget: &mut RegexBudget,
) -> Result<StringMatch, ResourceError> {
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
            StringMatch::Regex(parse_regex(re, true, budget).map_err(|e| e.within("safe_regex"))?)
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
    /// Whether a header with `value` (`None`: absent) matches. A value is its bytes as the call carries
    /// them: one that is not UTF-8 (obs-text, valid in HTTP) is present, so `present_match` holds for it
    /// and the string kinds compare its bytes; a range needs a decimal value, so it never matches one
    /// (and `invert_match` then matches), as in grpc-go and C-core, which match the raw value.
    pub fn matches(&self, value: Option<&[u8]>) -> bool {
        let Some(value) = value else {
            return match self.kind {
                // Absent: matches when `present` is false, then `invert` flips.
                HeaderMatch::Present(present) => present == self.invert,
                _ => false,
            };
        };
        let matched = match &self.kind {
            HeaderMatch::Present(present) => *present,
            HeaderMatch::Range { start, end } => std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|n| *start <= n && n < *end),
            HeaderMatch::String(s) => s.matches(value),
        };
        matched != self.invert
    }
}

/// A `HeaderMatcher`: `exact`, `safe_regex`, `range`, `present`, `prefix`, `suffix`, `contains`,
/// `string_match`, with `invert_match`. No kind, a bad regex (or one past `budget`), a custom string
/// matcher or a range whose end is before its start is a NACK.
pub(crate) fn parse_header_matcher(
    m: &ProtoHeaderMatcher,
    budget: &mut RegexBudget,
) -> Result<HeaderMatcher, ResourceError> {
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
            parse_regex(re, true, budget).map_err(|e| e.within("safe_regex_match"))?,
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
        Some(HeaderMatchSpecifier::StringMatch(s)) => HeaderMatch::String(
            parse_string_matcher(s, budget).map_err(|e| e.within("string_match"))?,
        ),
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
