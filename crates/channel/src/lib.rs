//! A gRPC client channel over HTTP/2, on h2 and tokio: calls of every shape, name resolution and service
//! config (DNS TXT, gRFC A2), load balancing, health checking, outlier detection, gRFC A6 retries and hedging,
//! TLS, proxies, keepalive, xDS (feature `xds`), and what it all did in spans, metrics and statistics.
//!
//! # Calls
//!
//! This crate implements the client side of gRPC over HTTP/2 (`doc/PROTOCOL-HTTP2.md`), in plaintext with
//! prior knowledge or over TLS (rustls, ALPN `h2`; see [`TlsConfig`]): request headers (`grpc-timeout`,
//! `grpc-encoding`, metadata with base64 `-bin` values), Length-Prefixed-Message framing, per-message
//! compression (gzip, deflate and tonic's zstd; see [`ChannelBuilder::send_compressed`] and
//! [`ChannelBuilder::accept_compressed`]), responses with headers, messages and trailers (and Trailers-Only),
//! the HTTP-status and RST_STREAM status tables, deadlines, cancellation, and message size limits (grpc-go's
//! model: a call's own limit replaces the channel's, the service config caps both; every limit error names
//! the limit it hit).
//!
//! Applications call through clients that `grpc-build` generates from `.proto` files, shaped like tonic's
//! (here the interop suite's `grpc.testing` package):
//!
//! ```no_run
//! # mod pb { pub use interop_proto::grpc_testing::*; }
//! // mod pb { grpc_channel::include_proto!("grpc.testing"); } // written by grpc_build in build.rs
//! use std::time::Duration;
//!
//! use grpc_channel::{Channel, Code};
//! use pb::test_service_client::TestServiceClient;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! // Connects now and fails if the server cannot be reached; `Channel::new` connects on first use.
//! let channel = Channel::builder("http://localhost:50051")
//!     .timeout(Duration::from_secs(5)) // for every call that sets none
//!     .connect()
//!     .await?;
//! let mut client = TestServiceClient::new(channel);
//! let mut request = grpc_channel::Request::new(pb::SimpleRequest::default());
//! request.metadata_mut().insert("authorization", "Bearer token")?;
//! match client.unary_call(request).await {
//!     Ok(response) => println!("{:?}", response.into_inner()),
//!     Err(status) if status.code() == Code::Unavailable => println!("try later: {status}"),
//!     Err(status) => return Err(status.into()),
//! }
//! # Ok(()) }
//! ```
//!
//! The channel also calls methods by path, with bytes or prost messages ([`Channel::unary_raw`],
//! [`Channel::unary`], [`Channel::streaming`], ...).
//!
//! Generated clients are included with [`include_proto!`], or with [`include_clients!`] beside messages
//! generated elsewhere (e.g. by tonic, for a server in the same crate); their methods take [`IntoRequest`]
//! or [`IntoStreamingRequest`] and run on [`Channel::unary`], [`Channel::server_streaming`],
//! [`Channel::client_streaming`] and [`Channel::bidi_streaming`]. Interceptors ([`Interceptor`]) see and
//! change each call's method, metadata and options, per channel or per client. A generated client is
//! generic over the tower service that carries its calls (`XClient<T = Channel>`): the channel is a
//! `tower::Service<`[`GrpcCall`](service::GrpcCall)`>`, so tower's layers (timeout, concurrency and rate
//! limits, load shedding, `Buffer`, `BoxCloneService`) wrap a generated client as they wrap a tonic one; see
//! [`service`].
//!
//! # Targets and name resolution
//!
//! A target names the backends; its scheme picks the resolver (`doc/naming.md`):
//!
//! | target | resolves to |
//! |---|---|
//! | `host[:port]`, `[ipv6][:port]`, `dns:host[:port]`, `dns:///host[:port]`, `dns://dns-server[:port]/host[:port]` | every address of a DNS name (hickory, `/etc/resolv.conf`, or `dns-server`: an IP literal, port 53 when left out), and the service config in its `_grpc_config.host` TXT record (gRFC A2), not queried for an IP literal or `localhost`; an IP literal host is used as is; port 443 when left out |
//! | `http://host[:port]`, `https://host[:port]` | a DNS name as tonic users write it: plaintext (port 80) or TLS (port 443) |
//! | `ipv4:10.0.0.1:50051,10.0.0.2:50051` | those IPv4 addresses (port 443 when left out) |
//! | `ipv6:::1`, `ipv6:[::1]`, `ipv6:[::1]:50051,[::2]:50051` | those IPv6 addresses: brackets only needed with a port (port 443 when left out) |
//! | `unix:relative/path`, `unix:///absolute/path` | a Unix socket |
//! | `unix-abstract:name` | a Unix socket in Linux's abstract namespace |
//! | `xds:///name` (feature `xds`) | an xDS control plane's listener, routes, clusters and endpoints |
//! | `scheme://authority/endpoint` | a resolver registered for `scheme` (e.g. `etcd://...` with `grpc-etcd-resolver`) |
//!
//! DNS names may also be re-resolved periodically ([`ResolverOptions::with_refresh_interval`], off by
//! default). Other schemes plug in through the public resolver API, [`resolver`]: a
//! [`resolver::ResolverBuilder`] registered per channel ([`ChannelBuilder::resolver`]) or process-wide
//! ([`resolver::register`]); the built-in resolvers run on it too, and [`resolver::manual`] lets the
//! application push the endpoints itself. A service config may also come from the application
//! ([`ChannelBuilder::default_service_config`]); the method config's `timeout`, `waitForReady` and message
//! size limits apply to each call, and an invalid config keeps the last good one (gRFC A21).
//!
//! # Load balancing, health checking, outlier detection
//!
//! Calls are load-balanced by a per-channel control plane (`grpc-lb`), with connectivity state,
//! wait-for-ready, an idle timeout and `close()`. **Without a service config the policy is `pick_first`**:
//! every call goes to the first address that connects, as in every gRPC implementation (tonic's
//! `balance_list` spreads calls instead); `{"loadBalancingConfig": [{"round_robin": {}}]}` spreads them over
//! every endpoint (gRFC A61). A service config's `healthCheckConfig` (gRFC A17) runs the standard health
//! service's Watch on every connection under round_robin (pick_first does not health check; the channel warns
//! when a config asks it to), and `outlier_detection_experimental` (gRFC A50) ejects addresses by their
//! calls' failures in each interval: `failurePercentageEjection` those that failed more than an absolute
//! `threshold` percent of their calls, `successRateEjection` (relative) those whose success rate is more than
//! `stdevFactor`/1000 standard deviations below the mean of the addresses with enough calls. Policies of one's own plug in through [`lb`].
//!
//! # Retries and hedging
//!
//! Every call, whatever its shape and whether or not its method config has a `retryPolicy` or
//! `hedgingPolicy`, runs through `grpc-retry`'s A6 state machine: retries, hedging (hedges avoid the
//! addresses the call used), throttling, pushback, commit with bounded replay buffers, and transparent
//! retries of attempts that never left the client or that the server's HTTP/2 stack refused (classified by
//! `grpc-transparent`). `ChannelBuilder::retries(false)` turns policy retries and hedging off; transparent
//! retries stay on. Applications may set their own retry policy ([`NoRetry`], [`Linear`], [`Exponential`]
//! or a custom [`AppRetryPolicy`]) per channel or per call, run by the same state machine; by default the
//! service config's policy wins where it has one ([`Precedence`]). `perAttemptRecvTimeout` (gRFC A44) cuts
//! an attempt that has no response headers in time; see the user guide (`docs/guide/retries.md` in the
//! repository).
//!
//! # Connections
//!
//! Connections drain on GOAWAY (a new one takes new calls at once), keepalive (gRFC A8:
//! [`ChannelBuilder::keepalive_time`], tonic's `http2_keep_alive_interval`) finds a peer that stopped
//! answering, HTTP CONNECT proxies come from the environment (`grpc_proxy`, `https_proxy`, `http_proxy`, with
//! `no_grpc_proxy`/`no_proxy`) or [`ChannelBuilder::proxy`], and
//! every deadline and duration holds whatever the server sends.
//!
//! # Observability
//!
//! Each call has a `grpc.call` tracing span with a `grpc.attempt` span per attempt; the channel logs what
//! it changed (ejections, health, GOAWAYs) and what it did not do and why (health checking asked under
//! pick_first, an address with failures outlier detection kept, a clamped config value, what a
//! wait-for-ready call waited for); with the feature `metrics` it records gRFC A66/A96 instruments through
//! the `metrics` facade; [`Channel::stats`] needs neither and tells where the calls went, per address
//! ([`AddressStats`]: attempts, successes, failures, connection and health state). The names, fields and
//! labels are in [`observability`].
//!
//! # Cargo features
//!
//! | feature | what it adds |
//! |---|---|
//! | `tower` | `tower::ChannelService`: a `tower::Service<http::Request<_>>` over a channel, for clients generated by tonic-build |
//! | `tonic` | `From` conversions between this crate's [`Status`] and [`Code`] and tonic's, so a tonic handler forwards a backend's failure with `?`: code, message, trailers and the failed call's response headers ([`Status::response_headers`]), `grpc-status-details-bin`, within the byte budget of `Status::TONIC_*` |
//! | `metrics` | gRFC A66/A96 instruments through the `metrics` facade ([`observability`]) |
//! | `xds` | `xds:` targets: the channel follows an xDS control plane (gRFC A27, A28, A31, A37, A42, A44, A50's xDS mapping, A65, A71), with xDS credentials for a service mesh ([`ChannelBuilder::xds_credentials`], A29); see the user guide, `docs/guide/xds.md` |
//! | `unstable` | codec internals the project's own servers, benchmarks and fuzz targets share: hidden, no stability promise |
//!
//! None is on by default.
//!
//! Not here: ALTS, certificate revocation checks, HTTP/1 upgrades, server-side code.

// The crate's layers, lowest first; a module uses only modules of its own layer or lower ones (`cargo
// xtask tidy` checks it; its table: `LAYERED` in `xtask/src/tidy/mod.rs`): `wire` (gRPC's HTTP/2 format),
// `request` (what a call carries), `conn` (one connection), `control` (the control plane), `call` (one
// call), then the API at this root with `xds` (which runs its ADS stream on this crate's own `Channel`).
mod call;
mod conn;
mod control;
mod request;
mod wire;
#[cfg(feature = "xds")]
mod xds;

mod builder;
mod call_shapes;
mod channel;
mod entry;
#[cfg(feature = "unstable")]
#[doc(hidden)]
pub mod fuzzing;
pub mod observability;
mod pump;
pub mod retry;
pub mod service;
#[cfg(feature = "tower")]
pub mod tower;

// Public modules that live in a layer: reachable here, at the paths users know.
pub use wire::{compression, error_details, metadata};
// The public name resolver API (`control/resolver_api.rs`).
pub use control::resolver_api as resolver;
// Codec pieces the project's test servers, benchmarks and fuzz targets share: public only with the
// `unstable` feature (no stability promise: see Cargo.toml), hidden from the documented API.
#[cfg(feature = "unstable")]
#[doc(hidden)]
pub use wire::{framing, percent, timeout};

pub use builder::ChannelBuilder;
pub use call::telemetry::{ChannelStats, ClusterCallStats};
pub use call::{RequestSender, Streaming};
pub use channel::Channel;
pub use compression::{Encoding, EncodingSet};
pub use conn::connect::Http2Settings;
pub use conn::error::{BuildError, ConnectError};
pub use conn::keepalive::{DEFAULT_KEEPALIVE_TIMEOUT, MIN_KEEPALIVE_TIME};
pub use conn::proxy::ProxyError;
pub use conn::tls::TlsConfig;
pub use control::address_stats::AddressStats;
pub use control::DEFAULT_IDLE_TIMEOUT;
pub use error_details::ErrorDetails;
pub use grpc_lb::ConnectivityState;
pub use grpc_retry::{AppRetryPolicy, Exponential, Linear, NoRetry, Precedence};
pub use grpc_service_config::{ResolverOptions, ServiceConfig, Target};
pub use metadata::{MetadataError, MetadataMap};
pub use request::interceptor::{CallInfo, Interceptor};
pub use request::{
    CallOptions, ClientDefaults, IntoRequest, IntoStreamingRequest, MessageOptions, Request,
    Response,
};
pub use wire::limits::{DEFAULT_MAX_RECEIVE_MESSAGE_SIZE, DEFAULT_MAX_SEND_MESSAGE_SIZE};
pub use wire::status::{Code, Status};
#[cfg(feature = "xds")]
pub use xds::admin::{
    XdsResource, XdsResourceStatus, XdsResourceType, XdsResources, XdsUpdateError,
};

/// The service config (gRFC A2) and target types, by name: what an application reads from a parsed
/// config ([`ServiceConfig::parse`](service_config::ServiceConfig::parse)), sets in
/// [`ResolverOptions`], or gets from [`Channel::target`]. Every type these
/// name is here too. The parser and the DNS resolver themselves are `grpc-service-config`'s.
pub mod service_config {
    pub use grpc_retry::{
        CodeSet, HedgingPolicy, MaxAttempts, Policy, RetryPolicy, ThrottleConfig,
    };
    pub use grpc_service_config::{
        Clamp, ClampKind, LbConfig, MethodConfig, ParseError, ParseOptions, ResolverOptions, Rule,
        ServiceConfig, Target, TargetError, UrlSecurity, MAX_CLAMPS,
    };
}

/// The load-balancing policy API (`grpc-lb`'s), for writing a policy of one's own: implement
/// [`LoadBalancer`](lb::LoadBalancer) and [`LoadBalancerBuilder`](lb::LoadBalancerBuilder), register the
/// builder for one channel ([`ChannelBuilder::lb_policy`]) or for the process ([`register_policy`](lb::register_policy)),
/// and select it by name in a service config's `loadBalancingConfig`. The built-in policies (pick_first,
/// round_robin, the xDS cluster manager) are written with the same pieces: a [`Subchannels`](lb::Subchannels)
/// registry (connection backoff, outlier detection's ejections, health) and pickers, built-in or the
/// policy's own ([`SubchannelPicker`](lb::SubchannelPicker), whose picks may hand the call a
/// [`PickGuard`](lb::PickGuard) dropped when the attempt ends).
pub mod lb {
    pub use grpc_lb::{
        builtin_policy, register_policy, Address, AttributeValue, Attributes, BackoffConfig,
        BreakerClaim, BuildOptions, ConnectivityState, CustomPick, CustomPicker, Endpoint, Health,
        InFlightCounter, LbAction, LbConfigError, LoadBalancer, LoadBalancerBuilder,
        ParsedLbConfig, PickFirstBuilder, PickFirstConfig, PickGuard, PickRequest, PickerSpec,
        PolicyRegistry, PolicyUpdate, Rng, RoundRobinBuilder, Subchannel, SubchannelId,
        SubchannelPicker, Subchannels, TimerEvent, PICK_FIRST, ROUND_ROBIN,
    };
}

/// Includes the Rust code `grpc-build` generated for a protobuf package (messages and `<service>_client`
/// modules), from `OUT_DIR`: `include_proto!("a.b.c")` includes `$OUT_DIR/a.b.c.rs`. Put it in a module tree
/// that mirrors the package (`mod a { pub mod b { pub mod c { grpc_channel::include_proto!("a.b.c"); } } }`)
/// when generated code refers across packages (`super::super::...`).
///
/// ```ignore
/// pub mod kv {
///     grpc_channel::include_proto!("kv");
/// }
/// ```
#[macro_export]
macro_rules! include_proto {
    ($package:tt) => {
        include!(concat!(env!("OUT_DIR"), concat!("/", $package, ".rs")));
    };
}

/// Includes the clients `grpc-build` generated without messages (`Builder::build_messages(false)`) for a
/// protobuf package, from `OUT_DIR`: `include_clients!("a.b.c")` includes `$OUT_DIR/a.b.c.grpc-client.rs`,
/// the package's `<service>_client` modules. Put it in the module that holds the package's messages as
/// another generator wrote them (tonic-prost-build, prost-build), so the clients and, say, a tonic server
/// share one set of message types:
///
/// ```ignore
/// pub mod routeguide {
///     tonic::include_proto!("routeguide"); // messages and route_guide_server (tonic's client off)
///     grpc_channel::include_clients!("routeguide"); // route_guide_client::RouteGuideClient
/// }
/// ```
#[macro_export]
macro_rules! include_clients {
    ($package:tt) => {
        include!(concat!(
            env!("OUT_DIR"),
            concat!("/", $package, ".grpc-client.rs")
        ));
    };
}
