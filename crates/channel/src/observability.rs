//! What a channel tells about its calls and itself: `tracing` spans and events, gRFC A66/A96 metrics through
//! the `metrics` facade (cargo feature `metrics`), and [`Channel::stats`](crate::Channel::stats), which needs
//! no exporter. This module holds only documentation: the names below are what dashboards and log queries
//! match on, and they are kept stable.
//!
//! # Spans
//!
//! Both at `INFO`, so a subscriber that filters them out costs a callsite check per call.
//!
//! * **`grpc.call`**, one per call, from its very start (before interceptors and name resolution, so a call
//!   that fails before any attempt has one too). Fields: `grpc.method` (`package.Service/Method`,
//!   the path without its leading slash, as A66 writes it; a call refused for a malformed path has the path as
//!   given, less a leading slash),
//!   `grpc.target`, `retry.policy` (the policy the call runs, once its method config is known:
//!   `service_config`, `application` or `none`), for a call an xDS route took `xds.route` (the route's
//!   `name`, else `virtual host name/index`) and `xds.cluster` (both empty on other channels), and at its end
//!   `grpc.status` (the code) and `grpc.attempts` (0 for a call that never made one). Debug events inside it:
//!   `call routed` (xDS, with the route and cluster) and `call started`, when the first attempt is about to
//!   start.
//! * **`grpc.attempt`**, one per attempt, a child of its call's span. Fields: `grpc.attempt` (1, 2, ...),
//!   `grpc.transparent` (a transparent retry), `grpc.delay_ms` (how long the call had no attempt in flight
//!   before this one: a retry's backoff; 0 for a hedge or the first attempt), `grpc.peer` (the address, once
//!   picked), `grpc.committed` (true when the call commits to this attempt), and at its end, once,
//!   `grpc.outcome` (a status code, or `cancelled` for an attempt the call cancelled).
//!
//! # Events
//!
//! Outside the call spans, the channel logs what changes its connections and choices, and what it chose not
//! to do, with the address (`addr` or `address`) as a field where there is one:
//!
//! * `WARN`: a service config asks for health checking (`healthCheckConfig`) under a policy that does not
//!   run it (pick_first, the default): once per config, naming the policy; a service config the resolver
//!   sent is invalid and the previous one is kept (gRFC A21); a proxy environment variable is ignored; the
//!   server sent GOAWAY `too_many_pings` and the keepalive time doubled (with the address); a resolver
//!   panicked (in `resolve_now`, or while stopping: the channel drops it and keeps its last endpoints); a
//!   registered `pick_first` panicked in `default_config` (the built-in pick_first runs instead).
//! * `INFO`: outlier detection ejects an address (with the cause, the multiplier and the ejection time) or
//!   returns it; a health check finds an address not serving, or serving again; keepalive closes a
//!   connection whose peer stopped answering its PING (with the address and the status its calls get).
//!   Other connection closes are not logged at `INFO`.
//! * `ERROR`: a load-balancing policy panicked (its connections close and the resolver is asked again); a
//!   server has no health service while health checking is on (it is used as healthy).
//! * `DEBUG`: a config without `loadBalancingConfig` (or no config): the policy is pick_first by default;
//!   a service config value was clamped (`maxAttempts` above 5, and the others
//!   [`ServiceConfig::clamps`](crate::ServiceConfig::clamps) lists), with its JSON path; after each outlier
//!   detection sweep, per address that had failures but stayed in service, why (below `requestVolume`, which
//!   counts one address's calls per interval; fewer than `minimumHosts` addresses with that volume;
//!   `maxEjectionPercent` reached; the enforcement draw; under the threshold); GOAWAY received (last stream
//!   id, error code, debug data, and the address that sent it); a connection ended with an error (with
//!   the address); a picked connection was gone; the channel went IDLE; a health Watch failed
//!   and will be retried.
//!
//! A call that fails says what it waited for too: a wait-for-ready call whose deadline passes while no
//! connection is ready fails with DEADLINE_EXCEEDED, "deadline exceeded while waiting for connections to
//! become ready (wait-for-ready)", followed by the last connection error and its address (also the status's
//! [`source`](std::error::Error::source)); one still waiting for the first name resolution says so.
//!
//! # Metrics (feature `metrics`)
//!
//! The instrument names and labels of gRFC A66 and A96, recorded through the `metrics` facade, so any
//! `metrics` recorder or exporter (Prometheus, OpenTelemetry, StatsD...) sees them once installed:
//!
//! | instrument | kind | labels |
//! |---|---|---|
//! | `grpc.client.attempt.started` | counter | `grpc.method`, `grpc.target` |
//! | `grpc.client.attempt.duration` | histogram | `grpc.method`, `grpc.target`, `grpc.status` |
//! | `grpc.client.call.duration` | histogram | `grpc.method`, `grpc.target`, `grpc.status` |
//! | `grpc.client.call.retries` | histogram | `grpc.method`, `grpc.target` |
//! | `grpc.client.call.transparent_retries` | histogram | `grpc.method`, `grpc.target` |
//! | `grpc.client.call.hedges` | histogram | `grpc.method`, `grpc.target` |
//! | `grpc.client.call.retry_delay` | histogram | `grpc.method`, `grpc.target` |
//!
//! The two duration histograms and `retry_delay` record seconds (fractional values): the channel registers
//! no unit or description for its instruments, so an exporter shows plain numbers; the other histograms
//! record counts. `grpc.method` is written as A66 writes it, `package.Service/Method` without the leading slash. The
//! retry, transparent-retry and hedge histograms record only non-zero values, as A96 says. The channel
//! cannot tell a generated client's methods from arbitrary paths, so it labels every method by its name
//! rather than A66's `other` for unregistered ones: an application calling unbounded paths through
//! [`Channel::unary_raw`](crate::Channel::unary_raw) should mind the label cardinality. Not recorded: A66's
//! per-attempt message size instruments.
//!
//! A recorder sees every channel's instruments once installed (here `metrics-util`'s debugging recorder; an
//! exporter's `install()` works the same way):
//!
//! ```no_run
//! # #[cfg(feature = "metrics")]
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use metrics_util::debugging::DebuggingRecorder;
//!
//! let recorder = DebuggingRecorder::new();
//! let snapshotter = recorder.snapshotter();
//! recorder.install()?; // process-wide: every channel's calls record into it from now on
//!
//! let channel = grpc_channel::Channel::new("dns:///backend.internal:50051")?;
//! // ... calls on `channel` ...
//! for (key, _unit, _description, value) in snapshotter.snapshot().into_vec() {
//!     println!("{} {:?} = {value:?}", key.key().name(), key.key().labels().collect::<Vec<_>>());
//! }
//! # let _ = channel;
//! # Ok(()) }
//! ```
//!
//! # Channel statistics
//!
//! [`Channel::stats`](crate::Channel::stats) returns a [`ChannelStats`](crate::ChannelStats) snapshot at any
//! time, without any recorder: calls started, succeeded and failed; attempts; per address
//! ([`ChannelStats::addresses`](crate::ChannelStats::addresses), an [`AddressStats`](crate::AddressStats)
//! each) the attempts it took, succeeded and failed (as channelz counts a subchannel's calls: the fields
//! are named `calls_*` but count attempts, so a retried call counts on every address it tried), its
//! connection's state and its health; per method gRFC A6's retry and hedging statistics; the addresses
//! outlier detection ejected and how often; the addresses health checking finds not serving; for xDS
//! channels the calls per cluster; and the request bytes committed calls still hold.
//!
//! ```
//! # async fn example(channel: grpc_channel::Channel) {
//! let stats = channel.stats();
//! for (address, figures) in &stats.addresses {
//!     println!(
//!         "{address}: {:?}, health {:?}, {} attempts, {} failed",
//!         figures.state, figures.health, figures.calls_started, figures.calls_failed
//!     );
//! }
//! # }
//! ```
