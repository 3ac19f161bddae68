//! How a call is set up before its first attempt, whatever its shape: the channel's side of
//! [`Channel`]'s call methods. [`Channel::prepare`] runs the interceptors, waits for the resolution result
//! when there is none yet (the only wait, boxed where it is awaited: [`Channel::resolve`]), picks the method
//! config (routed by an xDS routing, or the service config's) and sets the call's deadline, limits, request
//! headers and telemetry; [`Channel::new_call`] then makes the call's retry state machine (gRFC A6: the
//! method's policy or the application's, with the channel's throttle and buffer limits), what its attempts
//! send, and the state its halves share.
//!
//! Not here: the call methods themselves (`channel.rs`), running the call (`call/`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::Instant;

use crate::call::attempt::AttemptSetup;
use crate::call::telemetry::CallTelemetry;
use crate::call::{ReceiveRules, Shared, SharedRef};
use crate::channel::{Channel, Inner};
use crate::control::resolver_state::{method_for, RoutedTo, Routing};
use crate::request::CallOptions;
use crate::wire::compression::{Encoding, EncodingSet};
use crate::wire::limits::Limit;
use crate::wire::metadata::MetadataMap;
use crate::wire::status::{Code, Status};
use grpc_retry::{CallConfig, Precedence, RetryCall, SharedLimits, SplitMix64, Throttle};
use grpc_service_config::{MethodConfig, ServiceConfig};

impl Channel {
    /// The retry state machine of a new call (gRFC A6: the method's policy, or none, with the channel's
    /// throttle and buffer limits), what its attempts send, and the state its halves share. `now` is the
    /// call's start for the state machine.
    pub(crate) fn new_call(
        &self,
        prepared: &mut Prepared,
        mut telemetry: CallTelemetry,
        eager: bool,
        now: std::time::Instant,
    ) -> (Box<RetryCall>, Arc<AttemptSetup>, SharedRef) {
        let inner = &*self.inner;
        // A policy set on the call always wins for it; the channel's wins as its precedence says.
        let (app_policy, precedence) = match &prepared.options.retry_policy {
            Some(p) => (Some(p.clone()), Precedence::Application),
            None => (inner.app_policy.clone(), inner.precedence),
        };
        let config = CallConfig {
            policy: prepared
                .method
                .as_ref()
                .map(|m| m.policy.clone())
                .unwrap_or_default(),
            app_policy,
            precedence,
            retries_enabled: inner.retries,
            deadline: prepared.deadline.map(Instant::into_std),
            per_call_buffer_limit: inner.per_rpc_buffer_limit,
            ..CallConfig::default()
        };
        let shared = SharedLimits {
            throttle: self.throttle_for(&prepared.config),
            pool: inner.retry_pool.clone(),
        };
        let seed = inner.seed ^ inner.calls.fetch_add(1, Ordering::Relaxed);
        // Boxed: it goes from the retry driver (in the caller's future) to the call's shared state at commit,
        // and would otherwise take its room in both for the whole call.
        let call = Box::new(RetryCall::new(
            config,
            shared,
            Box::new(SplitMix64::new(seed)),
            now,
        ));
        let exactly_once = prepared
            .options
            .exactly_once
            .unwrap_or(inner.exactly_once)
            .then(|| Arc::new(inner.exactly_once_client.start_call()));
        // The call's reference to its cluster lives in its shared state only, released at commit.
        let hold = prepared.cluster.as_mut().and_then(|c| c.hold.take());
        let setup = Arc::new(AttemptSetup {
            uri: prepared.uri.clone(),
            user_agent: inner.user_agent.clone(),
            encoding: prepared.encoding,
            accept: prepared.accept,
            metadata: std::mem::take(&mut prepared.metadata),
            wait_for_ready: prepared.wait_for_ready,
            cluster: prepared.cluster.clone(),
            deadline: prepared.deadline,
            eager,
            header_limit: self.header_limit(),
            exactly_once: exactly_once.clone(),
        });
        let guard = self.control().call_started();
        telemetry.started(call.policy_source().as_str());
        let shared = Shared::driving(Some(guard), hold, telemetry);
        if let Some(id) = exactly_once {
            // In flight (for the watermark) until the call ends, not only until it commits.
            shared.lock().keep_exactly_once(id);
        }
        (call, setup, shared)
    }

    /// Everything a call needs before its first attempt: the resolution result and method config, the
    /// deadline, the limits, and the request headers (without `grpc-timeout`, which each attempt sets);
    /// and the call's telemetry, which starts here so that a call that fails before any attempt (an
    /// interceptor, resolution, its deadline, a closed channel) is traced and counted too.
    pub(crate) async fn prepare(
        &self,
        path: &str,
        metadata: MetadataMap,
        options: CallOptions,
    ) -> Result<(Prepared, CallTelemetry), Status> {
        match self.begin(path, metadata, options)? {
            (Settled::Ready(prepared), telemetry) => Ok((prepared, telemetry)),
            (Settled::Resolving(resolving), telemetry) => {
                Box::pin(self.resolve(path, resolving, telemetry)).await
            }
        }
    }

    /// [`Channel::prepare`] as far as it goes without waiting. Only calls that come before the first
    /// resolution result (or while it failed) wait, so the wait ([`Channel::resolve`]) is boxed where it is
    /// awaited: it takes no room in the future of every call.
    pub(crate) fn begin(
        &self,
        path: &str,
        metadata: MetadataMap,
        options: CallOptions,
    ) -> Result<(Settled, CallTelemetry), Status> {
        let inner = &*self.inner;
        let uri = match inner.uris.get(&inner.scheme, &inner.authority, path) {
            Ok(uri) => uri,
            Err(status) => return Err(inner.telemetry.refused(path, status)),
        };
        // Dropped on the way (the caller gave up), it finishes CANCELLED.
        let mut telemetry = inner.telemetry.call(&uri);
        match self.settle(uri, path, metadata, options) {
            Ok(settled) => Ok((settled, telemetry)),
            Err(status) => Err(telemetry.fail(status)),
        }
    }

    /// [`Channel::prepare`] but the telemetry, as far as it goes without waiting: the channel is open, the
    /// interceptors ran, the call's deadline is set, and the resolution result is used if there is one.
    pub(crate) fn settle(
        &self,
        uri: Arc<http::Uri>,
        path: &str,
        mut metadata: MetadataMap,
        mut options: CallOptions,
    ) -> Result<Settled, Status> {
        let inner = &*self.inner;
        if self.is_closed() {
            return Err(Status::new(Code::Unavailable, "the channel is shut down"));
        }
        // Interceptors first: one that fails the call leaves nothing sent and the channel untouched.
        inner.interceptors.run(path, &mut metadata, &mut options)?;
        let call_start = Instant::now();
        // A timeout too large to add means no deadline.
        let api_deadline = options
            .timeout
            .or(inner.default_timeout)
            .and_then(|t| call_start.checked_add(t));
        // An IDLE channel leaves IDLE now: a resolution failure must show in its state (TRANSIENT_FAILURE).
        self.control().call_coming();
        let resolving = Resolving {
            uri,
            metadata,
            options,
            call_start,
            api_deadline,
        };
        // What `Resolution::wait` would return at once, without the wait.
        match inner.resolution.ready(resolving.api_wait()) {
            Some(resolved) => {
                let (_, config, routing) = resolved?;
                Ok(Settled::Ready(
                    resolving.prepared(inner, path, config, routing)?,
                ))
            }
            None => Ok(Settled::Resolving(resolving)),
        }
    }

    /// [`Channel::prepare`] for a call that waits for name resolution: the service config comes with
    /// resolution; calls wait for the first result (bounded by their own deadline), and wait-for-ready calls
    /// set through the API also wait through resolution failures.
    pub(crate) async fn resolve(
        &self,
        path: &str,
        resolving: Resolving,
        mut telemetry: CallTelemetry,
    ) -> Result<(Prepared, CallTelemetry), Status> {
        let inner = &*self.inner;
        let wait = inner.resolution.wait(resolving.api_wait());
        let resolved = match resolving.api_deadline {
            None => wait.await,
            Some(d) => tokio::time::timeout_at(d, wait)
                .await
                .unwrap_or_else(|_| Err(Status::deadline_passed())),
        };
        match resolved
            .and_then(|(_, config, routing)| resolving.prepared(inner, path, config, routing))
        {
            Ok(prepared) => Ok((prepared, telemetry)),
            Err(status) => Err(telemetry.fail(status)),
        }
    }

    /// The throttle of this channel's target for `config`'s `retryThrottling`, created once per setting.
    pub(crate) fn throttle_for(&self, config: &ServiceConfig) -> Option<Arc<Throttle>> {
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

/// How far [`Channel::settle`] got without waiting.
// Returned once per call and taken apart at once: boxing the ready side would cost an allocation per call.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Settled {
    /// Ready for the first attempt.
    Ready(Prepared),
    /// To wait for the first name resolution result (a wait-for-ready call, for a good one).
    Resolving(Resolving),
}

/// A call past its interceptors, before the service config (which name resolution brings) is applied.
pub(crate) struct Resolving {
    uri: Arc<http::Uri>,
    metadata: MetadataMap,
    options: CallOptions,
    call_start: Instant,
    /// The deadline the call's options set (a timeout too large to add means none).
    api_deadline: Option<Instant>,
}

impl Resolving {
    /// Whether the call waits through resolution failures (wait-for-ready set through the API).
    fn api_wait(&self) -> bool {
        self.options.wait_for_ready.unwrap_or(false)
    }

    /// The call, ready for its first attempt under `config` (and `routing`, see [`method_for`]): its
    /// method config, cluster, limits and deadline.
    fn prepared(
        self,
        inner: &Inner,
        path: &str,
        config: Arc<ServiceConfig>,
        routing: Option<Arc<Routing>>,
    ) -> Result<Prepared, Status> {
        let Resolving {
            uri,
            metadata,
            options,
            call_start,
            api_deadline,
        } = self;
        // The method config's timeout, or the route's cap (A31) if sooner, bounds the deadline.
        let (method, cap, cluster) = method_for(&config, routing.as_deref(), path, &metadata)?;
        let (max_send, max_receive) = Limit::effective(
            method.as_deref(),
            (inner.max_send, inner.max_receive),
            (
                options.max_send_message_size,
                options.max_receive_message_size,
            ),
            options.adapter,
        );
        // The call's choice (identity included), else the channel's.
        let encoding = options
            .compression
            .or(inner.send_compression)
            .filter(|e| *e != Encoding::Identity);
        // A tower adapter call advertises what its tonic client decodes, nothing more.
        let accept = if options.adapter {
            options.accept
        } else {
            inner.accept.union(options.accept)
        };
        let deadline = min_deadline(api_deadline, cap.and_then(|t| call_start.checked_add(t)));
        let wait_for_ready = options
            .wait_for_ready
            .or(method.as_ref().and_then(|m| m.wait_for_ready))
            .unwrap_or(false);
        Ok(Prepared {
            uri,
            metadata: metadata.into_headers(),
            cluster,
            deadline,
            wait_for_ready,
            max_send,
            max_receive,
            encoding,
            accept,
            options,
            method,
            config,
        })
    }
}

/// A call, ready for its first attempt.
pub(crate) struct Prepared {
    pub(crate) uri: Arc<http::Uri>,
    /// The application's metadata, as headers.
    pub(crate) metadata: http::HeaderMap,
    /// The cluster its route chose (xDS).
    pub(crate) cluster: Option<RoutedTo>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) wait_for_ready: bool,
    pub(crate) max_send: Limit,
    pub(crate) max_receive: Limit,
    /// The encoding request messages are sent with, if compressed.
    pub(crate) encoding: Option<Encoding>,
    /// What the call advertises in `grpc-accept-encoding`, and so decodes.
    pub(crate) accept: EncodingSet,
    pub(crate) options: CallOptions,
    pub(crate) method: Option<Arc<MethodConfig>>,
    pub(crate) config: Arc<ServiceConfig>,
}

impl Prepared {
    /// How the call's receiving half reads response messages.
    pub(crate) fn receive_rules(&self) -> ReceiveRules {
        ReceiveRules {
            limit: self.max_receive,
            accept: self.accept,
            // A tower adapter call with no receive limit of the channel's own hands compressed messages
            // on still compressed: its tonic client decompresses them under its own limit.
            pass_compressed: self.options.adapter && !self.max_receive.is_set(),
        }
    }
}

/// The earlier of two optional deadlines.
fn min_deadline(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
