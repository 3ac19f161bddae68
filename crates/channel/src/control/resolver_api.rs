//! The public name resolver API (`grpc_channel::resolver`): a [`ResolverBuilder`] registered by URI scheme,
//! per channel ([`ChannelBuilder::resolver`](crate::ChannelBuilder::resolver)) or process-wide
//! ([`register`]), starts a [`Resolver`] for a channel's [`ResolverTarget`]; the resolver reports endpoints,
//! an optional service config and errors to its [`ResolverSink`]. grpc-go's `resolver.Builder`,
//! `resolver.Register` and `resolver.ClientConn` are the model.
//!
//! The channel applies gRFC A21 to a resolver's service config exactly as to a DNS TXT record: an invalid
//! config keeps the last good one; with none yet and no default config, calls fail and
//! [`ResolverSink::update`] returns [`UpdateError::Rejected`] (a polling resolver retries with backoff). An
//! update with no endpoints is an error result too (as in grpc-go and grpc-java), as is one larger than
//! [`MAX_ENDPOINT_ADDRESSES`] addresses or [`MAX_SERVICE_CONFIG_BYTES`] of config. A resolver that panics
//! (in `build`, `resolve_now` or its drop) becomes a channel error (UNAVAILABLE), never a crash; a
//! resolver whose every sink is gone before a first result fails the calls waiting for one.
//!
//! Lookup order at [`ChannelBuilder::build`](crate::ChannelBuilder::build): the channel's own builders,
//! then the process-wide ones, then the built-in `dns`, `ipv4`, `ipv6`, `unix` (and, with feature `xds`,
//! `xds`) resolvers, which run on this same API. The xDS resolver also hands the channel its routing
//! (clusters and the router of gRFC A28/A31) through a crate-private extension of the sink; that is the one
//! thing a user's resolver cannot do.
//!
//! Not here: the channel's side of a resolution (`resolver.rs`: starting, stopping, rate-limiting
//! ResolveNow), the built-in resolvers themselves, the pushed-endpoints resolver (`manual_resolver.rs`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use grpc_service_config::{
    ConfigResult, ConfigSelector, Decision, ParseError, ParseOptions, Rule, ServiceConfig,
};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{watch, Notify};

use crate::control::resolver_state::State;
use crate::wire::status::{Code, Status};

pub use grpc_base::{Address, AttributeValue, Attributes, Endpoint};

pub use crate::control::manual_resolver::{manual, ManualResolverBuilder, PushedEndpoints};
pub use crate::control::resolver_testing::{SinkObserver, SinkState};

/// The most addresses (over all endpoints) one update may carry; a larger update is rejected.
pub const MAX_ENDPOINT_ADDRESSES: usize = 65_536;

/// The longest service config text one update may carry, in bytes; a longer one is rejected.
pub const MAX_SERVICE_CONFIG_BYTES: usize = 256 * 1024;

/// Builds resolvers for one URI scheme.
///
/// ```
/// use grpc_channel::resolver::{
///     Address, Endpoint, Resolver, ResolverBuilder, ResolverError, ResolverSink, ResolverTarget,
///     ResolverUpdate,
/// };
///
/// /// `static:///HOST:PORT,HOST:PORT`: a fixed list.
/// struct Static;
/// struct Running;
/// impl Resolver for Running {}
///
/// impl ResolverBuilder for Static {
///     fn scheme(&self) -> &str {
///         "static"
///     }
///     fn build(&self, target: &ResolverTarget, sink: ResolverSink) -> Result<Box<dyn Resolver>, ResolverError> {
///         let endpoints = target
///             .endpoint()
///             .split(',')
///             .map(|a| a.parse().map(|a| Endpoint::new(Address::Tcp(a))))
///             .collect::<Result<Vec<_>, _>>()
///             .map_err(|e| ResolverError::InvalidTarget {
///                 target: target.as_str().to_owned(),
///                 reason: format!("{e}"),
///             })?;
///         // Rejected only if the list is empty, which the parse above forbids.
///         let _ = sink.update(ResolverUpdate::new(endpoints));
///         Ok(Box::new(Running))
///     }
/// }
/// ```
pub trait ResolverBuilder: Send + Sync + 'static {
    /// The scheme, lower case, without ':' (e.g. "etcd").
    fn scheme(&self) -> &str;

    /// Starts resolving `target`. Called once per channel, inside the tokio runtime of the channel's first
    /// call (or `connect()`), so the resolver may `tokio::spawn`. Results go to `sink` (cheap to clone,
    /// `Send + Sync`, usable from any task). An `Err` (or a panic) fails the channel's calls with
    /// UNAVAILABLE and the error's text; the next call tries again.
    fn build(
        &self,
        target: &ResolverTarget,
        sink: ResolverSink,
    ) -> Result<Box<dyn Resolver>, ResolverError>;
}

/// A running resolver: dropped when the channel closes or is dropped, which must stop everything it
/// started (a task it spawned may also watch [`ResolverSink::closed`]).
pub trait Resolver: Send + 'static {
    /// A hint to resolve again soon (a connection failed, a GOAWAY arrived, the load balancer asked).
    /// Must not block; the channel rate-limits it (at most once per
    /// [`ResolverOptions::min_interval`](crate::ResolverOptions::min_interval), a request inside the
    /// interval deferred to its end). Default: ignore.
    fn resolve_now(&mut self) {}
}

/// A parsed target `scheme://authority/endpoint?query` (also `scheme:endpoint` and
/// `scheme:///endpoint`), split as a URI (RFC 3986) the way grpc-go's `resolver.Target` is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolverTarget {
    text: String,
    scheme: String,
    authority: String,
    endpoint: String,
    query: String,
}

impl ResolverTarget {
    /// Splits `target` as a URI: `None` when it has no scheme (RFC 3986: a letter, then letters, digits,
    /// `+`, `-`, `.`, before the first `:`). The path (the endpoint) is percent-decoded (a broken escape
    /// is kept as written, bytes that are no UTF-8 become U+FFFD); the query (after `?`) is kept apart,
    /// as written, and a fragment (after `#`) is dropped. For a resolver's unit tests, too:
    ///
    /// ```
    /// use grpc_channel::resolver::ResolverTarget;
    /// let t = ResolverTarget::parse("etcd://127.0.0.1:2379/team%2Fsvc?region=eu").expect("a URI");
    /// assert_eq!((t.scheme(), t.authority(), t.endpoint(), t.query()), ("etcd", "127.0.0.1:2379", "team/svc", "region=eu"));
    /// ```
    pub fn parse(target: &str) -> Option<ResolverTarget> {
        let (scheme, rest) = target.split_once(':')?;
        if !is_uri_scheme(scheme) {
            return None;
        }
        let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
        let (hier, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match hier.strip_prefix("//") {
            Some(with_authority) => match with_authority.split_once('/') {
                Some((authority, path)) => (authority, path),
                None => (with_authority, ""),
            },
            None => ("", hier.strip_prefix('/').unwrap_or(hier)),
        };
        Some(ResolverTarget {
            text: target.to_owned(),
            scheme: scheme.to_ascii_lowercase(),
            authority: authority.to_owned(),
            endpoint: percent_encoding::percent_decode_str(path)
                .decode_utf8_lossy()
                .into_owned(),
            query: query.to_owned(),
        })
    }

    /// A built-in target (`host:port`, `ipv4:...`) as its built-in resolver sees it: `text` as written,
    /// under `scheme`, with the parsed target's authority as the endpoint.
    pub(crate) fn of(
        text: &str,
        target: &grpc_service_config::Target,
        scheme: String,
    ) -> ResolverTarget {
        ResolverTarget {
            text: text.to_owned(),
            scheme,
            authority: String::new(),
            endpoint: target.authority(),
            query: String::new(),
        }
    }

    /// The scheme, lower case.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The authority: `HOST:PORT` of `etcd://HOST:PORT/NAME`; `""` if none.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The path without its leading `/`, percent-decoded: `NAME` of `etcd://HOST:PORT/NAME`, `team/svc`
    /// of `reg:///team%2Fsvc` (grpc-go's `Target.Endpoint()`). Without the query.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The query, after `?`, as written (not decoded): `region=eu` of `reg:///svc?region=eu`; `""` if
    /// none (grpc-go's `Target.URL.RawQuery`).
    pub fn query(&self) -> &str {
        &self.query
    }

    /// The target as the application wrote it.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for ResolverTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Whether `scheme` is a URI scheme (RFC 3986: `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`), the only
/// kind a target can name.
pub(crate) fn is_uri_scheme(scheme: &str) -> bool {
    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
}

/// What a resolver reports. One update replaces the whole endpoint list.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResolverUpdate {
    /// The endpoints, in the resolver's order (the load balancing policy may reorder them).
    pub endpoints: Vec<Endpoint>,
    /// The service config, as JSON text; `None` means none (the channel's default applies, else the empty
    /// one).
    pub service_config: Option<String>,
}

impl ResolverUpdate {
    /// These endpoints, with no service config (the default one applies).
    pub fn new(endpoints: Vec<Endpoint>) -> ResolverUpdate {
        ResolverUpdate {
            endpoints,
            service_config: None,
        }
    }

    /// This update with a service config (JSON text, parsed by the channel with gRFC A21's rules).
    #[must_use]
    pub fn with_service_config(mut self, json: impl Into<String>) -> ResolverUpdate {
        self.service_config = Some(json.into());
        self
    }
}

/// Why a resolver could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolverError {
    /// The target is not one this resolver understands.
    #[error("invalid target {target:?}: {reason}")]
    InvalidTarget {
        /// The target as the application wrote it.
        target: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A builder's scheme is no URI scheme (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`), so
    /// no target can name it: [`register`] refuses it.
    #[error("the resolver scheme {0:?} is not a URI scheme (RFC 3986: a letter, then letters, digits, '+', '-' or '.')")]
    InvalidScheme(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// Why the channel did not take an update.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpdateError {
    /// The channel is closed or dropped: the resolver should stop.
    #[error("the channel is closed")]
    Closed,
    /// The channel could not use (all of) the update: no endpoints, too many addresses, or an invalid (or
    /// too long) service config, whose endpoints still apply when a good config is kept (see
    /// [`ResolverSink::update`]). Retry later, with backoff.
    #[error("the channel rejected the update: {0}")]
    Rejected(String),
}

/// Whether the channel behind a sink is gone: set once, by the channel's close or drop.
#[derive(Debug, Default)]
pub(crate) struct Closed {
    closed: AtomicBool,
    notify: Notify,
}

impl Closed {
    /// Marks it closed and wakes [`ResolverSink::closed`].
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Whether it is closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Completes once it is closed.
    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }
}

/// The channel's side of a sink: where results go, and A21's memory of the last good config. Its drop
/// (the last sink gone) drops the sender, which fails calls still waiting for a first result.
struct SinkShared {
    tx: watch::Sender<State>,
    selector: Mutex<ConfigSelector>,
    parse: ParseOptions,
    closed: Arc<Closed>,
    /// Counts the results published, bumped after each is sent (see [`PublishCount`]).
    published: Arc<PublishCount>,
}

/// How many results a channel's resolver has published: bumped with each, under the state's lock, so
/// that a call can wait until the load balancer has applied everything published before it started
/// (an `update()` that returned is seen by every call after it, as grpc-go's `UpdateState` returns once the
/// balancer has it).
#[derive(Debug, Default)]
pub(crate) struct PublishCount(std::sync::atomic::AtomicU64);

impl PublishCount {
    /// The number published so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Where a resolver sends its results: cheap to clone, `Send + Sync`, usable from any task.
#[derive(Clone)]
pub struct ResolverSink {
    shared: Arc<SinkShared>,
}

impl fmt::Debug for ResolverSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolverSink")
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl ResolverSink {
    /// A sink publishing to `tx`, with A21's default config, until `closed`.
    pub(crate) fn new(
        tx: watch::Sender<State>,
        default_config: Option<ServiceConfig>,
        parse: ParseOptions,
        closed: Arc<Closed>,
        published: Arc<PublishCount>,
    ) -> ResolverSink {
        ResolverSink {
            shared: Arc::new(SinkShared {
                tx,
                selector: Mutex::new(ConfigSelector::new(default_config)),
                parse,
                closed,
                published,
            }),
        }
    }

    /// A reference that does not keep the sink's channel side alive.
    pub(crate) fn downgrade(&self) -> WeakSink {
        WeakSink(Arc::downgrade(&self.shared))
    }

    /// Publishes endpoints (and a service config, parsed with the same A21 rules as DNS TXT). `Err` when
    /// the channel could not use all of it ([`UpdateError::Rejected`]; a polling resolver retries with
    /// backoff), or when the channel is gone ([`UpdateError::Closed`]):
    /// * no endpoints, or more than [`MAX_ENDPOINT_ADDRESSES`] addresses: nothing changes, except that
    ///   before any good result fail-fast calls fail UNAVAILABLE with the reason;
    /// * an invalid config, or one longer than [`MAX_SERVICE_CONFIG_BYTES`] (A21): after a good one (or
    ///   with a default config) the endpoints apply under that config, and the update is still
    ///   `Rejected` (grpc-go's `ErrBadResolverState`); with none, calls fail UNAVAILABLE.
    pub fn update(&self, update: ResolverUpdate) -> Result<(), UpdateError> {
        if self.is_closed() {
            return Err(UpdateError::Closed);
        }
        let addresses: usize = update.endpoints.iter().map(|e| e.addresses().len()).sum();
        let too_much = if update.endpoints.is_empty() {
            Some("the resolver returned no endpoints".to_owned())
        } else if addresses > MAX_ENDPOINT_ADDRESSES {
            Some(format!(
                "the resolver returned {addresses} addresses, more than the {MAX_ENDPOINT_ADDRESSES} allowed"
            ))
        } else {
            None
        };
        if let Some(reason) = too_much {
            self.report_error(&reason);
            return Err(UpdateError::Rejected(reason));
        }
        // A config over the limit is not parsed: it is an invalid config (A21), so the endpoints still
        // apply under the last good config.
        let config = match &update.service_config {
            None => ConfigResult::None,
            Some(json) if json.len() > MAX_SERVICE_CONFIG_BYTES => {
                ConfigResult::Invalid(ParseError {
                    path: "$".to_owned(),
                    rule: Rule::OutOfRange(format!(
                        "the resolver's service config has {} bytes, more than the {MAX_SERVICE_CONFIG_BYTES} allowed",
                        json.len()
                    )),
                })
            }
            Some(json) => match ServiceConfig::parse(json, self.shared.parse.clone()) {
                Ok(config) => ConfigResult::Config(Arc::new(config)),
                Err(e) => ConfigResult::Invalid(e),
            },
        };
        // grpc-go's `ErrBadResolverState`: the resolver learns its config was not used, even when the
        // channel kept the previous one (and took the endpoints).
        match self.apply(update.endpoints.into(), config)? {
            None => Ok(()),
            Some(kept) => Err(UpdateError::Rejected(kept)),
        }
    }

    /// Publishes `endpoints` with a config result after A21 (the DNS resolver's way in, whose TXT answer
    /// is parsed already). An invalid config after a good one keeps the good one and counts as taken.
    pub(crate) fn publish(
        &self,
        endpoints: Arc<[Endpoint]>,
        config: ConfigResult,
    ) -> Result<(), UpdateError> {
        self.apply(endpoints, config).map(|_| ())
    }

    /// Applies A21 to `config` and publishes the result: `Ok(Some(reason))` when the config was invalid
    /// and the previous one is kept (the endpoints apply), `Err` when nothing could be used.
    fn apply(
        &self,
        endpoints: Arc<[Endpoint]>,
        config: ConfigResult,
    ) -> Result<Option<String>, UpdateError> {
        if self.is_closed() {
            return Err(UpdateError::Closed);
        }
        let decision = self.shared.selector.lock().update(config);
        let (next, result) = match decision {
            Decision::Fail(e) => {
                let reason = format!("name resolution failed: {e}");
                (
                    State::Failed(Status::new(Code::Unavailable, reason.clone()).with_source(e)),
                    Err(UpdateError::Rejected(reason)),
                )
            }
            Decision::KeepPrevious(config, e) => {
                tracing::warn!(error = %e, "invalid service config from the resolver; keeping the previous one");
                (
                    State::Ready {
                        endpoints,
                        config,
                        routing: None,
                    },
                    Ok(Some(format!(
                        "{e}; the previous service config stays in use, with the new endpoints"
                    ))),
                )
            }
            Decision::Use(config) => (
                State::Ready {
                    endpoints,
                    config,
                    routing: None,
                },
                Ok(None),
            ),
        };
        self.send(next);
        result
    }

    /// Replaces the state and counts it, both under the state's lock (a reader holding it sees the count
    /// of the state it reads).
    fn send(&self, state: State) {
        self.shared.tx.send_modify(|current| {
            *current = state;
            self.shared.published.bump();
        });
    }

    /// Publishes a state as it is (the xDS resolver's routing side-channel: its config and routing are
    /// its own, after its own A21 handling).
    #[cfg_attr(not(feature = "xds"), allow(dead_code))]
    pub(crate) fn publish_state(&self, state: State) -> Result<(), UpdateError> {
        if self.is_closed() {
            return Err(UpdateError::Closed);
        }
        self.send(state);
        Ok(())
    }

    /// Reports a failure. Endpoints already published stay in use (calls go on); before any, fail-fast
    /// calls fail UNAVAILABLE with this message (wait-for-ready calls wait).
    pub fn report_error(&self, error: impl fmt::Display) {
        if self.is_closed() {
            return;
        }
        let message = error.to_string();
        self.shared.tx.send_if_modified(|state| match state {
            State::Ready { .. } => false,
            _ => {
                *state = State::Failed(Status::new(Code::Unavailable, message));
                true
            }
        });
    }

    /// Reports a failure with its status (kept as the source of the calls' status).
    pub(crate) fn report_status(&self, status: Status) {
        if self.is_closed() {
            return;
        }
        self.shared.tx.send_if_modified(|state| match state {
            State::Ready { .. } => false,
            _ => {
                *state = State::Failed(status);
                true
            }
        });
    }

    /// Whether the channel is gone (its resolver should stop).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.is_closed()
    }

    /// Completes when the channel is gone.
    pub async fn closed(&self) {
        self.shared.closed.wait().await;
    }
}

/// A [`ResolverSink`] that does not keep it alive (the channel's, to report a resolver's panic).
pub(crate) struct WeakSink(std::sync::Weak<SinkShared>);

impl WeakSink {
    /// The sink, while a resolver holds it.
    pub(crate) fn upgrade(&self) -> Option<ResolverSink> {
        self.0.upgrade().map(|shared| ResolverSink { shared })
    }
}

/// A registered builder, as the registries keep it.
#[derive(Clone)]
pub(crate) struct SharedBuilder(pub(crate) Arc<dyn ResolverBuilder>);

impl fmt::Debug for SharedBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ResolverBuilder({:?})", self.0.scheme())
    }
}

impl SharedBuilder {
    /// The builder's scheme, lower case.
    pub(crate) fn scheme(&self) -> String {
        self.0.scheme().to_ascii_lowercase()
    }
}

fn process_registry() -> &'static RwLock<BTreeMap<String, SharedBuilder>> {
    static REGISTRY: OnceLock<RwLock<BTreeMap<String, SharedBuilder>>> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

/// Registers `builder` for its scheme in this process (replacing an earlier one of that scheme): every
/// channel built afterwards whose target has that scheme uses it, unless the channel has its own
/// ([`ChannelBuilder::resolver`](crate::ChannelBuilder::resolver)). A registered scheme also overrides a
/// built-in one (`dns`, ...; a `dns` builder also takes targets without a scheme, `host:port`). Channels
/// already built keep theirs.
///
/// # Errors
///
/// [`ResolverError::InvalidScheme`] when the builder's scheme is no URI scheme (RFC 3986: a letter, then
/// letters, digits, `+`, `-`, `.`; `my_reg` is not one): no target could ever name it.
pub fn register(builder: impl ResolverBuilder) -> Result<(), ResolverError> {
    let shared = SharedBuilder(Arc::new(builder));
    let scheme = shared.scheme();
    if !is_uri_scheme(&scheme) {
        return Err(ResolverError::InvalidScheme(scheme));
    }
    process_registry().write().insert(scheme, shared);
    Ok(())
}

/// The process-wide builder for `scheme` (lower case), if one is registered.
pub(crate) fn registered(scheme: &str) -> Option<SharedBuilder> {
    process_registry().read().get(scheme).cloned()
}

/// The schemes registered process-wide.
pub(crate) fn registered_schemes() -> Vec<String> {
    process_registry().read().keys().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(t: &str) -> Option<(String, String, String)> {
        ResolverTarget::parse(t).map(|t| {
            (
                t.scheme().to_owned(),
                t.authority().to_owned(),
                t.endpoint().to_owned(),
            )
        })
    }

    fn p(s: &str, a: &str, e: &str) -> Option<(String, String, String)> {
        Some((s.to_owned(), a.to_owned(), e.to_owned()))
    }

    #[test]
    fn targets_split_into_scheme_authority_and_endpoint() {
        assert_eq!(
            parts("etcd://127.0.0.1:2379/svc/a"),
            p("etcd", "127.0.0.1:2379", "svc/a")
        );
        assert_eq!(parts("Manual:///x"), p("manual", "", "x"));
        assert_eq!(parts("manual:x"), p("manual", "", "x"));
        assert_eq!(parts("manual:/x"), p("manual", "", "x"));
        assert_eq!(parts("reg://host"), p("reg", "host", ""));
        assert_eq!(parts("[::1]:80"), None);
        assert_eq!(parts("1abc:x"), None);
        assert_eq!(parts("reg://h:1/a%2Fb%20c"), p("reg", "h:1", "a/b c"));
        assert_eq!(parts("reg:///svc%zz%"), p("reg", "", "svc%zz%"));
        assert_eq!(parts("reg://h?x=1"), p("reg", "h", ""));
        assert_eq!(parts("reg:svc?x=1#frag"), p("reg", "", "svc"));
        let t = ResolverTarget::parse("reg:///svc?region=eu&a=%20#f").expect("target");
        assert_eq!(t.query(), "region=eu&a=%20");
        assert_eq!(
            ResolverTarget::parse("reg:///svc").expect("target").query(),
            ""
        );
        assert_eq!(
            ResolverTarget::parse("Manual:///x")
                .expect("target")
                .as_str(),
            "Manual:///x"
        );
    }

    #[test]
    fn an_update_builds_with_a_config() {
        let e = Endpoint::new(Address::Tcp(([127, 0, 0, 1], 1).into()));
        let u = ResolverUpdate::new(vec![e.clone()]).with_service_config("{}");
        assert_eq!(u.endpoints, vec![e]);
        assert_eq!(u.service_config.as_deref(), Some("{}"));
    }
}
