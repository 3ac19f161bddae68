//! The RouteConfiguration resource (RDS, or inline in a Listener): gRFC A28's virtual hosts and routes,
//! with A31's `max_stream_duration`, A42's hash policies, A44's retry policies and A63's string matchers.
//! An `envoy.config.route.v3.RouteConfiguration` is validated and turned into a [`RouteConfig`]: what the
//! client needs to choose a virtual host ([`crate::choose_virtual_host`]) and then a route and a cluster
//! per call ([`crate::route_call`]).
//!
//! Rules (NACK unless said otherwise):
//! - A virtual host has at least one domain, each valid for [`crate::validate_domain`].
//! - A route needs `match`, whose path is `prefix`, `path` or `safe_regex` (compiled with `case_sensitive`,
//!   default true, which affects the path only). A route is *ignored* (dropped, not NACKed) when it has
//!   `query_parameters` (checked first: none of its other matchers is validated, not even its path
//!   specifier), when its prefix or path can never match a gRPC path `/service/method`, or when its
//!   action names a cluster some other way than `cluster`, `weighted_clusters` or a declared cluster
//!   specifier plugin, or names an optional plugin the client does not know. An ignored route is not
//!   validated further (the action is read after the match, so a route ignored for its action still
//!   needs a valid match, as in grpc-go).
//! - Every regex of the resource (paths, header matchers, hash policy rewrites) counts against its regex
//!   budget (`matcher`), that of a Listener holding it inline included: past it, a NACK naming the first
//!   regex that did not fit, and no later regex is compiled.
//! - Header matchers as in `matcher`; `runtime_fraction.default_value` becomes parts per million
//!   (HUNDRED × 10,000, TEN_THOUSAND × 100, MILLION × 1, capped at a million; another denominator is a
//!   NACK).
//! - `route.cluster` is non-empty; `weighted_clusters` entries have a non-empty name and a `weight`,
//!   0-weight entries are dropped, at least one remains and the sum fits in 32 bits (`total_weight` is
//!   not checked).
//! - Cluster specifier plugins: the client implements none, so a declared plugin that is not optional is
//!   a NACK; names are unique; a route naming an undeclared plugin is a NACK.
//! - Redirect, direct response, filter or non-forwarding actions (or none) keep the route, whose calls
//!   then fail UNAVAILABLE.
//! - `max_stream_duration`: `grpc_timeout_header_max` if set (even 0), else `max_stream_duration`, else
//!   the listener's; 0 means no limit.
//! - `retry_policy` as in `retry`; a route's policy replaces its virtual host's entirely.
//! - `hash_policy`: `header` (non-empty name; a `regex_rewrite` must compile, keeping only the capture
//!   groups its substitution names, within the budget) and `filter_state` with key `io.grpc.channel_id`
//!   are kept; other kinds and keys are dropped.
//! - `typed_per_filter_config` of virtual hosts, routes and weighted cluster entries as in `http_filter`.
//!
//! Not here: VHDS, the rest of the per-route fields (rewrites, header mutations, timeouts other than
//! `max_stream_duration`, hedging), computing request hashes (ring hash's side), and route choice itself.

use std::collections::HashSet;
use std::time::Duration;

use envoy_types::pb::envoy::config::route::v3::route::Action;
use envoy_types::pb::envoy::config::route::v3::route_action::hash_policy::PolicySpecifier;
use envoy_types::pb::envoy::config::route::v3::route_action::{
    ClusterSpecifier, HashPolicy as ProtoHashPolicy,
};
use envoy_types::pb::envoy::config::route::v3::route_match::PathSpecifier;
use envoy_types::pb::envoy::config::route::v3::{
    Route as ProtoRoute, RouteAction as ProtoRouteAction, RouteConfiguration, RouteMatch,
    VirtualHost as ProtoVirtualHost, WeightedCluster,
};
use envoy_types::pb::envoy::r#type::v3::fractional_percent::DenominatorType;
use envoy_types::pb::google::protobuf::Any;

use super::http_filter::validate_filter_overrides;
use super::matcher::{
    compile_unanchored, parse_header_matcher, parse_regex, HeaderMatcher, PathMatch, PathMatcher,
    RegexBudget,
};
use super::retry::{parse_retry_policy, RetryPolicy};
use super::{decode_any, duration, ResourceError, ResourceType};

/// A validated RouteConfiguration.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteConfig {
    /// The resource's name (empty is allowed for a configuration inline in a Listener).
    pub name: String,
    /// The virtual hosts, in the resource's order (ties in domain matching go to the earlier one).
    pub virtual_hosts: Vec<VirtualHost>,
}

impl RouteConfig {
    /// The virtual host that serves `authority` (A28, see [`crate::choose_virtual_host`]), or `None`
    /// (the channel then fails calls UNAVAILABLE).
    pub fn virtual_host(&self, authority: &str) -> Option<&VirtualHost> {
        let domains = self
            .virtual_hosts
            .iter()
            .map(|vh| vh.domains.iter().map(String::as_str));
        crate::choose_virtual_host(domains, authority).and_then(|i| self.virtual_hosts.get(i))
    }
}

/// A virtual host: the domains it serves and its routes.
#[derive(Clone, Debug, PartialEq)]
pub struct VirtualHost {
    /// The host's `name` (may be empty: the client does not require one).
    pub name: String,
    /// Domain patterns, each valid for [`crate::validate_domain`]; at least one.
    pub domains: Vec<String>,
    /// The routes, in order, without the ignored ones.
    pub routes: Vec<Route>,
    /// The host's own retry policy (each route already holds the policy it uses).
    pub retry_policy: Option<RetryPolicy>,
}

/// One route: what calls it takes and where they go.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// The route's `name`, empty if it has none.
    pub name: String,
    /// Its position in its virtual host's `routes` as the resource lists them (ignored routes counted),
    /// which names a route without a `name` in telemetry.
    pub index: usize,
    /// Which calls the route takes.
    pub matcher: RouteMatcher,
    /// Where they go.
    pub action: RouteAction,
    /// The retry policy its calls use: the route's own if it has one, else its virtual host's. `None`
    /// also when the policy that applies retries no gRPC code, and for non-forwarding routes.
    pub retry_policy: Option<RetryPolicy>,
    /// The route's stream duration limit (A31).
    pub max_stream_duration: MaxStreamDuration,
    /// The hash policies for ring hash (A42), in order; only the kinds the client computes.
    pub hash_policies: Vec<HashPolicy>,
}

/// What a call must look like to take a route: path, all headers, and a random fraction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteMatcher {
    /// The path matcher.
    pub path: PathMatcher,
    /// Header matchers, all of which must match.
    pub headers: Vec<HeaderMatcher>,
    /// The share of calls (in parts per million, at most a million) that may take the route; `None`:
    /// all of them.
    pub fraction_per_million: Option<u32>,
}

/// Where a route sends calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteAction {
    /// To this cluster.
    Cluster(String),
    /// To one of these clusters, at random in proportion to the weights (each non-zero, their sum within
    /// 32 bits, at least one entry).
    WeightedClusters(Vec<ClusterWeight>),
    /// Nowhere: a non-forwarding action (or a redirect, direct response, or none): calls fail UNAVAILABLE.
    NonForwarding,
}

/// One entry of a weighted cluster list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterWeight {
    /// The cluster's name (non-empty).
    pub name: String,
    /// Its weight (non-zero).
    pub weight: u32,
}

/// A route's stream duration limit before the listener's default applies (A31).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxStreamDuration {
    /// The route sets none: the listener's `max_stream_duration` applies.
    FromListener,
    /// The route sets 0: no limit, whatever the listener says.
    Unlimited,
    /// The route sets this (non-zero) limit.
    Limit(Duration),
}

impl MaxStreamDuration {
    /// The limit that applies, given the listener's (`None` or zero: no limit).
    pub fn resolve(self, listener: Option<Duration>) -> Option<Duration> {
        match self {
            MaxStreamDuration::FromListener => listener.filter(|d| !d.is_zero()),
            MaxStreamDuration::Unlimited => None,
            MaxStreamDuration::Limit(d) => Some(d),
        }
    }

    fn from_duration(d: Duration) -> MaxStreamDuration {
        if d.is_zero() {
            MaxStreamDuration::Unlimited
        } else {
            MaxStreamDuration::Limit(d)
        }
    }
}

/// One hash policy of a route (A42).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashPolicy {
    /// What the hash is computed from.
    pub kind: HashPolicyKind,
    /// Stop after this policy once a hash has been produced.
    pub terminal: bool,
}

/// The hash policy kinds the client computes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashPolicyKind {
    /// The values of a header (the routing header view), joined by `,`, optionally rewritten.
    Header {
        /// The header name, lower-cased (non-empty).
        name: String,
        /// A rewrite applied to the joined value before hashing.
        rewrite: Option<RegexRewrite>,
    },
    /// The channel's own random identifier (`filter_state` key `io.grpc.channel_id`).
    ChannelId,
}

/// A `regex_rewrite`: every match of a regex replaced by a substitution. The regex keeps only the
/// capture groups the substitution can refer to (up to the highest it names), as RE2's
/// `GlobalReplace` tracks no more: a group costs search memory for every state of the regex.
#[derive(Clone, Debug)]
pub struct RegexRewrite {
    pattern: String,
    regex: regex_automata::meta::Regex,
    /// The substitution in the `regex` crate's syntax (RE2's `\1` written `${1}`).
    replacement: String,
}

impl RegexRewrite {
    /// A rewrite of `pattern` (RE2 syntax, unanchored) into `substitution` (RE2 syntax: `\0`..`\9` are
    /// groups, `\\` a backslash).
    pub fn new(pattern: &str, substitution: &str) -> Result<RegexRewrite, String> {
        RegexRewrite::within(pattern, substitution, &mut RegexBudget::single())
    }

    /// [`RegexRewrite::new`] within `budget`.
    fn within(
        pattern: &str,
        substitution: &str,
        budget: &mut RegexBudget,
    ) -> Result<RegexRewrite, String> {
        let mut replacement = String::with_capacity(substitution.len());
        // The highest group the substitution refers to.
        let mut last_group = 0;
        let mut chars = substitution.chars();
        while let Some(c) = chars.next() {
            match c {
                '$' => replacement.push_str("$$"),
                '\\' => match chars.next() {
                    Some(d) if d.is_ascii_digit() => {
                        last_group = last_group.max(d.to_digit(10).unwrap_or(0));
                        replacement.push_str("${");
                        replacement.push(d);
                        replacement.push('}');
                    }
                    Some('$') => replacement.push_str("$$"),
                    Some(other) => replacement.push(other),
                    None => replacement.push('\\'),
                },
                other => replacement.push(other),
            }
        }
        let regex = compile_unanchored(pattern, last_group, budget)?;
        Ok(RegexRewrite {
            pattern: pattern.to_owned(),
            regex,
            replacement,
        })
    }

    /// `value` with every match replaced, leftmost first and without overlaps (the bytes of a value
    /// that is not UTF-8 are kept as they are).
    pub fn apply(&self, value: impl AsRef<[u8]>) -> Vec<u8> {
        let value = value.as_ref();
        let mut out = Vec::with_capacity(value.len());
        let mut last = 0;
        for caps in self.regex.captures_iter(value) {
            let Some(m) = caps.get_match() else {
                continue;
            };
            out.extend_from_slice(value.get(last..m.start()).unwrap_or_default());
            caps.interpolate_bytes_into(value, self.replacement.as_bytes(), &mut out);
            last = m.end();
        }
        out.extend_from_slice(value.get(last..).unwrap_or_default());
        out
    }
}

impl PartialEq for RegexRewrite {
    fn eq(&self, other: &RegexRewrite) -> bool {
        self.pattern == other.pattern && self.replacement == other.replacement
    }
}

impl Eq for RegexRewrite {}

/// The `filter_state` key of the channel identifier.
const CHANNEL_ID_KEY: &str = "io.grpc.channel_id";

/// Validates a RouteConfiguration (its regexes within one resource's budget).
pub fn parse_route_config(rc: &RouteConfiguration) -> Result<RouteConfig, ResourceError> {
    parse_route_config_within(rc, &mut RegexBudget::resource())
}

/// Validates a RouteConfiguration whose regexes must fit in `budget`.
pub(crate) fn parse_route_config_within(
    rc: &RouteConfiguration,
    budget: &mut RegexBudget,
) -> Result<RouteConfig, ResourceError> {
    let plugins = parse_plugins(rc)?;
    let virtual_hosts = rc
        .virtual_hosts
        .iter()
        .enumerate()
        .map(|(i, vh)| {
            parse_virtual_host(vh, &plugins, budget)
                .map_err(|e| e.within(&format!("virtual_hosts[{i}]")))
        })
        .collect::<Result<_, _>>()?;
    Ok(RouteConfig {
        name: rc.name.clone(),
        virtual_hosts,
    })
}

/// Decodes (see [`decode_any`]) and validates a RouteConfiguration from a response's `Any`.
pub fn parse_route_config_any(any: &Any) -> Result<RouteConfig, ResourceError> {
    parse_route_config(&decode_any(any, ResourceType::RouteConfiguration)?)
}

/// The declared cluster specifier plugins, all optional (a non-optional one is a NACK, since the client
/// implements none): their names.
fn parse_plugins(rc: &RouteConfiguration) -> Result<HashSet<&str>, ResourceError> {
    let mut names: HashSet<&str> = HashSet::with_capacity(rc.cluster_specifier_plugins.len());
    for (i, p) in rc.cluster_specifier_plugins.iter().enumerate() {
        let at = |e: ResourceError| e.within(&format!("cluster_specifier_plugins[{i}]"));
        let ext = p
            .extension
            .as_ref()
            .ok_or_else(|| at(ResourceError::new("extension", "required")))?;
        if names.contains(&ext.name.as_str()) {
            return Err(at(ResourceError::new(
                "extension.name",
                format!("duplicate plugin name {:?}", ext.name),
            )));
        }
        if !p.is_optional {
            let type_url = ext
                .typed_config
                .as_ref()
                .map_or("", |a| a.type_url.as_str());
            return Err(at(ResourceError::new(
                "extension.typed_config",
                format!("unsupported cluster specifier plugin type {type_url:?}, and not optional"),
            )));
        }
        names.insert(&ext.name);
    }
    Ok(names)
}

fn parse_virtual_host(
    vh: &ProtoVirtualHost,
    plugins: &HashSet<&str>,
    budget: &mut RegexBudget,
) -> Result<VirtualHost, ResourceError> {
    if vh.domains.is_empty() {
        return Err(ResourceError::new(
            "domains",
            "at least one domain is required",
        ));
    }
    for (i, d) in vh.domains.iter().enumerate() {
        crate::validate_domain(d).map_err(|e| ResourceError::new(format!("domains[{i}]"), e))?;
    }
    validate_filter_overrides(&vh.typed_per_filter_config)?;
    let retry_policy = match &vh.retry_policy {
        Some(p) => parse_retry_policy(p).map_err(|e| e.within("retry_policy"))?,
        None => None,
    };
    let mut routes = Vec::new();
    for (i, r) in vh.routes.iter().enumerate() {
        let route = parse_route(r, i, retry_policy.as_ref(), plugins, budget)
            .map_err(|e| e.within(&format!("routes[{i}]")))?;
        routes.extend(route);
    }
    Ok(VirtualHost {
        name: vh.name.clone(),
        domains: vh.domains.clone(),
        routes,
        retry_policy,
    })
}

/// A route, or `None` when it is ignored.
fn parse_route(
    r: &ProtoRoute,
    index: usize,
    vhost_retry: Option<&RetryPolicy>,
    plugins: &HashSet<&str>,
    budget: &mut RegexBudget,
) -> Result<Option<Route>, ResourceError> {
    let m = r
        .r#match
        .as_ref()
        .ok_or_else(|| ResourceError::new("match", "required"))?;
    let Some(matcher) = parse_route_match(m, budget).map_err(|e| e.within("match"))? else {
        return Ok(None);
    };
    validate_filter_overrides(&r.typed_per_filter_config)?;
    let non_forwarding = Route {
        name: r.name.clone(),
        index,
        matcher,
        action: RouteAction::NonForwarding,
        retry_policy: None,
        max_stream_duration: MaxStreamDuration::FromListener,
        hash_policies: Vec::new(),
    };
    let Some(Action::Route(ra)) = &r.action else {
        return Ok(Some(non_forwarding));
    };
    let Some(action) = parse_cluster_specifier(ra, plugins).map_err(|e| e.within("route"))? else {
        return Ok(None);
    };
    let retry_policy = match &ra.retry_policy {
        Some(p) => parse_retry_policy(p).map_err(|e| e.within("route.retry_policy"))?,
        None => vhost_retry.cloned(),
    };
    let max_stream_duration =
        parse_max_stream_duration(ra).map_err(|e| e.within("route.max_stream_duration"))?;
    let mut hash_policies = Vec::new();
    for (i, h) in ra.hash_policy.iter().enumerate() {
        let policy = parse_hash_policy(h, budget)
            .map_err(|e| e.within(&format!("route.hash_policy[{i}]")))?;
        hash_policies.extend(policy);
    }
    Ok(Some(Route {
        action,
        retry_policy,
        max_stream_duration,
        hash_policies,
        ..non_forwarding
    }))
}

/// A route's match, or `None` when the route is to be ignored.
fn parse_route_match(
    m: &RouteMatch,
    budget: &mut RegexBudget,
) -> Result<Option<RouteMatcher>, ResourceError> {
    // A28: a route with query parameter matchers is ignored whatever its other matchers hold, so none of
    // them is validated (grpc-go and C-core check this first too).
    if !m.query_parameters.is_empty() {
        return Ok(None);
    }
    let case_sensitive = m.case_sensitive.is_none_or(|b| b.value);
    let kind = match &m.path_specifier {
        Some(PathSpecifier::Prefix(p)) if prefix_can_match(p) => PathMatch::Prefix(p.clone()),
        Some(PathSpecifier::Path(p)) if path_can_match(p) => PathMatch::Exact(p.clone()),
        Some(PathSpecifier::Prefix(_) | PathSpecifier::Path(_)) => return Ok(None),
        Some(PathSpecifier::SafeRegex(re)) => PathMatch::Regex(
            parse_regex(re, case_sensitive, budget).map_err(|e| e.within("safe_regex"))?,
        ),
        Some(_) => return Err(ResourceError::new("", "unsupported path specifier")),
        None => return Err(ResourceError::new("", "a path specifier is required")),
    };
    let headers = m
        .headers
        .iter()
        .enumerate()
        .map(|(i, h)| {
            parse_header_matcher(h, budget).map_err(|e| e.within(&format!("headers[{i}]")))
        })
        .collect::<Result<_, _>>()?;
    let fraction_per_million = match m
        .runtime_fraction
        .as_ref()
        .and_then(|f| f.default_value.as_ref())
    {
        None => None,
        Some(f) => {
            let scale: u64 = match DenominatorType::try_from(f.denominator) {
                Ok(DenominatorType::Hundred) => 10_000,
                Ok(DenominatorType::TenThousand) => 100,
                Ok(DenominatorType::Million) => 1,
                Err(_) => {
                    return Err(ResourceError::new(
                        "runtime_fraction.default_value.denominator",
                        format!("unknown denominator {}", f.denominator),
                    ))
                }
            };
            let per_million = (u64::from(f.numerator) * scale).min(1_000_000);
            Some(u32::try_from(per_million).unwrap_or(1_000_000))
        }
    };
    Ok(Some(RouteMatcher {
        path: PathMatcher::new(kind, case_sensitive),
        headers,
        fraction_per_million,
    }))
}

/// Whether some `/service/method` can start with `prefix`: `""`, `/`, `/service`, `/service/` or
/// `/service/meth`, but not a prefix without the leading `/`, with an empty service, or with a third `/`.
fn prefix_can_match(prefix: &str) -> bool {
    if prefix.is_empty() {
        return true;
    }
    let Some(rest) = prefix.strip_prefix('/') else {
        return false;
    };
    let parts: Vec<&str> = rest.splitn(3, '/').collect();
    match parts.as_slice() {
        [service, _] => !service.is_empty(),
        [_] => true,
        _ => false,
    }
}

/// Whether `path` has the form `/service/method` with both parts non-empty.
fn path_can_match(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    let parts: Vec<&str> = rest.splitn(3, '/').collect();
    matches!(parts.as_slice(), [service, method] if !service.is_empty() && !method.is_empty())
}

/// The route's destination, or `None` when the route is to be ignored.
fn parse_cluster_specifier(
    ra: &ProtoRouteAction,
    plugins: &HashSet<&str>,
) -> Result<Option<RouteAction>, ResourceError> {
    match &ra.cluster_specifier {
        Some(ClusterSpecifier::Cluster(name)) => {
            if name.is_empty() {
                return Err(ResourceError::new("cluster", "must not be empty"));
            }
            Ok(Some(RouteAction::Cluster(name.clone())))
        }
        Some(ClusterSpecifier::WeightedClusters(wc)) => parse_weighted_clusters(wc)
            .map(|c| Some(RouteAction::WeightedClusters(c)))
            .map_err(|e| e.within("weighted_clusters")),
        Some(ClusterSpecifier::ClusterSpecifierPlugin(name)) => {
            if plugins.contains(&name.as_str()) {
                // Declared, optional and unknown to the client.
                Ok(None)
            } else {
                Err(ResourceError::new(
                    "cluster_specifier_plugin",
                    format!("names undeclared plugin {name:?}"),
                ))
            }
        }
        Some(
            ClusterSpecifier::ClusterHeader(_) | ClusterSpecifier::InlineClusterSpecifierPlugin(_),
        )
        | None => Ok(None),
    }
}

fn parse_weighted_clusters(wc: &WeightedCluster) -> Result<Vec<ClusterWeight>, ResourceError> {
    let mut total: u64 = 0;
    let mut clusters = Vec::new();
    for (i, c) in wc.clusters.iter().enumerate() {
        let at = |e: ResourceError| e.within(&format!("clusters[{i}]"));
        if c.name.is_empty() {
            return Err(at(ResourceError::new("name", "must not be empty")));
        }
        let weight = c
            .weight
            .ok_or_else(|| at(ResourceError::new("weight", "required")))?
            .value;
        validate_filter_overrides(&c.typed_per_filter_config).map_err(at)?;
        if weight == 0 {
            continue;
        }
        total += u64::from(weight);
        if total > u64::from(u32::MAX) {
            return Err(ResourceError::new(
                "clusters",
                "the weights add up to more than 2^32 - 1",
            ));
        }
        clusters.push(ClusterWeight {
            name: c.name.clone(),
            weight,
        });
    }
    if clusters.is_empty() {
        return Err(ResourceError::new(
            "clusters",
            "no cluster with a non-zero weight",
        ));
    }
    Ok(clusters)
}

fn parse_max_stream_duration(ra: &ProtoRouteAction) -> Result<MaxStreamDuration, ResourceError> {
    let Some(msd) = &ra.max_stream_duration else {
        return Ok(MaxStreamDuration::FromListener);
    };
    let (field, d) = match (&msd.grpc_timeout_header_max, &msd.max_stream_duration) {
        (Some(d), _) => ("grpc_timeout_header_max", d),
        (None, Some(d)) => ("max_stream_duration", d),
        (None, None) => return Ok(MaxStreamDuration::FromListener),
    };
    let d = duration::from_proto(d).map_err(|e| ResourceError::new(field, e))?;
    Ok(MaxStreamDuration::from_duration(d))
}

/// A hash policy, or `None` for the kinds the client does not compute.
fn parse_hash_policy(
    h: &ProtoHashPolicy,
    budget: &mut RegexBudget,
) -> Result<Option<HashPolicy>, ResourceError> {
    let kind = match &h.policy_specifier {
        Some(PolicySpecifier::Header(header)) => {
            if header.header_name.is_empty() {
                return Err(ResourceError::new(
                    "header.header_name",
                    "must not be empty",
                ));
            }
            let rewrite = match &header.regex_rewrite {
                None => None,
                Some(rr) => {
                    let pattern = rr.pattern.as_ref().ok_or_else(|| {
                        ResourceError::new("header.regex_rewrite.pattern", "required")
                    })?;
                    Some(
                        RegexRewrite::within(&pattern.regex, &rr.substitution, budget).map_err(
                            |e| ResourceError::new("header.regex_rewrite.pattern.regex", e),
                        )?,
                    )
                }
            };
            HashPolicyKind::Header {
                name: header.header_name.to_ascii_lowercase(),
                rewrite,
            }
        }
        Some(PolicySpecifier::FilterState(fs)) if fs.key == CHANNEL_ID_KEY => {
            HashPolicyKind::ChannelId
        }
        _ => return Ok(None),
    };
    Ok(Some(HashPolicy {
        kind,
        terminal: h.terminal,
    }))
}

#[cfg(test)]
mod tests;
