//! Per-call routing in the chosen virtual host (gRFC A28's route and cluster choice, A31's
//! `max_stream_duration`): the first route whose path, headers and fraction all match takes the call;
//! its action gives the cluster (at random over weighted clusters, by weight); the route's stream
//! duration limit (or the listener's) caps the call's deadline.
//!
//! The call's headers are seen through [`HeaderView`], which the caller builds from the call's metadata:
//! one value per name, repeated values joined by `,`. Values are bytes: a value that is not UTF-8 (HTTP's
//! obs-text, bytes 0x80-0xFF) is present and matched or hashed on its bytes, as grpc-go and C-core do
//! with the raw value, never taken as absent. On top of it, [`call_header`] applies the rules that
//! hold whatever the caller passes: `-bin` headers and pseudo-headers are absent, and `content-type` is
//! `application/grpc`. Randomness (the fraction draw in [0, 10^6), the weighted draw in [0, total)) comes
//! from an injected [`Rng`], drawn only when a route has a fraction or a weighted cluster list.
//!
//! [`request_hash`] computes A42's request hash from the chosen route's hash policies (`beyond-a6.md` §10):
//! a header's value (the same view as matching, repeated values joined by `,`, then the policy's regex
//! rewrite) hashed with XXH64 (seed 0), or the channel's random id for `filter_state`
//! `io.grpc.channel_id`; each producing policy folds in as `h = rotl(h, 1) ^ p`, and a `terminal` policy
//! stops the walk once a hash exists.
//!
//! Not here: choosing the virtual host ([`crate::choose_virtual_host`]), the random hash of a call no
//! policy gave one (the caller draws it), cluster reference counting and the config selector's life cycle, and turning the
//! outcome into a status (the caller fails `NoRoute` and `NonForwarding` with UNAVAILABLE).

use std::borrow::Cow;
use std::time::{Duration, Instant};

use grpc_base::Rng;

use crate::resource::{
    HashPolicy, HashPolicyKind, RetryPolicy, Route, RouteAction, RouteMatcher, VirtualHost,
};

/// The call's headers as routing sees them: application metadata by lower-case name.
pub trait HeaderView {
    /// The value of `name` (lower-case), repeated values joined by `,`; `None` when absent. The bytes
    /// as the call carries them, UTF-8 or not.
    fn value(&self, name: &str) -> Option<Cow<'_, [u8]>>;
}

/// A slice of (name, value) pairs (values `&str`, `&[u8]` or owned), names compared without ASCII case;
/// several pairs of one name give their values joined by `,`, in order.
impl<N: AsRef<str>, V: AsRef<[u8]>> HeaderView for [(N, V)] {
    fn value(&self, name: &str) -> Option<Cow<'_, [u8]>> {
        let mut values = self
            .iter()
            .filter(|(n, _)| n.as_ref().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref());
        let first = values.next()?;
        match values.next() {
            None => Some(Cow::Borrowed(first)),
            Some(second) => {
                let mut joined = [first, b",", second].concat();
                for v in values {
                    joined.push(b',');
                    joined.extend_from_slice(v);
                }
                Some(Cow::Owned(joined))
            }
        }
    }
}

/// The value of header `name` (lower-case) for matching and hashing: `None` for `-bin` names and
/// pseudo-headers, `application/grpc` for `content-type`, else what `headers` holds.
pub fn call_header<'h, H: HeaderView + ?Sized>(
    headers: &'h H,
    name: &str,
) -> Option<Cow<'h, [u8]>> {
    if name.ends_with("-bin") || name.starts_with(':') {
        None
    } else if name == "content-type" {
        Some(Cow::Borrowed(b"application/grpc"))
    } else {
        headers.value(name)
    }
}

/// What routing decided for a call.
#[derive(Clone, Debug, PartialEq)]
pub enum RouteOutcome<'a> {
    /// The call goes to a cluster.
    Routed(Routed<'a>),
    /// No route matched: the call fails UNAVAILABLE.
    NoRoute,
    /// The matching route (this index in the virtual host) does not forward: the call fails UNAVAILABLE.
    NonForwarding {
        /// The route's index in [`VirtualHost::routes`].
        route_index: usize,
    },
}

/// A routed call: where it goes and the route's per-call settings. Retries stay on this cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Routed<'a> {
    /// The cluster's name.
    pub cluster: &'a str,
    /// The route's index in [`VirtualHost::routes`].
    pub route_index: usize,
    /// The route itself.
    pub route: &'a Route,
    /// The retry policy (the route's, else its virtual host's).
    pub retry_policy: Option<&'a RetryPolicy>,
    /// The stream duration limit that applies (A31): the route's, else the listener's; `None`: none.
    pub max_stream_duration: Option<Duration>,
    /// The route's hash policies, for a ring hash request hash.
    pub hash_policies: &'a [HashPolicy],
}

/// Routes a call to `path` (`/pkg.Service/Method`) with `headers` in `vhost`. `listener_max_stream_duration`
/// is the Listener's default limit.
pub fn route_call<'a, H, R>(
    vhost: &'a VirtualHost,
    path: &str,
    headers: &H,
    listener_max_stream_duration: Option<Duration>,
    rng: &mut R,
) -> RouteOutcome<'a>
where
    H: HeaderView + ?Sized,
    R: Rng + ?Sized,
{
    let Some((route_index, route)) = vhost
        .routes
        .iter()
        .enumerate()
        .find(|(_, r)| route_matches(&r.matcher, path, headers, rng))
    else {
        return RouteOutcome::NoRoute;
    };
    let Some(cluster) = choose_cluster(&route.action, rng) else {
        return RouteOutcome::NonForwarding { route_index };
    };
    RouteOutcome::Routed(Routed {
        cluster,
        route_index,
        route,
        retry_policy: route.retry_policy.as_ref(),
        max_stream_duration: route
            .max_stream_duration
            .resolve(listener_max_stream_duration),
        hash_policies: &route.hash_policies,
    })
}

/// Whether a call matches a route: path, then every header, then (drawing once) the fraction.
pub fn route_matches<H, R>(matcher: &RouteMatcher, path: &str, headers: &H, rng: &mut R) -> bool
where
    H: HeaderView + ?Sized,
    R: Rng + ?Sized,
{
    matcher.path.matches(path)
        && matcher
            .headers
            .iter()
            .all(|h| h.matches(call_header(headers, &h.name).as_deref()))
        && matcher
            .fraction_per_million
            .is_none_or(|n| rng.next_u64() % 1_000_000 < u64::from(n))
}

/// The cluster a route's action sends one call to (a weighted draw in [0, total): the first entry whose
/// cumulative weight exceeds it), or `None` for a non-forwarding action (or an empty weighted list, which
/// the parser never produces).
pub fn choose_cluster<'a, R: Rng + ?Sized>(
    action: &'a RouteAction,
    rng: &mut R,
) -> Option<&'a str> {
    match action {
        RouteAction::Cluster(name) => Some(name),
        RouteAction::WeightedClusters(clusters) => {
            let total: u64 = clusters.iter().map(|c| u64::from(c.weight)).sum();
            if total == 0 {
                return None;
            }
            let draw = rng.next_u64() % total;
            let mut end = 0u64;
            clusters.iter().find_map(|c| {
                end += u64::from(c.weight);
                (draw < end).then_some(c.name.as_str())
            })
        }
        RouteAction::NonForwarding => None,
    }
}

/// The call's deadline under a stream duration limit (A31): the earlier of the application's deadline
/// and `start + limit`. A limit never extends a deadline; without a limit the application's deadline
/// stands (`None`: no deadline).
pub fn capped_deadline(
    app: Option<Instant>,
    start: Instant,
    limit: Option<Duration>,
) -> Option<Instant> {
    let cap = limit.and_then(|l| start.checked_add(l));
    match (app, cap) {
        (Some(a), Some(c)) => Some(a.min(c)),
        (a, c) => a.or(c),
    }
}

/// A42's request hash of a call with `headers` under a route's hash `policies`, `channel_id` being the
/// channel's random identifier; `None` when no policy produced a hash (the caller then uses a random one).
pub fn request_hash<H: HeaderView + ?Sized>(
    policies: &[HashPolicy],
    headers: &H,
    channel_id: u64,
) -> Option<u64> {
    let mut hash: Option<u64> = None;
    for policy in policies {
        let produced = match &policy.kind {
            HashPolicyKind::Header { name, rewrite } => call_header(headers, name).map(|value| {
                let hashed = |v: &[u8]| xxhash_rust::xxh64::xxh64(v, 0);
                match rewrite {
                    Some(r) => hashed(&r.apply(&value)),
                    None => hashed(&value),
                }
            }),
            HashPolicyKind::ChannelId => Some(channel_id),
        };
        if let Some(p) = produced {
            hash = Some(hash.map_or(p, |h| h.rotate_left(1) ^ p));
        }
        if policy.terminal && hash.is_some() {
            break;
        }
    }
    hash
}

#[cfg(test)]
mod tests;
