//! What a channel tells about its calls: `tracing` spans, gRFC A66/A96 metrics through the `metrics`
//! facade (feature `metrics`), and [`Channel::stats`](crate::Channel::stats) without any exporter.
//!
//! The span names and fields, the metric instruments and their labels are documented for users in the public
//! `observability` module (`crates/channel/src/observability.rs`): a change to them here changes that page.
//! Not here: A66's per-attempt message size instruments.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use grpc_retry::{CallStats, MethodStats};
use parking_lot::Mutex;
#[cfg(feature = "metrics")]
use tokio::time::Instant;

use crate::control::address_stats::AddressStats;
use crate::control::resolver_state::RoutedTo;
use crate::wire::status::{Code, Status};

/// The most methods [`ChannelStats::methods`] keeps apart; calls of others count in the totals only.
const MAX_METHODS: usize = 1024;

/// The most clusters [`ChannelStats::clusters`] keeps apart; calls to others count in the totals only.
const MAX_CLUSTERS: usize = 1024;

/// The calls an xDS channel routed to one cluster, in [`ChannelStats::clusters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterCallStats {
    /// Calls routed to the cluster (counted when routed, before their first attempt).
    pub calls_started: u64,
    /// Of those, the calls that ended OK.
    pub calls_succeeded: u64,
    /// Of those, the calls that ended otherwise (cancelled included). Calls in flight are the rest.
    pub calls_failed: u64,
}

/// A snapshot of a channel's calls, from [`Channel::stats`](crate::Channel::stats). More counters may come.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ChannelStats {
    /// Calls started.
    pub calls_started: u64,
    /// Calls that ended OK.
    pub calls_succeeded: u64,
    /// Calls that ended otherwise.
    pub calls_failed: u64,
    /// Attempts started, transparent retries included.
    pub attempts_started: u64,
    /// Per method (its full name): gRFC A6's statistics (retries, hedges, transparent retries, the failed
    /// retries, the retry-count buckets) and A96's histograms.
    pub methods: HashMap<String, MethodStats>,
    /// The addresses outlier detection (gRFC A50, `outlier_detection_experimental`) has ejected now, in the
    /// order it ejected them (`ip:port`, or `unix:` and a Unix socket's path, e.g. `unix:/run/api.sock`). Empty without outlier detection.
    pub ejected_addresses: Vec<String>,
    /// How many times outlier detection ejected each address since the channel started (kept for at most
    /// 1,024 addresses; an IDLE channel starts detection afresh but keeps these counts).
    pub ejections: HashMap<String, u64>,
    /// The addresses whose connection is READY but whose health check (gRFC A17, the service config's
    /// `healthCheckConfig`) says they do not serve the service (NOT_SERVING, SERVICE_UNKNOWN, or a failed
    /// Watch): calls avoid them (keys as in [`ChannelStats::addresses`]). Empty without health checking.
    pub not_serving_addresses: Vec<String>,
    /// For an xDS channel, per cluster its routes sent calls to: those calls, started when routed and
    /// succeeded or failed at their end (kept for at most 1,024 clusters). Empty on other channels.
    pub clusters: HashMap<String, ClusterCallStats>,
    /// Bytes of request messages that committed calls hold and HTTP/2 flow control has not let out yet: what
    /// the committed attempt had not written when the call committed, and what the application sent since.
    /// A call's retry buffer is freed when it commits (gRFC A6); its unwritten messages count here instead
    /// until they are written or the call ends (then they are dropped, whether or not the application still
    /// holds the call's halves). A call's `send` waits while its own share is 64 KiB or more.
    pub unsent_request_bytes: u64,
    /// Per address in the channel's address list (`ip:port`, or `unix:` and a socket's path, as in
    /// [`ChannelStats::ejected_addresses`]): the attempts it
    /// carried (started, succeeded, failed: counted per attempt on the subchannel it went to, as channelz
    /// counts a subchannel's calls, so retries and hedges count where they went) and its subchannel's
    /// connectivity and health state. An address leaves the map, with its counts, when it leaves the list.
    /// For an xDS channel, the list is its clusters' endpoints, counted the same way.
    pub addresses: HashMap<String, AddressStats>,
}

/// The channel's side: counters, per-method statistics and per-cluster call counts.
#[derive(Default)]
pub(crate) struct Telemetry {
    target: Arc<str>,
    calls_started: AtomicU64,
    calls_succeeded: AtomicU64,
    calls_failed: AtomicU64,
    attempts_started: AtomicU64,
    /// [`ChannelStats::unsent_request_bytes`].
    unsent_request_bytes: AtomicU64,
    methods: Mutex<HashMap<String, MethodStats>>,
    clusters: Mutex<HashMap<String, ClusterCallStats>>,
}

impl Telemetry {
    pub(crate) fn new(target: String) -> Arc<Telemetry> {
        Arc::new(Telemetry {
            target: target.into(),
            ..Telemetry::default()
        })
    }

    pub(crate) fn snapshot(&self) -> ChannelStats {
        ChannelStats {
            calls_started: self.calls_started.load(Ordering::Relaxed),
            calls_succeeded: self.calls_succeeded.load(Ordering::Relaxed),
            calls_failed: self.calls_failed.load(Ordering::Relaxed),
            attempts_started: self.attempts_started.load(Ordering::Relaxed),
            methods: self.methods.lock().clone(),
            ejected_addresses: Vec::new(),
            ejections: HashMap::new(),
            not_serving_addresses: Vec::new(),
            clusters: self.clusters.lock().clone(),
            unsent_request_bytes: self.unsent_request_bytes.load(Ordering::Relaxed),
            addresses: HashMap::new(),
        }
    }

    /// A call of the method `uri` names starts (before interceptors and resolution).
    pub(crate) fn call(self: &Arc<Self>, uri: &Arc<http::Uri>) -> CallTelemetry {
        self.calls_started.fetch_add(1, Ordering::Relaxed);
        let label = uri.path().trim_start_matches('/');
        let span = tracing::info_span!(
            "grpc.call",
            grpc.method = label,
            grpc.target = &*self.target,
            retry.policy = tracing::field::Empty,
            xds.route = tracing::field::Empty,
            xds.cluster = tracing::field::Empty,
            grpc.status = tracing::field::Empty,
            grpc.attempts = tracing::field::Empty,
        );
        CallTelemetry {
            channel: self.clone(),
            uri: uri.clone(),
            span,
            #[cfg(feature = "metrics")]
            start: Instant::now(),
            stats: None,
            cluster: None,
            finished: false,
        }
    }
}

impl Telemetry {
    /// A call refused before it could start because its method path is malformed: its span (with the path
    /// as given, without a leading slash like every call's `grpc.method`) and the channel's totals, but no
    /// per-method statistics or metrics, whose labels must stay bounded. Returns `status`.
    pub(crate) fn refused(&self, path: &str, status: Status) -> Status {
        self.calls_started.fetch_add(1, Ordering::Relaxed);
        self.calls_failed.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!(
            "grpc.call",
            grpc.method = path.trim_start_matches('/'),
            grpc.target = &*self.target,
            grpc.status = status.code().name(),
            grpc.attempts = 0u32,
        );
        span.in_scope(|| tracing::debug!(%status, "call refused"));
        status
    }
}

/// A66's `grpc.method`: the path without its leading slash.
#[cfg(feature = "metrics")]
fn label(uri: &http::Uri) -> &str {
    uri.path().trim_start_matches('/')
}

/// One call's telemetry, kept with the call's shared state; finished once with the call's status.
pub(crate) struct CallTelemetry {
    channel: Arc<Telemetry>,
    /// The call's URI (shared with the call's attempts): its path (`/package.Service/Method`) keys the per-method
    /// statistics, and without the slash it is A66's `grpc.method`.
    uri: Arc<http::Uri>,
    span: tracing::Span,
    /// When the call started, for `grpc.client.call.duration`.
    #[cfg(feature = "metrics")]
    start: Instant,
    /// What the retry state machine counted, once it is done.
    stats: Option<CallStats>,
    /// The cluster an xDS route sent the call to, if [`ChannelStats::clusters`] counts it.
    cluster: Option<Arc<str>>,
    finished: bool,
}

impl CallTelemetry {
    /// The call is ready for its first attempt under `policy` (where its retry policy comes from).
    pub(crate) fn started(&mut self, policy: &'static str) {
        self.span.record("retry.policy", policy);
        self.span.in_scope(|| {
            tracing::debug!(
                method = self.uri.path(),
                retry.policy = policy,
                "call started"
            )
        });
    }

    /// An xDS route sent the call to a cluster (`None`: not routed, nothing to record): the span's fields,
    /// an event, and the cluster's count. Recorded once the call is prepared, so a routed call that fails
    /// before its first attempt (an oversize request) counts under its cluster too.
    pub(crate) fn routed(&mut self, to: Option<&RoutedTo>) {
        let Some(to) = to else { return };
        self.span.record("xds.route", &*to.route);
        self.span.record("xds.cluster", &*to.cluster);
        self.span.in_scope(|| {
            tracing::debug!(
                xds.route = &*to.route,
                xds.cluster = &*to.cluster,
                "call routed"
            )
        });
        let mut clusters = self.channel.clusters.lock();
        let len = clusters.len();
        match clusters.get_mut(&*to.cluster) {
            Some(c) => c.calls_started += 1,
            None if len < MAX_CLUSTERS => {
                let c = ClusterCallStats {
                    calls_started: 1,
                    ..ClusterCallStats::default()
                };
                clusters.insert(to.cluster.to_string(), c);
            }
            None => return,
        }
        self.cluster = Some(to.cluster.clone());
    }

    /// The call failed before its first attempt (an interceptor, resolution, its deadline, a closed
    /// channel, a request it could not encode): finishes it with `status`, which it returns.
    pub(crate) fn fail(&mut self, status: Status) -> Status {
        self.finish(&status);
        status
    }

    /// An attempt starts (number `n`, from 1), after `delay` with no attempt in flight.
    pub(crate) fn attempt(&self, n: u32, transparent: bool, delay: Duration) -> AttemptTelemetry {
        self.channel
            .attempts_started
            .fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!(
            parent: &self.span,
            "grpc.attempt",
            grpc.attempt = n,
            grpc.transparent = transparent,
            grpc.delay_ms = delay.as_millis() as u64,
            grpc.peer = tracing::field::Empty,
            grpc.committed = tracing::field::Empty,
            grpc.outcome = tracing::field::Empty,
        );
        #[cfg(feature = "metrics")]
        metrics::counter!(
            "grpc.client.attempt.started",
            "grpc.method" => label(&self.uri).to_owned(),
            "grpc.target" => self.channel.target.to_string(),
        )
        .increment(1);
        AttemptTelemetry {
            span,
            #[cfg(feature = "metrics")]
            metrics: AttemptMetrics {
                start: Instant::now(),
                uri: self.uri.clone(),
                target: self.channel.target.clone(),
            },
            ended: false,
        }
    }

    /// The bytes of request messages the committed call holds unwritten went from `counted` (what it counted
    /// before) to `now` ([`ChannelStats::unsent_request_bytes`]).
    pub(crate) fn unsent_changed(&self, counted: usize, now: usize) {
        let gauge = &self.channel.unsent_request_bytes;
        if now > counted {
            gauge.fetch_add((now - counted) as u64, Ordering::Relaxed);
        } else if now < counted {
            gauge.fetch_sub((counted - now) as u64, Ordering::Relaxed);
        }
    }

    /// The retry state machine is done with the call: its counts.
    pub(crate) fn set_stats(&mut self, stats: &CallStats) {
        if self.stats.is_none() {
            self.stats = Some(stats.clone());
        }
    }

    /// The call ended with `status` (the first report wins).
    pub(crate) fn finish(&mut self, status: &Status) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let code = status.code();
        let counter = if code == Code::Ok {
            &self.channel.calls_succeeded
        } else {
            &self.channel.calls_failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(cluster) = self.cluster.take() {
            if let Some(c) = self.channel.clusters.lock().get_mut(&*cluster) {
                if code == Code::Ok {
                    c.calls_succeeded += 1;
                } else {
                    c.calls_failed += 1;
                }
            }
        }
        let stats = self.stats.take().unwrap_or_default();
        self.span.record("grpc.status", code.name());
        self.span.record("grpc.attempts", stats.attempts);
        {
            let mut methods = self.channel.methods.lock();
            let len = methods.len();
            match methods.get_mut(self.uri.path()) {
                Some(m) => m.record(&stats),
                None if len < MAX_METHODS => {
                    let mut m = MethodStats::default();
                    m.record(&stats);
                    methods.insert(self.uri.path().to_owned(), m);
                }
                None => {}
            }
        }
        #[cfg(feature = "metrics")]
        {
            let method = label(&self.uri).to_owned();
            let target = self.channel.target.to_string();
            metrics::histogram!(
                "grpc.client.call.duration",
                "grpc.method" => method.clone(),
                "grpc.target" => target.clone(),
                "grpc.status" => code.name(),
            )
            .record(self.start.elapsed().as_secs_f64());
            let labels = [("grpc.method", method), ("grpc.target", target)];
            if stats.retries > 0 {
                metrics::histogram!("grpc.client.call.retries", &labels)
                    .record(f64::from(stats.retries));
            }
            if stats.transparent_retries > 0 {
                metrics::histogram!("grpc.client.call.transparent_retries", &labels)
                    .record(f64::from(stats.transparent_retries));
            }
            if stats.hedges > 0 {
                metrics::histogram!("grpc.client.call.hedges", &labels)
                    .record(f64::from(stats.hedges));
            }
            metrics::histogram!("grpc.client.call.retry_delay", &labels)
                .record(stats.retry_delay.as_secs_f64());
        }
    }
}

impl Drop for CallTelemetry {
    fn drop(&mut self) {
        // A call dropped without an end (its halves dropped): it was cancelled.
        if !self.finished {
            self.finish(&Status::cancelled_by_client());
        }
    }
}

/// One attempt's telemetry. Kept while the attempt is in flight (and with the call once committed), so it
/// holds what the attempt's metrics need only when they are built in.
pub(crate) struct AttemptTelemetry {
    span: tracing::Span,
    #[cfg(feature = "metrics")]
    metrics: AttemptMetrics,
    ended: bool,
}

/// What `grpc.client.attempt.duration` needs: the attempt's start and its labels.
#[cfg(feature = "metrics")]
struct AttemptMetrics {
    start: Instant,
    uri: Arc<http::Uri>,
    target: Arc<str>,
}

impl AttemptTelemetry {
    /// The attempt got a connection to `peer`.
    pub(crate) fn picked(&self, peer: &grpc_lb::Address) {
        self.span.record("grpc.peer", tracing::field::display(peer));
    }

    /// The attempt ended with `status`.
    pub(crate) fn ended(&mut self, status: &Status) {
        self.end(status.code().name(), Some(status.code()));
    }

    /// The call cancelled the attempt (a losing hedge, or the call's own end).
    pub(crate) fn cancelled(&mut self) {
        self.end("cancelled", Some(Code::Cancelled));
    }

    /// The call committed to the attempt, which runs on as the call (its outcome comes when it ends).
    pub(crate) fn committed(&mut self) {
        self.span.record("grpc.committed", true);
    }

    fn end(&mut self, outcome: &'static str, code: Option<Code>) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        self.span.record("grpc.outcome", outcome);
        #[cfg(feature = "metrics")]
        metrics::histogram!(
            "grpc.client.attempt.duration",
            "grpc.method" => label(&self.metrics.uri).to_owned(),
            "grpc.target" => self.metrics.target.to_string(),
            "grpc.status" => code.unwrap_or(Code::Unknown).name(),
        )
        .record(self.metrics.start.elapsed().as_secs_f64());
        #[cfg(not(feature = "metrics"))]
        let _ = code;
    }
}

impl Drop for AttemptTelemetry {
    fn drop(&mut self) {
        if !self.ended {
            self.cancelled();
        }
    }
}
