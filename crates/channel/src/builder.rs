//! [`ChannelBuilder`]: every option of a channel, checked in [`ChannelBuilder::build`] before any connection
//! is made.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderValue;
use http::uri::{Authority, Scheme};

use crate::call::telemetry::Telemetry;
use crate::conn::connect::Http2Settings;
use crate::conn::error::{BuildError, ConnectError};
use crate::conn::keepalive::{Keepalive, DEFAULT_KEEPALIVE_TIMEOUT};
use crate::conn::proxy::{self, ProxyChoice};
use crate::conn::tls::{server_name_host, TlsConfig};
use crate::control::builtin_resolvers::{DnsResolverBuilder, FixedResolverBuilder};
use crate::control::resolver::{Kind, Resolution};
use crate::control::resolver_api::{self, ResolverBuilder, ResolverTarget, SharedBuilder};
use crate::control::DEFAULT_IDLE_TIMEOUT;
use crate::request::interceptor::{Interceptor, Interceptors};
use crate::wire::compression::{Encoding, EncodingSet};
use crate::wire::method_uris::MethodUris;
use grpc_base::{Address, Endpoint};
use grpc_retry::{
    AppRetryPolicy, BufferPool, Precedence, DEFAULT_PER_CALL_LIMIT, DEFAULT_PER_CHANNEL_LIMIT,
};
use grpc_service_config::{url_security, ResolverOptions, ServiceConfig, Target, UrlSecurity};

use crate::channel::{Channel, Inner};

/// Builds a [`Channel`]: target, service config, retries, TLS, keepalive, limits, interceptors.
///
/// ```
/// use grpc_channel::{Channel, TlsConfig};
/// use std::time::Duration;
///
/// # fn example() -> Result<(), grpc_channel::BuildError> {
/// let channel = Channel::builder("dns:///api.example.com:443")
///     .tls(TlsConfig::new().webpki_roots())
///     .default_service_config(r#"{"loadBalancingConfig": [{"round_robin": {}}]}"#)
///     .keepalive_time(Duration::from_secs(300)) // servers refuse pings more often than every 5 min by default
///     .per_rpc_buffer_limit(256 << 10)
///     .build()?;
/// # let _ = channel;
/// # Ok(()) }
/// ```
#[doc(alias = "Endpoint")]
#[derive(Clone, Debug)]
pub struct ChannelBuilder {
    target: String,
    authority: Option<String>,
    user_agent: Option<String>,
    max_receive: Option<usize>,
    max_send: Option<usize>,
    send_compression: Option<Encoding>,
    accept: EncodingSet,
    http2: Http2Settings,
    default_service_config: Option<String>,
    resolver: ResolverOptions,
    /// The channel's own load-balancing policies (they win over the process-wide ones).
    policies: grpc_lb::PolicyRegistry,
    /// The xDS bootstrap JSON given by the application (else the environment's).
    #[cfg(feature = "xds")]
    xds_bootstrap: Option<String>,
    /// xDS credentials (A29): clusters' TLS settings from the control plane (SKELETON, issue 36).
    #[cfg(feature = "xds")]
    xds_credentials: bool,
    idle_timeout: Duration,
    health_checks: bool,
    proxy: ProxyChoice,
    default_timeout: Option<Duration>,
    retries: bool,
    app_policy: Option<Arc<dyn AppRetryPolicy>>,
    precedence: Precedence,
    per_rpc_buffer_limit: usize,
    retry_buffer_size: usize,
    keepalive_time: Option<Duration>,
    keepalive_timeout: Duration,
    keepalive_permit_without_calls: bool,
    tls: Option<TlsConfig>,
    interceptors: Interceptors,
    exactly_once: bool,
    /// The channel's own resolver builders (`resolver()`), by scheme; they win over the process-wide ones.
    resolvers: Vec<SharedBuilder>,
}

impl ChannelBuilder {
    /// A builder for `target` with every option at its default.
    pub(crate) fn new(target: String) -> ChannelBuilder {
        ChannelBuilder {
            target,
            authority: None,
            user_agent: None,
            max_receive: None,
            max_send: None,
            send_compression: None,
            accept: EncodingSet::gzip(),
            http2: Http2Settings::default(),
            default_service_config: None,
            resolver: ResolverOptions::default(),
            policies: grpc_lb::PolicyRegistry::default(),
            #[cfg(feature = "xds")]
            xds_bootstrap: None,
            #[cfg(feature = "xds")]
            xds_credentials: false,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            health_checks: true,
            proxy: ProxyChoice::FromEnvironment,
            default_timeout: None,
            retries: true,
            app_policy: None,
            precedence: Precedence::ServiceConfig,
            per_rpc_buffer_limit: DEFAULT_PER_CALL_LIMIT,
            retry_buffer_size: DEFAULT_PER_CHANNEL_LIMIT,
            keepalive_time: None,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            keepalive_permit_without_calls: false,
            tls: None,
            interceptors: Interceptors::default(),
            exactly_once: false,
            resolvers: Vec::new(),
        }
    }

    /// Resolves targets of `builder`'s scheme with it, for this channel (it wins over one registered
    /// process-wide with [`resolver::register`](crate::resolver::register), and over a built-in one; a
    /// `dns` builder also takes targets without a scheme, `host:port`). A later builder of the same scheme
    /// replaces an earlier one. A builder whose scheme is no URI scheme (RFC 3986: a letter, then letters,
    /// digits, `+`, `-`, `.`) makes [`ChannelBuilder::build`] fail. See [`crate::resolver`].
    pub fn resolver(mut self, builder: impl ResolverBuilder) -> Self {
        let shared = SharedBuilder(Arc::new(builder));
        let scheme = shared.scheme();
        self.resolvers.retain(|b| b.scheme() != scheme);
        self.resolvers.push(shared);
        self
    }

    /// Makes every call exactly-once (off by default; a call's [`Request::with_exactly_once`](crate::Request::with_exactly_once) overrides it):
    /// every attempt, retries and hedges alike, carries a request id (this channel's random client id, the
    /// call's sequence number, the channel's first incomplete sequence number, the attempt number) as the
    /// metadata `exactly-once-request-id-bin`, so that a server with a `grpc-exactly-once` result tracker
    /// runs the call at most once and answers every attempt with its result. This makes retries and hedging
    /// safe for non-idempotent methods whose servers track results.
    pub fn exactly_once(mut self, enabled: bool) -> Self {
        self.exactly_once = enabled;
        self
    }

    /// Adds an interceptor: it sees every call's method, metadata and options before the first attempt,
    /// may change them, or fail the call (unsent) with a status. Interceptors run in the order added. See
    /// [`Interceptor`].
    pub fn interceptor(mut self, interceptor: impl Interceptor) -> Self {
        self.interceptors.push(Arc::new(interceptor));
        self
    }

    /// Connects over TLS (rustls; ALPN `h2` required, the certificate always verified) with this
    /// configuration; see [`TlsConfig`] for the roots, client certificates and the server name. An
    /// `https://` target uses TLS with the platform's roots without this; an `http://` target cannot have
    /// it. Works with every target kind: each subchannel makes its own TLS session.
    #[doc(alias = "tls_config")]
    pub fn tls(mut self, config: TlsConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// Turns client keepalive on (gRFC A8; off by default): after `time` without any frame from the
    /// server, the client sends a PING, and closes the connection if it is not answered within the
    /// keepalive timeout (its calls fail UNAVAILABLE, the channel reconnects). Values under 10 s are raised
    /// to 10 s. A server that answers GOAWAY "too_many_pings" doubles the time for the channel's later
    /// connections. (tonic's `Endpoint::http2_keep_alive_interval`.)
    #[doc(alias = "http2_keep_alive_interval")]
    pub fn keepalive_time(mut self, time: Duration) -> Self {
        self.keepalive_time = Some(time);
        self
    }

    /// How long a keepalive PING may go unanswered before the connection is closed (20 s by default;
    /// tonic's `Endpoint::keep_alive_timeout`).
    #[doc(alias = "keep_alive_timeout")]
    pub fn keepalive_timeout(mut self, timeout: Duration) -> Self {
        self.keepalive_timeout = timeout;
        self
    }

    /// Whether keepalive PINGs are sent while no stream is open: no call of the channel in flight and no
    /// health Watch (gRFC A17) open on the connection (off by default; servers usually refuse pings
    /// without streams). A connection whose health Watch is open is pinged either way. (tonic's
    /// `Endpoint::keep_alive_while_idle`.)
    #[doc(alias = "keep_alive_while_idle")]
    pub fn keepalive_permit_without_calls(mut self, permit: bool) -> Self {
        self.keepalive_permit_without_calls = permit;
        self
    }

    /// Turns policy retries and hedging on (the default) or off for every call of the channel (gRFC A6
    /// "Disabling Retries"). Transparent retries (a call that never left the client, or that the server's
    /// HTTP/2 stack refused) stay on either way.
    pub fn retries(mut self, enabled: bool) -> Self {
        self.retries = enabled;
        self
    }

    /// The application's retry policy for every call of the channel: [`crate::NoRetry`],
    /// [`crate::Linear`], [`crate::Exponential`] or a custom [`AppRetryPolicy`], run with A6's guard rails
    /// (throttle, at most 5 attempts, pushback, deadline, commit, buffer limits). By default it applies to
    /// methods whose service config has no `retryPolicy` or `hedgingPolicy`; see
    /// [`ChannelBuilder::retry_policy_precedence`] to make it win. A policy set on a call
    /// ([`Request::with_retry_policy`](crate::Request::with_retry_policy)) replaces it for that call.
    pub fn retry_policy(mut self, policy: impl AppRetryPolicy + 'static) -> Self {
        self.app_policy = Some(Arc::new(policy));
        self
    }

    /// Which policy wins when the service config and [`ChannelBuilder::retry_policy`] both have one for a
    /// method: [`Precedence::ServiceConfig`] (the default: the service owner knows which methods are safe
    /// to retry) or [`Precedence::Application`].
    pub fn retry_policy_precedence(mut self, precedence: Precedence) -> Self {
        self.precedence = precedence;
        self
    }

    /// The most request bytes one call keeps for replay on a retry, hedge or transparent retry (1 MiB by
    /// default). A call whose messages outgrow it commits to its current attempt: it is still sent, but
    /// never retried again.
    pub fn per_rpc_buffer_limit(mut self, bytes: usize) -> Self {
        self.per_rpc_buffer_limit = bytes;
        self
    }

    /// The most request bytes all calls of the channel keep for replay together (16 MiB by default). A
    /// message that does not fit commits its call, as with [`ChannelBuilder::per_rpc_buffer_limit`].
    pub fn retry_buffer_size(mut self, bytes: usize) -> Self {
        self.retry_buffer_size = bytes;
        self
    }

    /// Overrides the `:authority` sent with every call (by default the target's `host:port`). On a TLS
    /// channel its host is also the server name (SNI, and the name the server's certificate is verified
    /// against) unless [`TlsConfig::server_name`] is set. On an `xds:` channel it is also the name the
    /// route configuration's virtual hosts are matched against (gRFC A28's data-plane authority) instead
    /// of the target's name.
    ///
    /// tonic's `Endpoint::origin` is the nearest equivalent: it takes a URI and sets the requests'
    /// `:scheme` and `:authority`, but not the TLS server name, which tonic takes from
    /// `ClientTlsConfig::domain_name` or the endpoint's own host. To send another `:authority` while
    /// verifying the server as the target's host, as tonic's `origin` does, set
    /// [`TlsConfig::server_name`] to that host too. The `:scheme` here always follows the channel's
    /// security (`https` with TLS, else `http`).
    #[doc(alias = "origin")]
    pub fn authority(mut self, authority: impl Into<String>) -> Self {
        self.authority = Some(authority.into());
        self
    }

    /// Puts `product` in front of this crate's `user-agent` (`product grpc-rust/VERSION`).
    pub fn user_agent(mut self, product: impl Into<String>) -> Self {
        self.user_agent = Some(product.into());
        self
    }

    /// The largest response message accepted (4 MiB by default, at most 2^32 − 1); larger ones end the call
    /// with RESOURCE_EXHAUSTED, whose message names the limit hit. A compressed message counts as it
    /// arrives and once decompressed (decompression stops past the limit). A call's own limit
    /// ([`Request::with_max_receive_message_size`](crate::Request::with_max_receive_message_size), a generated
    /// client's `max_decoding_message_size`) replaces this one for the call, and may raise it; a service
    /// config's `maxResponseMessageBytes` caps both (the smaller wins), as in grpc-go.
    ///
    /// Through `tower::ChannelService` (feature `tower`) the tonic client enforces its own
    /// `max_decoding_message_size`: there, the channel's limit applies only when set here (or by the call or
    /// the service config), not its 4 MiB default.
    pub fn max_receive_message_size(mut self, bytes: usize) -> Self {
        self.max_receive = Some(bytes);
        self
    }

    /// The largest request message sent (2 GiB − 1 by default); larger ones end the call with
    /// RESOURCE_EXHAUSTED, unsent. A compressed message counts as compressed. A call's own limit
    /// ([`Request::with_max_send_message_size`](crate::Request::with_max_send_message_size), a generated
    /// client's `max_encoding_message_size`) replaces this one for the call; a service config's
    /// `maxRequestMessageBytes` caps both (the smaller wins).
    pub fn max_send_message_size(mut self, bytes: usize) -> Self {
        self.max_send = Some(bytes);
        self
    }

    /// Compresses the request messages of every call that chooses no encoding itself (none by default:
    /// messages go uncompressed). A call's
    /// [`Request::with_compression`](crate::Request::with_compression) or a generated client's
    /// `send_compressed` wins, `Encoding::Identity` included. The server must support the encoding, or
    /// it answers UNIMPLEMENTED: every gRPC server decodes gzip (grpc-java only gzip, C-core gzip and
    /// deflate); `zstd` is tonic's extension.
    pub fn send_compressed(mut self, encoding: Encoding) -> Self {
        self.send_compression = match encoding {
            Encoding::Identity => None,
            other => Some(other),
        };
        self
    }

    /// Advertises `encoding` in every call's `grpc-accept-encoding` too, so servers may compress responses
    /// with it. The channel advertises `gzip` unless told otherwise (as grpc-java does); it decodes exactly
    /// what it advertises, and a response compressed with anything else fails the call with INTERNAL.
    /// Calls may add encodings of their own
    /// ([`Request::with_accept_compressed`](crate::Request::with_accept_compressed), a generated client's
    /// `accept_compressed`). Identity is always accepted; adding it does nothing.
    pub fn accept_compressed(mut self, encoding: Encoding) -> Self {
        self.accept.insert(encoding);
        self
    }

    /// Replaces the encodings every call advertises in `grpc-accept-encoding` (by default `gzip`; see
    /// [`ChannelBuilder::accept_compressed`]). None at all sends no `grpc-accept-encoding`: servers then
    /// answer uncompressed, and a compressed response fails with INTERNAL.
    pub fn accept_encodings(mut self, encodings: impl IntoIterator<Item = Encoding>) -> Self {
        self.accept = encodings.into_iter().collect();
        self
    }

    /// The service config to use when the resolver provides none (no TXT record, lookups turned off, a static
    /// target) and when the first one it provides is invalid (gRFC A21). Checked by `build()`.
    pub fn default_service_config(mut self, json: impl Into<String>) -> Self {
        self.default_service_config = Some(json.into());
        self
    }

    /// Turns the DNS TXT service config lookup on (the default) or off.
    pub fn service_config_lookup(mut self, enabled: bool) -> Self {
        self.resolver.txt_lookups = enabled;
        self
    }

    /// How long the channel keeps its connections with no call in flight before it goes IDLE (30 min by
    /// default, as gRFC A62 recommends). A value too large to add to the clock means never.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Client-side health checking (gRFC A17): on by default, which means it runs when the service config
    /// asks for it (`"healthCheckConfig": {"serviceName": "..."}`) under a policy that balances over
    /// several backends (round_robin). `false` vetoes it whatever the config says (grpc-go's
    /// `WithDisableHealthCheck`, C-core's `grpc.inhibit_health_checking`): no Watch streams, and backends
    /// are used whatever their health service says.
    pub fn health_checks(mut self, enabled: bool) -> Self {
        self.health_checks = enabled;
        self
    }

    /// Connects through this HTTP CONNECT proxy (gRFC A1), `http://[user[:password]@]host[:port]`
    /// (port 80 by default; credentials go as `Proxy-Authorization: Basic` and never into logs or errors),
    /// instead of the one the environment names, and for every target but `unix:` ones: the no-proxy
    /// variables do not apply. A `dns:` target's name goes to the proxy unresolved; each address of an
    /// `ipv4:`/`ipv6:` target is a tunnel of its own. TLS, when the channel has it, runs inside the tunnel
    /// with the target's name. A URI of another scheme is a build error.
    pub fn proxy(mut self, uri: impl Into<String>) -> Self {
        self.proxy = ProxyChoice::Given(uri.into());
        self
    }

    /// The xDS bootstrap (gRFC A27's JSON: `xds_servers`, `node`, ...) for an `xds:///name` target, instead
    /// of the one the environment names (`GRPC_XDS_BOOTSTRAP`, a file, else `GRPC_XDS_BOOTSTRAP_CONFIG`, the
    /// JSON). A bootstrap that does not parse is a build error naming the field. Feature `xds`.
    #[cfg(feature = "xds")]
    pub fn xds_bootstrap(mut self, json: impl Into<String>) -> Self {
        self.xds_bootstrap = Some(json.into());
        self
    }

    /// Uses xDS credentials (gRFC A29) for an `xds:` target: a cluster's `transport_socket` secures its
    /// connections (TLS or mTLS from the bootstrap's certificate providers, the server's SANs checked); a
    /// cluster without one uses the channel's own transport (plaintext, or [`ChannelBuilder::tls`]). Off by
    /// default, as in every gRPC stack; an error never falls back to plaintext. Feature `xds`.
    #[cfg(feature = "xds")]
    pub fn xds_credentials(mut self) -> Self {
        self.xds_credentials = true;
        self
    }

    /// Connects directly, whatever the proxy environment variables say.
    ///
    /// Without [`ChannelBuilder::proxy`] or this, [`ChannelBuilder::build`] reads the environment: the
    /// first of `grpc_proxy`, `GRPC_PROXY`, `https_proxy`, `HTTPS_PROXY`, `http_proxy`, `HTTP_PROXY` that is
    /// set names the proxy (set and empty means none), and the first of `no_grpc_proxy`, `NO_GRPC_PROXY`,
    /// `no_proxy`, `NO_PROXY` that is set lists the targets that connect directly (host names with their
    /// subdomains, IP addresses, CIDR blocks, each with an optional `:port`, or `*`).
    pub fn no_proxy(mut self) -> Self {
        self.proxy = ProxyChoice::Off;
        self
    }

    /// Registers a load-balancing policy for this channel only, under its builder's name: a service
    /// config's `loadBalancingConfig` (the default one, or one from the resolver) can then select it. It
    /// wins over a policy registered process-wide under the same name (`grpc_channel::lb::register_policy`)
    /// and over a built-in of that name. See [`crate::lb`].
    pub fn lb_policy(mut self, builder: impl grpc_lb::LoadBalancerBuilder) -> Self {
        self.policies.register(Arc::new(builder));
        self
    }

    /// The DNS resolver's options (minimum re-resolution interval, query timeout, `maxAttempts` cap, host
    /// name for `clientHostname`).
    pub fn resolver_options(mut self, options: ResolverOptions) -> Self {
        self.resolver = options;
        self
    }

    /// The least time each connection attempt (TCP connect, TLS and HTTP/2 handshakes) gets before it
    /// counts as failed: the connection-backoff spec's MIN_CONNECT_TIMEOUT, 20 s by default. An attempt
    /// made after a longer backoff gets that backoff instead, so this is a floor, **not a cap** as tonic's
    /// `Endpoint::connect_timeout` is; to bound how long a call waits for a connection, give it a deadline
    /// ([`ChannelBuilder::timeout`], [`Request::with_timeout`](crate::Request::with_timeout)). Applies to
    /// every target; a value too large to add to the clock means the attempt never times out.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.http2.connect_timeout = timeout;
        self
    }

    /// A timeout for every call that sets none (none by default). A call's own timeout
    /// ([`Request::with_timeout`](crate::Request::with_timeout)) replaces it; the service config's `timeout`
    /// for the method still applies on top, and the smaller deadline wins. Unlike tonic's
    /// `Endpoint::timeout`, which bounds only the wait for response headers, this is the call's gRPC
    /// deadline (sent as `grpc-timeout`), streams included: a stream that must outlive it sets its own
    /// timeout (`Duration::MAX` for none).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = Some(timeout);
        self
    }

    /// Sets TCP_NODELAY on every TCP connection (on by default: gRPC's small messages must not wait for
    /// Nagle's algorithm).
    pub fn tcp_nodelay(mut self, enabled: bool) -> Self {
        self.http2.tcp_nodelay = enabled;
        self
    }

    /// The kernel's TCP keepalive on every TCP connection: probes after `idle` without traffic, every
    /// `idle` after that (60 s by default); `None` turns it off. The kernel counts in whole seconds, so a
    /// shorter `idle` is raised to 1 s. Independent of gRPC keepalive PINGs
    /// ([`ChannelBuilder::keepalive_time`]), which also find a peer that stopped answering at the HTTP/2
    /// level.
    pub fn tcp_keepalive(mut self, idle: Option<Duration>) -> Self {
        self.http2.tcp_keepalive = idle.map(|d| d.max(Duration::from_secs(1)));
        self
    }

    /// The HTTP/2 settings (windows, frame sizes); the defaults are documented on [`Http2Settings`]. tonic's
    /// `Endpoint::initial_stream_window_size`, `initial_connection_window_size` and `max_frame_size` are
    /// its fields; `http2_max_header_list_size` is nearest to
    /// [`Http2Settings::max_header_list_size`], which differs in what it advertises to the server (see
    /// there).
    #[doc(alias(
        "initial_stream_window_size",
        "initial_connection_window_size",
        "http2_max_header_list_size",
        "max_frame_size"
    ))]
    pub fn http2_settings(mut self, settings: Http2Settings) -> Self {
        self.http2 = settings;
        self
    }

    /// Builds the channel and connects it now (tonic's `Endpoint::connect`): the channel once a connection
    /// is READY, or an error naming the cause when the backend is unreachable (every address failed, or name
    /// resolution did). [`ChannelBuilder::build`] is the lazy form, which connects on the first call. Must be
    /// called inside a tokio runtime.
    pub async fn connect(self) -> Result<Channel, ConnectError> {
        let target = self.target.clone();
        let channel = self.build()?;
        match channel.ready().await {
            Ok(()) => Ok(channel),
            Err(status) => Err(ConnectError::Unreachable { target, status }),
        }
    }

    /// Checks the options and builds the channel. Does not connect (see [`ChannelBuilder::connect`]): tonic's
    /// `Endpoint::connect_lazy`.
    #[doc(alias = "connect_lazy")]
    pub fn build(mut self) -> Result<Channel, BuildError> {
        // The channel's own policies join those the resolver options carry (and win over them): every
        // service config of the channel is parsed with them.
        self.resolver.parse.policies.extend(&self.policies);
        if let Some(bad) = self
            .resolvers
            .iter()
            .map(SharedBuilder::scheme)
            .find(|s| !resolver_api::is_uri_scheme(s))
        {
            return Err(BuildError::InvalidOption {
                option: "resolver",
                reason: resolver_api::ResolverError::InvalidScheme(bad).to_string(),
            });
        }
        // A registered resolver (the channel's own, then the process's) takes its scheme's targets first,
        // built-in schemes included; other targets are the built-in kinds.
        let written = ResolverTarget::parse(&self.target);
        let find = |scheme: &str| {
            self.resolvers
                .iter()
                .find(|b| b.scheme() == scheme)
                .cloned()
                .or_else(|| resolver_api::registered(scheme))
        };
        let mut registered = written.as_ref().and_then(|t| find(t.scheme()));
        let target = match (&written, &registered) {
            (Some(t), Some(_)) => Target::Custom {
                scheme: t.scheme().to_owned(),
                authority: t.authority().to_owned(),
                endpoint: t.endpoint().to_owned(),
            },
            _ => Target::parse(&self.target).map_err(|e| BuildError::InvalidTarget {
                target: e.target,
                reason: e.reason,
            })?,
        };
        // A target without a scheme (`host:port`) is a DNS name: a registered `dns` builder takes it too,
        // as in grpc-go (its default scheme's builder is looked up in the registry). Not URL targets.
        if registered.is_none()
            && matches!(target, Target::Dns { server: None, .. })
            && url_security(&self.target).is_none()
        {
            registered = find("dns");
        }
        if let (Target::Custom { scheme, .. }, None) = (&target, &registered) {
            let mut known: Vec<String> = self.resolvers.iter().map(SharedBuilder::scheme).collect();
            known.extend(resolver_api::registered_schemes());
            known.sort();
            known.dedup();
            let registered = if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            };
            return Err(BuildError::InvalidTarget {
                target: self.target.clone(),
                reason: format!(
                    "no resolver for scheme {scheme:?}: the built-in schemes are {} (a target without a scheme is a DNS name); registered: {registered}",
                    grpc_service_config::SUPPORTED_SCHEMES.join(", ")
                ),
            });
        }
        #[cfg(not(feature = "xds"))]
        if let Target::Xds { .. } = target {
            return Err(BuildError::InvalidTarget {
                target: self.target.clone(),
                reason: "xds: targets need grpc-channel's feature `xds`".to_owned(),
            });
        }
        // A value that is not UTF-8 is set all the same (first set wins); read lossily, it fails to parse
        // and is ignored with a warning naming the variable.
        let route = proxy::route(&target, &self.proxy, |name| {
            std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })?;
        let default_config = match &self.default_service_config {
            None => None,
            Some(json) => Some(
                ServiceConfig::parse(json, self.resolver.parse.clone()).map_err(|e| {
                    BuildError::InvalidOption {
                        option: "default_service_config",
                        reason: e.to_string(),
                    }
                })?,
            ),
        };
        let mut authority_text = self.authority.clone().unwrap_or_else(|| target.authority());
        // A registered resolver's endpoint (`NAME` of `etcd://HOST:PORT/NAME`) is the default authority
        // (grpc-go's) but need not be one (`team/payments`). A plaintext channel then sends `localhost`; a
        // TLS channel never verifies its backends against a name the application did not give: it takes
        // `TlsConfig::server_name` (as grpc-go's credentials' server name), else the channel is refused.
        if matches!(target, Target::Custom { .. })
            && self.authority.is_none()
            && Authority::try_from(authority_text.as_str()).is_err()
        {
            let tls_name = self.tls.as_ref().map(TlsConfig::server_name_override);
            authority_text = match tls_name {
                None => "localhost".to_owned(),
                Some(Some(name)) => name.to_owned(),
                Some(None) => {
                    return Err(BuildError::InvalidOption {
                        option: "authority",
                        reason: format!(
                            "the endpoint {authority_text:?} of {:?} is not a valid :authority, so a TLS channel has no name to verify its servers against: set ChannelBuilder::authority or TlsConfig::server_name",
                            self.target
                        ),
                    })
                }
            };
        }
        let authority = Authority::try_from(authority_text.as_str()).map_err(|e| {
            BuildError::InvalidOption {
                option: "authority",
                reason: format!("{authority_text:?} is not a valid authority: {e}"),
            }
        })?;
        let agent = match &self.user_agent {
            Some(product) => format!("{product} grpc-rust/{}", env!("CARGO_PKG_VERSION")),
            None => format!("grpc-rust/{}", env!("CARGO_PKG_VERSION")),
        };
        let user_agent = HeaderValue::try_from(agent).map_err(|_| BuildError::InvalidOption {
            option: "user_agent",
            reason: "must be printable ASCII".to_owned(),
        })?;
        let tls = match (url_security(&self.target), &self.tls) {
            (Some(UrlSecurity::Plaintext), Some(_)) => {
                return Err(BuildError::InvalidOption {
                    option: "tls",
                    reason: format!(
                        "the target {:?} is plaintext (http://): use https:// for TLS",
                        self.target
                    ),
                })
            }
            (Some(UrlSecurity::Tls), None) => Some(TlsConfig::new()),
            (_, config) => config.clone(),
        };
        let tls = match tls {
            None => None,
            Some(config) => Some(config.connector(&server_name_host(&authority_text))?),
        };
        let scheme = if tls.is_some() {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        };
        let h = &self.http2;
        const MAX_WINDOW: u32 = (1 << 31) - 1;
        let checks = [
            (
                "http2.stream_window",
                h.stream_window >= 65_535 && h.stream_window <= MAX_WINDOW,
                "65535..=2^31-1",
            ),
            (
                "http2.connection_window",
                h.connection_window >= 65_535 && h.connection_window <= MAX_WINDOW,
                "65535..=2^31-1",
            ),
            (
                "http2.max_frame_size",
                (16_384..=16_777_215).contains(&h.max_frame_size),
                "16384..=16777215",
            ),
            (
                "http2.connect_timeout",
                !h.connect_timeout.is_zero(),
                "more than zero",
            ),
            (
                "max_receive_message_size",
                self.max_receive.is_none_or(|m| m <= u32::MAX as usize),
                "at most 2^32-1",
            ),
        ];
        for (option, ok, range) in checks {
            if !ok {
                return Err(BuildError::InvalidOption {
                    option,
                    reason: format!("must be {range}"),
                });
            }
        }
        let keepalive = Keepalive::new(
            self.keepalive_time,
            self.keepalive_timeout,
            self.keepalive_permit_without_calls,
        );
        let telemetry = Telemetry::new(target.to_string());
        #[cfg(feature = "xds")]
        let inspect: Option<crate::control::resolver_state::Inspect> =
            matches!(target, Target::Xds { .. }).then(Default::default);
        let transports = crate::control::transports::Transports::default();
        let (builder, kind): (SharedBuilder, Kind) = match (registered, &target) {
            (Some(builder), _) => (builder, Kind::Plain),
            (None, Target::Dns { server, host, port }) => (
                SharedBuilder(Arc::new(DnsResolverBuilder {
                    server: *server,
                    host: host.clone(),
                    port: *port,
                    options: self.resolver.clone(),
                    by_name: route.by_name(),
                })),
                // Through a proxy with no TXT lookup there is nothing to look up again.
                if route.by_name() && !self.resolver.txt_lookups {
                    Kind::Plain
                } else {
                    Kind::Dns
                },
            ),
            (None, Target::Addresses(addrs)) => (
                SharedBuilder(Arc::new(FixedResolverBuilder {
                    scheme: if addrs.first().is_some_and(std::net::SocketAddr::is_ipv6) {
                        "ipv6"
                    } else {
                        "ipv4"
                    },
                    endpoints: addrs
                        .iter()
                        .map(|a| Endpoint::new(Address::Tcp(*a)))
                        .collect(),
                })),
                Kind::Plain,
            ),
            (None, Target::Unix(path)) => (
                SharedBuilder(Arc::new(FixedResolverBuilder {
                    scheme: "unix",
                    endpoints: vec![Endpoint::new(Address::Unix(path.as_path().into()))],
                })),
                Kind::Plain,
            ),
            (None, Target::UnixAbstract(name)) => (
                SharedBuilder(Arc::new(FixedResolverBuilder {
                    scheme: "unix-abstract",
                    endpoints: vec![Endpoint::new(Address::UnixAbstract(name.as_str().into()))],
                })),
                Kind::Plain,
            ),
            #[cfg(feature = "xds")]
            (None, Target::Xds { name }) => crate::xds::setup::XdsSetup {
                bootstrap_json: self.xds_bootstrap.as_deref(),
                name,
                authority: self.authority.clone(),
                default_config: default_config.clone(),
                dns_options: self.resolver.clone(),
                inspect: inspect.clone().unwrap_or_default(),
                credentials: self.xds_credentials.then(|| transports.clone()),
            }
            .resolver()?,
            (None, other) => {
                return Err(BuildError::InvalidTarget {
                    target: self.target.clone(),
                    reason: format!("no resolver for target {other}"),
                })
            }
        };
        let resolver_target = written
            .filter(|t| t.scheme() == builder.scheme())
            .unwrap_or_else(|| ResolverTarget::of(&self.target, &target, builder.scheme()));
        // The default policy (no `loadBalancingConfig`) is looked up here too.
        let policies = self.resolver.parse.policies.clone();
        let resolution = Resolution::new(
            resolver_target,
            builder,
            kind,
            default_config,
            self.resolver.parse,
            self.resolver.min_interval,
            #[cfg(feature = "xds")]
            inspect,
        );
        let resolution = Arc::new(resolution.with_transports(transports));
        Ok(Channel {
            inner: Arc::new(Inner {
                target,
                authority,
                scheme,
                tls,
                interceptors: self.interceptors,
                telemetry,
                exactly_once: self.exactly_once,
                exactly_once_client: crate::call::exactly_once::Client::new(),
                user_agent,
                max_receive: self.max_receive,
                max_send: self.max_send,
                send_compression: self.send_compression,
                accept: self.accept,
                resolution,
                policies,
                control: std::sync::OnceLock::new(),
                closed: std::sync::atomic::AtomicBool::new(false),
                http2: self.http2,
                idle_timeout: self.idle_timeout,
                health_checks: self.health_checks,
                route,
                default_timeout: self.default_timeout,
                keepalive,
                throttle: parking_lot::Mutex::new(None),
                retry_pool: Arc::new(BufferPool::new(self.retry_buffer_size)),
                retries: self.retries,
                app_policy: self.app_policy,
                precedence: self.precedence,
                per_rpc_buffer_limit: self.per_rpc_buffer_limit,
                seed: crate::control::clock_seed(),
                calls: AtomicU64::new(0),
                uris: MethodUris::default(),
            }),
        })
    }
}
