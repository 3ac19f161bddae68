//! [`Channel`]: the handle applications make calls on, and [`ChannelBuilder`], which checks every option
//! before any connection is made.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use http::header::HeaderValue;
use http::uri::Authority;
use tokio::time::Instant;

use crate::attempt::{AttemptSetup, Pick, PickError, PickFuture};
use crate::call::{self, RequestSender, Shared, SharedRef, Streaming};
use crate::codec::Codec;
use crate::control::{ControlPlane, DEFAULT_IDLE_TIMEOUT};
use crate::error::BuildError;
use crate::keepalive::{Keepalive, DEFAULT_KEEPALIVE_TIMEOUT};
use crate::metadata::MetadataMap;
use crate::method_uris::MethodUris;
use crate::request::{CallOptions, Request, Response};
use crate::resolution::Resolution;
use crate::retry_driver::Driver;
use crate::status::{Code, Status};
use crate::transport::{Http2Settings, Transport};
use grpc_lb::ConnectivityState;
use grpc_retry::{
    BufferPool, CallConfig, RetryCall, Shared as RetryShared, SplitMix64, Throttle, ThrottleConfig,
    DEFAULT_PER_CALL_LIMIT, DEFAULT_PER_CHANNEL_LIMIT,
};
use grpc_service_config::{MethodConfig, ResolverOptions, ServiceConfig, Target};

/// The default limit on a received message: 4 MiB.
pub const DEFAULT_MAX_RECEIVE_MESSAGE_SIZE: usize = 4 << 20;
/// The default limit on a sent message: 2 GiB − 1, the most a message prefix can describe portably.
pub const DEFAULT_MAX_SEND_MESSAGE_SIZE: usize = i32::MAX as usize;

/// A channel to one target. Cheap to clone: clones share the connection. Connects lazily, on the first call.
#[derive(Clone)]
pub struct Channel {
    inner: Arc<Inner>,
}

struct Inner {
    target: Target,
    authority: Authority,
    user_agent: HeaderValue,
    max_receive: Option<usize>,
    max_send: Option<usize>,
    transport: Transport,
    resolution: Arc<Resolution>,
    control: std::sync::OnceLock<ControlPlane>,
    http2: Http2Settings,
    idle_timeout: Duration,
    keepalive: Arc<Keepalive>,
    /// The retry throttle of the target (A6), for the `retryThrottling` setting it was made for.
    throttle: parking_lot::Mutex<Option<(ThrottleConfig, Arc<Throttle>)>>,
    /// The bytes all calls of the channel may keep for replay (A6).
    retry_pool: Arc<BufferPool>,
    /// Whether policy retries and hedging are on.
    retries: bool,
    /// The most bytes one call may keep for replay.
    per_rpc_buffer_limit: usize,
    /// Seeds each call's backoff jitter: `seed` mixed with a call counter.
    seed: u64,
    calls: AtomicU64,
    /// The request URI of each method called.
    uris: MethodUris,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("target", &self.inner.target)
            .field("authority", &self.inner.authority)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Channel`].
#[derive(Clone, Debug)]
pub struct ChannelBuilder {
    target: String,
    authority: Option<String>,
    user_agent: Option<String>,
    max_receive: Option<usize>,
    max_send: Option<usize>,
    http2: Http2Settings,
    default_service_config: Option<String>,
    resolver: ResolverOptions,
    idle_timeout: Duration,
    retries: bool,
    per_rpc_buffer_limit: usize,
    retry_buffer_size: usize,
    keepalive_time: Option<Duration>,
    keepalive_timeout: Duration,
    keepalive_permit_without_calls: bool,
}

impl ChannelBuilder {
    /// Turns client keepalive on (gRFC A8; off by default): after `time` without any frame from the
    /// server, the client sends a PING, and closes the connection if it is not answered within the
    /// keepalive timeout (its calls fail UNAVAILABLE, the channel reconnects). Values under 10 s are raised
    /// to 10 s. A server that answers GOAWAY "too_many_pings" doubles the time for the channel's later
    /// connections.
    pub fn keepalive_time(mut self, time: Duration) -> Self {
        self.keepalive_time = Some(time);
        self
    }

    /// How long a keepalive PING may go unanswered before the connection is closed (20 s by default).
    pub fn keepalive_timeout(mut self, timeout: Duration) -> Self {
        self.keepalive_timeout = timeout;
        self
    }

    /// Whether keepalive PINGs are sent while the channel has no call in flight (off by default; servers
    /// usually refuse pings without calls).
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

    /// Overrides the `:authority` sent with every call (by default the target's `host:port`).
    pub fn authority(mut self, authority: impl Into<String>) -> Self {
        self.authority = Some(authority.into());
        self
    }

    /// Puts `product` in front of this crate's `user-agent` (`product grpc-rust/VERSION`).
    pub fn user_agent(mut self, product: impl Into<String>) -> Self {
        self.user_agent = Some(product.into());
        self
    }

    /// The largest response message accepted; larger ones end the call with RESOURCE_EXHAUSTED. With a
    /// service config's `maxResponseMessageBytes` too, the smaller wins; with neither, 4 MiB.
    pub fn max_receive_message_size(mut self, bytes: usize) -> Self {
        self.max_receive = Some(bytes);
        self
    }

    /// The largest request message sent; larger ones end the call with RESOURCE_EXHAUSTED, unsent. With a
    /// service config's `maxRequestMessageBytes` too, the smaller wins.
    pub fn max_send_message_size(mut self, bytes: usize) -> Self {
        self.max_send = Some(bytes);
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

    /// The DNS resolver's options (minimum re-resolution interval, query timeout, `maxAttempts` cap, host
    /// name for `clientHostname`).
    pub fn resolver_options(mut self, options: ResolverOptions) -> Self {
        self.resolver = options;
        self
    }

    /// The least time each connection attempt (TCP connect and HTTP/2 handshake) gets before it counts as
    /// failed: the connection-backoff spec's MIN_CONNECT_TIMEOUT, 20 s by default (an attempt after a longer
    /// backoff gets that backoff). Applies to every target; a value too large to add to the clock means the
    /// attempt never times out.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.http2.connect_timeout = timeout;
        self
    }

    /// The HTTP/2 settings (windows, frame sizes); the defaults are documented on [`Http2Settings`].
    pub fn http2_settings(mut self, settings: Http2Settings) -> Self {
        self.http2 = settings;
        self
    }

    /// Checks the options and builds the channel. Does not connect.
    pub fn build(self) -> Result<Channel, BuildError> {
        let target = Target::parse(&self.target).map_err(|e| BuildError::InvalidTarget {
            target: e.target,
            reason: e.reason,
        })?;
        let default_config =
            match &self.default_service_config {
                None => None,
                Some(json) => Some(ServiceConfig::parse(json, self.resolver.parse).map_err(
                    |e| BuildError::InvalidOption {
                        option: "default_service_config",
                        reason: e.to_string(),
                    },
                )?),
            };
        let authority_text = self.authority.unwrap_or_else(|| target.authority());
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
        let transport = Transport::new(self.http2.clone(), keepalive.clone());
        let resolution = Arc::new(Resolution::new(
            target.clone(),
            self.resolver,
            default_config,
        ));
        Ok(Channel {
            inner: Arc::new(Inner {
                target,
                authority,
                user_agent,
                max_receive: self.max_receive,
                max_send: self.max_send,
                transport,
                resolution,
                control: std::sync::OnceLock::new(),
                http2: self.http2,
                idle_timeout: self.idle_timeout,
                keepalive,
                throttle: parking_lot::Mutex::new(None),
                retry_pool: Arc::new(BufferPool::new(self.retry_buffer_size)),
                retries: self.retries,
                per_rpc_buffer_limit: self.per_rpc_buffer_limit,
                seed: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1),
                calls: AtomicU64::new(0),
                uris: MethodUris::default(),
            }),
        })
    }
}

impl Channel {
    /// A builder for a channel to `target` (`host:port`, `dns:///host:port`, `ipv4:...`, `ipv6:...`).
    pub fn builder(target: impl Into<String>) -> ChannelBuilder {
        ChannelBuilder {
            target: target.into(),
            authority: None,
            user_agent: None,
            max_receive: None,
            max_send: None,
            http2: Http2Settings::default(),
            default_service_config: None,
            resolver: ResolverOptions::default(),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            retries: true,
            per_rpc_buffer_limit: DEFAULT_PER_CALL_LIMIT,
            retry_buffer_size: DEFAULT_PER_CHANNEL_LIMIT,
            keepalive_time: None,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            keepalive_permit_without_calls: false,
        }
    }

    /// A channel to `target` with default options.
    pub fn new(target: impl Into<String>) -> Result<Channel, BuildError> {
        Channel::builder(target).build()
    }

    /// The target the channel was built for.
    pub fn target(&self) -> &Target {
        &self.inner.target
    }

    /// The control plane, started on first use (inside a tokio runtime). `None` for `unix:` targets, which
    /// have one connection and no load balancing.
    fn control(&self) -> Option<&ControlPlane> {
        if self.inner.resolution.is_unix() {
            return None;
        }
        Some(self.inner.control.get_or_init(|| {
            ControlPlane::start(
                self.inner.resolution.clone(),
                self.inner.http2.clone(),
                self.inner.idle_timeout,
                self.inner.keepalive.clone(),
            )
        }))
    }

    /// The channel's connectivity state (`doc/connectivity-semantics-and-api.md`). A new channel is IDLE
    /// until its first call or [`Channel::connect`].
    pub fn state(&self) -> ConnectivityState {
        match self.inner.control.get() {
            Some(control) => control.state(),
            None => ConnectivityState::Idle,
        }
    }

    /// Leaves IDLE: resolves and connects without waiting for a call. Must be called inside a tokio runtime.
    pub fn connect(&self) {
        if let Some(control) = self.control() {
            control.connect();
        }
    }

    /// Waits until the state differs from `from`, or until `deadline`; returns the state then.
    pub async fn wait_for_state_change(
        &self,
        from: ConnectivityState,
        deadline: tokio::time::Instant,
    ) -> ConnectivityState {
        let Some(control) = self.control() else {
            return self.state();
        };
        tokio::time::timeout_at(deadline, control.wait_for_state_change(from))
            .await
            .unwrap_or(from)
    }

    /// Shuts the channel down: connections close, new calls fail with UNAVAILABLE, and the state becomes
    /// SHUTDOWN. Dropping every clone of the channel does the same.
    pub fn close(&self) {
        if let Some(control) = self.inner.control.get() {
            control.close();
        }
    }

    /// A unary call with prost messages.
    pub async fn unary<Req, Resp>(
        &self,
        path: &str,
        request: Request<Req>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        self.unary_with(Codec::prost(), path, request).await
    }

    /// A unary call whose messages are already serialized.
    pub async fn unary_raw(
        &self,
        path: &str,
        request: Request<Bytes>,
    ) -> Result<Response<Bytes>, Status> {
        self.unary_with(Codec::raw(), path, request).await
    }

    /// A server-streaming call: one request, then a stream of responses. Returns once the response headers
    /// arrive (or the call fails first).
    pub async fn server_streaming<Req, Resp>(
        &self,
        path: &str,
        request: Request<Req>,
    ) -> Result<Response<Streaming<Resp>>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let codec = Codec::<Req, Resp>::prost();
        let (message, metadata, options) = request.into_parts();
        let prepared = self.prepare(path, metadata, options).await?;
        let frame = call::encode_frame(
            &codec,
            &message,
            prepared.options.compression,
            prepared.max_send,
        )?;
        let mut stream = self.call_with_request(prepared, frame, codec.decode).await;
        let metadata = stream.headers().await?.clone();
        Ok(Response::new(stream, metadata, MetadataMap::new(), false))
    }

    /// A client-streaming call: a stream of requests, then one response.
    pub async fn client_streaming<Req, Resp, S>(
        &self,
        path: &str,
        request: Request<S>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
        S: Stream<Item = Req>,
    {
        let (messages, metadata, options) = request.into_parts();
        let (mut sender, mut receiver) = self
            .streaming::<Req, Resp>(path, Request::new(()).with_options(metadata, options))
            .await?;
        let mut messages = std::pin::pin!(messages);
        let send_all = async move {
            while let Some(msg) = poll_fn(|cx| Pin::as_mut(&mut messages).poll_next(cx)).await {
                if sender.send(msg).await.is_err() {
                    // The call ended; its status comes from the response side.
                    break;
                }
            }
            // Dropping the sender half-closes.
        };
        // The response is watched while the request streams: an early status from the server, or the
        // deadline, ends the call even while the application's stream has no next message.
        let mut send_all = std::pin::pin!(send_all);
        let mut response = std::pin::pin!(single_response(&mut receiver));
        tokio::select! {
            biased;
            result = &mut response => result,
            () = &mut send_all => response.await,
        }
    }

    /// A streaming call (client-streaming, server-streaming or bidi): returns the sending half, which
    /// half-closes when finished or dropped, and the receiving half. Messages are prost messages.
    pub async fn streaming<Req, Resp>(
        &self,
        path: &str,
        request: Request<()>,
    ) -> Result<(RequestSender<Req>, Streaming<Resp>), Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        self.streaming_with(Codec::prost(), path, request).await
    }

    /// A streaming call whose messages are already serialized.
    pub async fn streaming_raw(
        &self,
        path: &str,
        request: Request<()>,
    ) -> Result<(RequestSender<Bytes>, Streaming<Bytes>), Status> {
        self.streaming_with(Codec::raw(), path, request).await
    }

    async fn unary_with<Req, Resp>(
        &self,
        codec: Codec<Req, Resp>,
        path: &str,
        request: Request<Req>,
    ) -> Result<Response<Resp>, Status> {
        let (message, metadata, options) = request.into_parts();
        let prepared = self.prepare(path, metadata, options).await?;
        // An oversize request is never sent.
        let frame = call::encode_frame(
            &codec,
            &message,
            prepared.options.compression,
            prepared.max_send,
        )?;
        let mut receiver = self.call_with_request(prepared, frame, codec.decode).await;
        single_response(&mut receiver).await
    }

    /// A call whose one request message is known before the first attempt (unary, server-streaming): the
    /// retry driver runs in the caller's task until the call commits or finishes.
    async fn call_with_request<Resp>(
        &self,
        mut prepared: Prepared,
        frame: Bytes,
        decode: fn(Bytes) -> Result<Resp, Status>,
    ) -> Streaming<Resp> {
        let now = Instant::now().into_std();
        let (mut call, setup, shared) = self.new_call(&mut prepared, true, now);
        call.send_message(frame, now);
        call.half_close();
        let result = Driver::new(self.clone(), setup, call, None).run().await;
        shared.lock().hand_over(result);
        Streaming::driven(
            shared,
            decode,
            prepared.max_receive,
            self.header_limit(),
            prepared.deadline,
        )
    }

    async fn streaming_with<Req, Resp>(
        &self,
        codec: Codec<Req, Resp>,
        path: &str,
        request: Request<()>,
    ) -> Result<(RequestSender<Req>, Streaming<Resp>), Status> {
        let ((), metadata, options) = request.into_parts();
        let mut prepared = self.prepare(path, metadata, options).await?;
        let (call, setup, shared) = self.new_call(&mut prepared, false, Instant::now().into_std());
        // The application sends after the call starts: the driver runs in its own task until commit.
        let driver = Driver::new(self.clone(), setup, call, Some(shared.clone()));
        tokio::spawn(driver.run_into(shared.clone()));
        // Like a single-attempt call, return once the first attempt's request is on its way (or the call
        // failed before any was). A caller that gives up before then cancels the call.
        let cancel_on_drop = CancelOnDrop(Some(shared.clone()));
        poll_fn(|cx| shared.lock().poll_started(cx)).await?;
        cancel_on_drop.disarm();
        let sender = RequestSender::new(
            shared.clone(),
            codec.encoder(),
            prepared.options.compression,
            prepared.max_send,
            prepared.deadline,
        );
        let receiver = Streaming::driven(
            shared,
            codec.decode,
            prepared.max_receive,
            self.header_limit(),
            prepared.deadline,
        );
        Ok((sender, receiver))
    }

    /// The largest response header list (headers or trailers) a call accepts.
    fn header_limit(&self) -> usize {
        self.inner.http2.max_header_list_size as usize
    }

    /// The retry state machine of a new call (gRFC A6: the method's policy, or none, with the channel's
    /// throttle and buffer limits), what its attempts send, and the state its halves share. `now` is the
    /// call's start for the state machine.
    fn new_call(
        &self,
        prepared: &mut Prepared,
        eager: bool,
        now: std::time::Instant,
    ) -> (RetryCall, Arc<AttemptSetup>, SharedRef) {
        let inner = &*self.inner;
        let config = CallConfig {
            policy: prepared
                .method
                .as_ref()
                .map(|m| m.policy.clone())
                .unwrap_or_default(),
            retries_enabled: inner.retries,
            deadline: prepared.deadline.map(Instant::into_std),
            per_call_buffer_limit: inner.per_rpc_buffer_limit,
            ..CallConfig::default()
        };
        let shared = RetryShared {
            throttle: self.throttle_for(&prepared.config),
            pool: inner.retry_pool.clone(),
        };
        let seed = inner.seed ^ inner.calls.fetch_add(1, Ordering::Relaxed);
        let call = RetryCall::new(config, shared, Box::new(SplitMix64::new(seed)), now);
        let setup = Arc::new(AttemptSetup {
            uri: std::mem::take(&mut prepared.uri),
            user_agent: inner.user_agent.clone(),
            encoding: prepared.options.compression,
            metadata: std::mem::take(&mut prepared.metadata),
            wait_for_ready: prepared.wait_for_ready,
            deadline: prepared.deadline,
            eager,
            header_limit: self.header_limit(),
        });
        let guard = match self.control() {
            Some(control) => control.call_started(),
            None => inner.transport.call_started(),
        };
        (call, setup, Shared::driving(Some(guard)))
    }

    /// Everything a call needs before its first attempt: the resolution result and method config, the
    /// deadline, the limits, and the request headers (without `grpc-timeout`, which each attempt sets).
    async fn prepare(
        &self,
        path: &str,
        metadata: MetadataMap,
        options: CallOptions,
    ) -> Result<Prepared, Status> {
        let inner = &*self.inner;
        let call_start = Instant::now();
        // A timeout too large to add means no deadline.
        let api_deadline = options.timeout.and_then(|t| call_start.checked_add(t));
        // The service config comes with resolution; calls wait for the first result (bounded by their own
        // deadline), and wait-for-ready calls set through the API also wait through resolution failures.
        let api_wait = options.wait_for_ready.unwrap_or(false);
        // An IDLE channel leaves IDLE now: a resolution failure must show in its state (TRANSIENT_FAILURE).
        if let Some(control) = self.control() {
            control.call_coming();
        }
        let resolved = match api_deadline {
            None => inner.resolution.wait(api_wait).await,
            Some(d) => tokio::time::timeout_at(d, inner.resolution.wait(api_wait))
                .await
                .map_err(|_| Status::deadline_exceeded())?,
        };
        let (_, config) = resolved?;
        let method = config.method_config(path).cloned();
        let (max_send, max_receive) = effective_limits(method.as_deref(), inner, &options);
        let deadline = min_deadline(
            api_deadline,
            method
                .as_ref()
                .and_then(|m| m.timeout)
                .and_then(|t| call_start.checked_add(t)),
        );
        let wait_for_ready = options
            .wait_for_ready
            .or(method.as_ref().and_then(|m| m.wait_for_ready))
            .unwrap_or(false);
        let uri = inner.uris.get(&inner.authority, path)?;
        Ok(Prepared {
            uri,
            metadata: metadata.into_headers(),
            deadline,
            wait_for_ready,
            max_send,
            max_receive,
            options,
            method,
            config,
        })
    }

    /// A pick for one attempt: at once when the balancer's choice is a connection ready for a new stream
    /// (no future to box and drive), otherwise [`Channel::pick_future`].
    pub(crate) fn pick(
        &self,
        setup: &Arc<AttemptSetup>,
        avoid: Vec<std::net::SocketAddr>,
        cx: &mut std::task::Context<'_>,
    ) -> Pick {
        if let Some(control) = self.control() {
            if let Some((conn, addr)) = control.pick_now(setup.uri.path(), &avoid, cx) {
                return Pick::Now(Some((conn, Some(addr))));
            }
        }
        Pick::Later(self.pick_future(setup.clone(), avoid))
    }

    /// A pick for one attempt: a connection from the balancer (avoiding `avoid` where it can), or the
    /// single connection of a `unix:` target.
    pub(crate) fn pick_future(
        &self,
        setup: Arc<AttemptSetup>,
        avoid: Vec<std::net::SocketAddr>,
    ) -> PickFuture {
        let channel = self.clone();
        Box::pin(async move {
            let inner = &*channel.inner;
            match channel.control() {
                Some(control) => control
                    .pick(setup.uri.path(), setup.wait_for_ready, &avoid)
                    .await
                    .map(|(conn, addr)| (conn, Some(addr))),
                None => inner
                    .transport
                    .ready(&inner.resolution, setup.wait_for_ready)
                    .await
                    .map(|conn| (conn, None))
                    .map_err(|status| PickError {
                        status,
                        dropped: false,
                    }),
            }
        })
    }

    /// The throttle of this channel's target for `config`'s `retryThrottling`, created once per setting.
    fn throttle_for(&self, config: &ServiceConfig) -> Option<Arc<Throttle>> {
        let wanted = config.retry_throttling()?;
        let mut slot = self.inner.throttle.lock();
        match &*slot {
            Some((c, t)) if *c == wanted => Some(t.clone()),
            _ => {
                let t = Arc::new(Throttle::new(wanted));
                *slot = Some((wanted, t.clone()));
                Some(t)
            }
        }
    }
}

/// Cancels a call whose halves were never handed to the application.
struct CancelOnDrop(Option<SharedRef>);

impl CancelOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.lock().cancel();
        }
    }
}

/// A call, ready for its first attempt.
struct Prepared {
    uri: http::Uri,
    /// The application's metadata, as headers.
    metadata: http::HeaderMap,
    deadline: Option<Instant>,
    wait_for_ready: bool,
    max_send: usize,
    max_receive: usize,
    options: CallOptions,
    method: Option<Arc<MethodConfig>>,
    config: Arc<ServiceConfig>,
}

/// The earlier of two optional deadlines.
fn min_deadline(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The message size limits of a call: the service config's and the channel's (the smaller when both are
/// set, the built-in default when neither is), then lowered by the call's own options.
fn effective_limits(
    method: Option<&MethodConfig>,
    inner: &Inner,
    options: &CallOptions,
) -> (usize, usize) {
    fn pick(config: Option<u32>, api: Option<usize>, default: usize) -> usize {
        match (config.map(|c| c as usize), api) {
            (Some(c), Some(a)) => c.min(a),
            (Some(c), None) => c,
            (None, Some(a)) => a,
            (None, None) => default,
        }
    }
    let send = pick(
        method.and_then(|m| m.max_request_message_bytes),
        inner.max_send,
        DEFAULT_MAX_SEND_MESSAGE_SIZE,
    );
    let receive = pick(
        method.and_then(|m| m.max_response_message_bytes),
        inner.max_receive,
        DEFAULT_MAX_RECEIVE_MESSAGE_SIZE,
    );
    (
        options.max_send_message_size.map_or(send, |m| m.min(send)),
        options
            .max_receive_message_size
            .map_or(receive, |m| m.min(receive)),
    )
}

/// Reads exactly one response message and the status after it.
async fn single_response<Resp>(receiver: &mut Streaming<Resp>) -> Result<Response<Resp>, Status> {
    let message = match receiver.message().await? {
        Some(m) => m,
        None => {
            return Err(Status::new(
                Code::Unimplemented,
                "response cardinality violation: the server sent no response message",
            ))
        }
    };
    let compressed = receiver.last_message_compressed();
    if receiver.message().await?.is_some() {
        receiver.cancel();
        return Err(Status::new(
            Code::Unimplemented,
            "response cardinality violation: the server sent more than one response message",
        ));
    }
    let (metadata, trailers) = receiver.take_metadata();
    Ok(Response::new(message, metadata, trailers, compressed))
}
