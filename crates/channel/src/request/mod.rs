//! What the application hands a call and gets back: [`Request`] (a message, metadata and [`CallOptions`]) and
//! [`Response`] (a message and the response headers' metadata), and the conversions generated clients accept
//! ([`IntoRequest`], [`IntoStreamingRequest`], shaped like tonic's), and the [`interceptor`]s that see every
//! call.
//!
//! A layer of its own, above `wire`: the control plane's health Watch runs the channel's interceptors with
//! call options as a call does, so what a call carries sits below the connection, control and call layers
//! that use it. Not here: running a call (`call`), the channel's call methods (`channel.rs`).

pub(crate) mod interceptor;

use std::sync::Arc;
use std::time::Duration;

use futures_core::Stream;
use grpc_retry::AppRetryPolicy;

use crate::wire::compression::{Encoding, EncodingSet};
use crate::wire::metadata::MetadataMap;

/// Per-call options. Unset options take the channel's defaults.
#[derive(Clone, Debug, Default)]
pub struct CallOptions {
    pub(crate) timeout: Option<Duration>,
    /// The call's deadline, fixed when the application made the call (a generated client's
    /// `GrpcCall` turns the timeout into it before the call goes through tower layers); the channel's
    /// deadline is the sooner of it and the timeout counted from when the call reaches the channel.
    pub(crate) deadline: Option<tokio::time::Instant>,
    /// `Some(Identity)`: explicitly uncompressed (the channel's default encoding does not apply).
    pub(crate) compression: Option<Encoding>,
    /// Encodings advertised on top of the channel's.
    pub(crate) accept: EncodingSet,
    /// A call of the tower adapter: it advertises exactly `accept`, and no built-in receive limit applies.
    pub(crate) adapter: bool,
    pub(crate) wait_for_ready: Option<bool>,
    pub(crate) max_send_message_size: Option<usize>,
    pub(crate) max_receive_message_size: Option<usize>,
    pub(crate) retry_policy: Option<Arc<dyn AppRetryPolicy>>,
    pub(crate) exactly_once: Option<bool>,
}

/// Options are equal when their values are, and their retry policies are the same policy value.
impl PartialEq for CallOptions {
    fn eq(&self, other: &Self) -> bool {
        let same_policy = match (&self.retry_policy, &other.retry_policy) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        self.timeout == other.timeout
            && self.deadline == other.deadline
            && self.compression == other.compression
            && self.accept == other.accept
            && self.adapter == other.adapter
            && self.wait_for_ready == other.wait_for_ready
            && self.max_send_message_size == other.max_send_message_size
            && self.max_receive_message_size == other.max_receive_message_size
            && self.exactly_once == other.exactly_once
            && same_policy
    }
}

impl Eq for CallOptions {}

impl CallOptions {
    /// The call's timeout, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The encoding the call's messages are sent with, if the call chose one: `Some(Encoding::Identity)`
    /// when it chose to send them uncompressed, `None` when the channel's default
    /// ([`ChannelBuilder::send_compressed`](crate::ChannelBuilder::send_compressed)) decides.
    pub fn compression(&self) -> Option<Encoding> {
        self.compression
    }

    /// The encodings the call advertises in `grpc-accept-encoding` on top of the channel's (see
    /// [`ChannelBuilder::accept_compressed`](crate::ChannelBuilder::accept_compressed)).
    pub fn accepted_encodings(&self) -> EncodingSet {
        self.accept
    }

    /// Advertises `encoding` too for this call (see [`Request::with_accept_compressed`]).
    pub fn accept_compressed(&mut self, encoding: Encoding) {
        self.accept.insert(encoding);
    }

    /// Sets the encodings the call advertises on top of the channel's.
    pub fn set_accepted_encodings(&mut self, encodings: EncodingSet) {
        self.accept = encodings;
    }

    /// The call's own limit on response messages, if it set one (see
    /// [`Request::with_max_receive_message_size`]).
    pub fn max_receive_message_size(&self) -> Option<usize> {
        self.max_receive_message_size
    }

    /// Sets or clears the call's own limit on response messages.
    pub fn set_max_receive_message_size(&mut self, bytes: Option<usize>) {
        self.max_receive_message_size = bytes;
    }

    /// The call's own limit on request messages, if it set one (see
    /// [`Request::with_max_send_message_size`]).
    pub fn max_send_message_size(&self) -> Option<usize> {
        self.max_send_message_size
    }

    /// Sets or clears the call's own limit on request messages.
    pub fn set_max_send_message_size(&mut self, bytes: Option<usize>) {
        self.max_send_message_size = bytes;
    }

    /// Whether the call waits for a connection instead of failing fast, if the application said so (otherwise
    /// the service config's `waitForReady` decides, and without one the call fails fast).
    pub fn wait_for_ready(&self) -> Option<bool> {
        self.wait_for_ready
    }

    /// Sets or clears the call's timeout (see [`Request::with_timeout`]).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// Sets or clears the call's encoding (see [`Request::with_compression`]): `Some(Encoding::Identity)`
    /// sends uncompressed whatever the channel's default, `None` leaves it to the channel.
    pub fn set_compression(&mut self, encoding: Option<Encoding>) {
        self.compression = encoding;
    }

    /// Sets or clears wait-for-ready (see [`Request::with_wait_for_ready`]).
    pub fn set_wait_for_ready(&mut self, wait: Option<bool>) {
        self.wait_for_ready = wait;
    }

    /// The call's own retry policy, if the application set one.
    pub fn retry_policy(&self) -> Option<&Arc<dyn AppRetryPolicy>> {
        self.retry_policy.as_ref()
    }

    /// Sets or clears the call's retry policy (see [`Request::with_retry_policy`]).
    pub fn set_retry_policy(&mut self, policy: Option<Arc<dyn AppRetryPolicy>>) {
        self.retry_policy = policy;
    }
}

/// A call's request: the message (or `()` for streaming calls, whose messages are sent separately), metadata
/// and options.
#[derive(Clone, Debug)]
pub struct Request<T> {
    message: T,
    metadata: MetadataMap,
    options: CallOptions,
}

impl<T> Request<T> {
    /// A request with no metadata and default options.
    pub fn new(message: T) -> Request<T> {
        Request {
            message,
            metadata: MetadataMap::new(),
            options: CallOptions::default(),
        }
    }

    /// The message.
    pub fn message(&self) -> &T {
        &self.message
    }

    /// The message (as tonic names it; the same as [`Request::message`]).
    pub fn get_ref(&self) -> &T {
        &self.message
    }

    /// The message, for changing it.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.message
    }

    /// The message, dropping the metadata and options.
    pub fn into_inner(self) -> T {
        self.message
    }

    /// The metadata sent as request headers.
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }

    /// The metadata, for adding to it.
    pub fn metadata_mut(&mut self) -> &mut MetadataMap {
        &mut self.metadata
    }

    /// The options.
    pub fn options(&self) -> &CallOptions {
        &self.options
    }

    /// The options, for changing them.
    pub fn options_mut(&mut self) -> &mut CallOptions {
        &mut self.options
    }

    /// Sets the call's timeout: the deadline is the call's start plus this (or the service config's `timeout`
    /// if shorter). It is sent as `grpc-timeout` and enforced locally; when it passes the call ends with
    /// `DEADLINE_EXCEEDED`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout = Some(timeout);
        self
    }

    /// Sets the call's timeout in place (tonic's `set_timeout`; the same as [`Request::with_timeout`]).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.options.timeout = Some(timeout);
    }

    /// Compresses the request messages with `encoding` (`grpc-encoding` is sent; streams may opt single
    /// messages out with [`MessageOptions`]). [`Encoding::Identity`] sends them uncompressed, whatever the
    /// client's or the channel's default encoding. The server must support the encoding, or it answers
    /// UNIMPLEMENTED: `zstd` is tonic's extension, which C-core (grpcio) and grpc-java servers lack.
    pub fn with_compression(mut self, encoding: Encoding) -> Self {
        self.options.compression = Some(encoding);
        self
    }

    /// Advertises `encoding` in this call's `grpc-accept-encoding`, on top of what the channel advertises
    /// (see [`ChannelBuilder::accept_compressed`](crate::ChannelBuilder::accept_compressed)), so the server
    /// may compress its response with it. Identity is always accepted.
    pub fn with_accept_compressed(mut self, encoding: Encoding) -> Self {
        self.options.accept.insert(encoding);
        self
    }

    /// Makes the call wait for a connection (until its deadline) instead of failing at once when the channel
    /// cannot connect (`doc/wait-for-ready.md`).
    pub fn with_wait_for_ready(mut self, wait: bool) -> Self {
        self.options.wait_for_ready = Some(wait);
        self
    }

    /// Runs this call under `policy` ([`crate::NoRetry`], [`crate::Linear`], [`crate::Exponential`] or a
    /// custom [`AppRetryPolicy`]), whatever the service config or the channel say: a policy set on a call
    /// always wins for it. A6's guard rails still apply (throttle, at most 5 attempts, pushback, deadline,
    /// commit, buffer limits), and `ChannelBuilder::retries(false)` still turns it off.
    pub fn with_retry_policy(mut self, policy: impl AppRetryPolicy + 'static) -> Self {
        self.options.retry_policy = Some(Arc::new(policy));
        self
    }

    /// Makes this call exactly-once (or not, whatever the channel says): every attempt carries a request
    /// id, so that a server with a result tracker (`grpc-exactly-once`) runs it at most once, however many
    /// retries and hedges reach it. See [`crate::ChannelBuilder::exactly_once`].
    pub fn with_exactly_once(mut self, exactly_once: bool) -> Self {
        self.options.exactly_once = Some(exactly_once);
        self
    }

    /// The largest request message this call may send (larger ones fail it with RESOURCE_EXHAUSTED, unsent;
    /// a compressed message counts as compressed). It replaces the channel's limit for this call, and may
    /// raise it; the service config's `maxRequestMessageBytes` for the method still caps it (the smaller
    /// wins), as in grpc-go. A generated client's `max_encoding_message_size` sets it.
    pub fn with_max_send_message_size(mut self, bytes: usize) -> Self {
        self.options.max_send_message_size = Some(bytes);
        self
    }

    /// The largest response message this call accepts (larger ones end it with RESOURCE_EXHAUSTED; a
    /// compressed message counts both as it arrives and once decompressed). It replaces the channel's limit
    /// (4 MiB by default) for this call, and may raise it; the service config's `maxResponseMessageBytes`
    /// for the method still caps it (the smaller wins), as in grpc-go. A generated client's
    /// `max_decoding_message_size` sets it.
    pub fn with_max_receive_message_size(mut self, bytes: usize) -> Self {
        self.options.max_receive_message_size = Some(bytes);
        self
    }

    /// A request made of these parts.
    pub(crate) fn with_options(mut self, metadata: MetadataMap, options: CallOptions) -> Self {
        self.metadata = metadata;
        self.options = options;
        self
    }

    /// The same request (metadata and options) with its message mapped by `f` (tonic's `Request::map`).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Request<U> {
        Request {
            message: f(self.message),
            metadata: self.metadata,
            options: self.options,
        }
    }

    /// Splits the request into its parts.
    pub(crate) fn into_parts(self) -> (T, MetadataMap, CallOptions) {
        (self.message, self.metadata, self.options)
    }
}

/// Options for one message of a streaming call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MessageOptions {
    /// Compress this message with the call's encoding. Has no effect on a call without compression; `false`
    /// sends this one message uncompressed on a compressed call.
    pub compress: bool,
}

impl Default for MessageOptions {
    fn default() -> Self {
        MessageOptions { compress: true }
    }
}

impl MessageOptions {
    /// Options that send this one message uncompressed, whatever the call's encoding.
    pub fn uncompressed() -> Self {
        MessageOptions { compress: false }
    }
}

/// The defaults a client applies to each of its requests: what tonic-shaped generated clients keep for
/// their `send_compressed`, `accept_compressed`, `max_decoding_message_size` and
/// `max_encoding_message_size`. [`ClientDefaults::apply`] fills in what a request did not set itself, so a
/// request's own settings win; the channel's defaults apply to whatever neither set.
///
/// ```
/// use grpc_channel::{ClientDefaults, Encoding, Request};
///
/// let defaults = ClientDefaults::new()
///     .send_compressed(Encoding::Gzip)
///     .accept_compressed(Encoding::Zstd)
///     .max_decoding_message_size(16 << 20);
/// let mut request = Request::new(()).with_compression(Encoding::Identity);
/// defaults.apply(&mut request);
/// assert_eq!(request.options().compression(), Some(Encoding::Identity)); // the request's own choice
/// assert!(request.options().accepted_encodings().contains(Encoding::Zstd));
/// assert_eq!(request.options().max_receive_message_size(), Some(16 << 20));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientDefaults {
    compression: Option<Encoding>,
    accept: EncodingSet,
    max_decoding: Option<usize>,
    max_encoding: Option<usize>,
}

impl ClientDefaults {
    /// No defaults: requests keep what they set, the channel decides the rest.
    pub const fn new() -> ClientDefaults {
        ClientDefaults {
            compression: None,
            accept: EncodingSet::empty(),
            max_decoding: None,
            max_encoding: None,
        }
    }

    /// Compresses requests with `encoding` unless they chose one ([`Request::with_compression`]);
    /// [`Encoding::Identity`] sends them uncompressed whatever the channel's default.
    pub fn send_compressed(mut self, encoding: Encoding) -> Self {
        self.compression = Some(encoding);
        self
    }

    /// Advertises `encoding` in every request's `grpc-accept-encoding`, on top of the request's and the
    /// channel's.
    pub fn accept_compressed(mut self, encoding: Encoding) -> Self {
        self.accept.insert(encoding);
        self
    }

    /// The largest response message of requests that set no limit of their own (see
    /// [`Request::with_max_receive_message_size`]: it replaces the channel's limit).
    pub fn max_decoding_message_size(mut self, bytes: usize) -> Self {
        self.max_decoding = Some(bytes);
        self
    }

    /// The largest request message of requests that set no limit of their own (see
    /// [`Request::with_max_send_message_size`]: it replaces the channel's limit).
    pub fn max_encoding_message_size(mut self, bytes: usize) -> Self {
        self.max_encoding = Some(bytes);
        self
    }

    /// The encoding requests are sent with unless they chose one.
    pub fn compression(&self) -> Option<Encoding> {
        self.compression
    }

    /// The encodings every request advertises on top of its own and the channel's.
    pub fn accepted_encodings(&self) -> EncodingSet {
        self.accept
    }

    /// The response message limit of requests that set none.
    pub fn max_decoding(&self) -> Option<usize> {
        self.max_decoding
    }

    /// The request message limit of requests that set none.
    pub fn max_encoding(&self) -> Option<usize> {
        self.max_encoding
    }

    /// Fills in what `request` did not set: its encoding, its limits; the advertised encodings are added to
    /// the request's own.
    pub fn apply<T>(&self, request: &mut Request<T>) {
        let options = &mut request.options;
        options.compression = options.compression.or(self.compression);
        options.accept = options.accept.union(self.accept);
        options.max_receive_message_size = options.max_receive_message_size.or(self.max_decoding);
        options.max_send_message_size = options.max_send_message_size.or(self.max_encoding);
    }
}

/// A call's response: the message (or a message stream) and the metadata of the response headers.
#[derive(Debug)]
pub struct Response<T> {
    message: T,
    metadata: MetadataMap,
    trailers: MetadataMap,
    compressed: bool,
}

impl<T> Response<T> {
    pub(crate) fn new(
        message: T,
        metadata: MetadataMap,
        trailers: MetadataMap,
        compressed: bool,
    ) -> Self {
        Response {
            message,
            metadata,
            trailers,
            compressed,
        }
    }

    /// A response of `message` with the response headers' `metadata` (no trailers, not compressed, from
    /// the first attempt): the reverse of [`Response::into_parts`]. For a tower service of one's own that
    /// answers a generated client's calls without the network (a fake in tests, a cache):
    /// `GrpcReply::from_unary(Response::from_parts(metadata, encoded))` (see `grpc_channel::service`).
    pub fn from_parts(metadata: MetadataMap, message: T) -> Response<T> {
        Response::new(message, metadata, MetadataMap::new(), false)
    }

    /// The message.
    pub fn message(&self) -> &T {
        &self.message
    }

    /// The response headers' metadata.
    pub fn metadata(&self) -> &MetadataMap {
        &self.metadata
    }

    /// The trailers' metadata (unary and client-streaming calls; a stream has them on [`crate::Streaming`]).
    pub fn trailers(&self) -> &MetadataMap {
        &self.trailers
    }

    /// How many attempts preceded the one that produced this response (gRFC A6 "Exposed Retry Metadata"):
    /// retries and hedges, never transparent retries; 0 when the first attempt produced it. When not 0 the
    /// same number is in [`Response::metadata`] as `grpc-previous-rpc-attempts` (as grpc-java hands it to
    /// the application).
    pub fn previous_rpc_attempts(&self) -> u32 {
        self.metadata
            .previous_rpc_attempts()
            .max(self.trailers.previous_rpc_attempts())
    }

    /// Whether the (unary) response message arrived compressed.
    pub fn was_compressed(&self) -> bool {
        self.compressed
    }

    /// The message (as tonic names it; the same as [`Response::message`]).
    pub fn get_ref(&self) -> &T {
        &self.message
    }

    /// The message, for changing it (e.g. reading a [`crate::Streaming`] in place).
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.message
    }

    /// The message, dropping the metadata (as tonic names it; the same as [`Response::into_message`]).
    pub fn into_inner(self) -> T {
        self.message
    }

    /// The message, dropping the metadata.
    pub fn into_message(self) -> T {
        self.message
    }

    /// The metadata and the message.
    pub fn into_parts(self) -> (MetadataMap, T) {
        (self.metadata, self.message)
    }

    /// The same response (metadata, trailers, compression flag) with its message mapped by `f` (tonic's
    /// `Response::map`).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Response<U> {
        Response {
            message: f(self.message),
            metadata: self.metadata,
            trailers: self.trailers,
            compressed: self.compressed,
        }
    }
}

/// What a generated client's unary and server-streaming methods accept: a message (sent with no metadata and
/// default options) or a [`Request`] of one. The same shape as tonic's `IntoRequest`.
pub trait IntoRequest<T> {
    /// The request.
    fn into_request(self) -> Request<T>;
}

impl<T> IntoRequest<T> for T {
    fn into_request(self) -> Request<T> {
        Request::new(self)
    }
}

impl<T> IntoRequest<T> for Request<T> {
    fn into_request(self) -> Request<T> {
        self
    }
}

/// What a generated client's client-streaming and bidi methods accept: a stream of messages
/// (`Stream<Item = Message> + Send + 'static`, e.g. `tokio_stream::iter(vec![...])`) or a [`Request`] of one.
/// The same shape as tonic's `IntoStreamingRequest`.
pub trait IntoStreamingRequest {
    /// The stream of messages.
    type Stream: Stream<Item = Self::Message> + Send + 'static;
    /// The request message type.
    type Message;

    /// The request.
    fn into_streaming_request(self) -> Request<Self::Stream>;
}

impl<S> IntoStreamingRequest for S
where
    S: Stream + Send + 'static,
{
    type Stream = S;
    type Message = S::Item;

    fn into_streaming_request(self) -> Request<S> {
        Request::new(self)
    }
}

impl<S> IntoStreamingRequest for Request<S>
where
    S: Stream + Send + 'static,
{
    type Stream = S;
    type Message = S::Item;

    fn into_streaming_request(self) -> Request<S> {
        self
    }
}
