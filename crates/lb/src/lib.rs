//! Sans-IO gRPC load balancing: subchannel connectivity with connection backoff
//! (`doc/connection-backoff.md`), the pick_first (gRFC A62, A61, Happy Eyeballs) and round_robin policies,
//! pickers that can steer a call's retries and hedges away from the addresses it already used, and the
//! decisions of outlier detection (gRFC A50: [`OutlierDetector`], which says which addresses to eject and
//! when; the channel does the ejecting), and the health overlay of client-side health checking (gRFC A17:
//! [`Health`], reported with [`LbPolicy::set_health`]; round_robin uses it, pick_first does not).
//!
//! Policies are pluggable: a policy implements [`LoadBalancer`] and its builder [`LoadBalancerBuilder`]
//! (which parses its `loadBalancingConfig` JSON), registered by name process-wide ([`register_policy`]) or
//! per channel ([`PolicyRegistry`]). It keeps its subchannels in a [`Subchannels`] registry (connection
//! backoff, the ejection and health overlays) and may publish its own picker
//! ([`PickerSpec::Custom`], a [`SubchannelPicker`] whose picks can hand the call a [`PickGuard`]). The
//! built-ins are written with the same pieces and found by name the same way ([`builtin_policy`]).
//!
//! The channel drives every policy through an [`LbPolicy`] (which catches a policy's panic): it feeds endpoints, subchannel events (ready, failed, closed) and
//! timers, and performs the [`LbAction`]s (connect, disconnect, re-resolve, publish a picker). Time arrives
//! as `now` arguments and randomness through an injected `grpc_base::Rng`. This crate knows nothing of
//! retries: it only honours the avoid hint of a [`PickRequest`]. Not here: the channel's event loop and
//! connections (the `grpc-channel` crate), the subchannels and picker of outlier detection (which the channel
//! builds around an [`OutlierDetector`]), the health Watch streams (the channel runs them).
//!
//! An event costs every policy O(log n) in the number of its subchannels (looked up by id or address,
//! timers kept in deadline order, only the subchannels the event changed read again), apart from a new
//! picker, built whole when what picks see changed (`scale_tests.rs` checks it at 1,000 to 4,000
//! endpoints).
//!
//! For channels fed by xDS, [`PolicyConfig::XdsClusterManager`] is a third policy: per cluster
//! ([`XdsClustersConfig`]), priorities (gRFC A56) of weighted localities (A28) whose endpoints are
//! round_robin leaves, or a ring_hash (A42, [`ClusterLbConfig::RingHash`]) over each priority's endpoints,
//! over one shared subchannel per address; its picker dispatches on the call's cluster
//! ([`PickRequest::cluster`]) and applies EDS drops and circuit breaking (A32, [`BreakerClaim`]).

// Unit tests read the clock: they stand in for grpc-channel (clippy.toml bans it in the library).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod action;
mod api;
mod backoff;
mod builtins;
mod cluster_picker;
mod ejections;
mod health;
mod outlier_detection;
mod outlier_scopes;
mod panics;
mod pick;
mod pick_first;
mod picker;
mod policy;
mod priority;
mod registry;
mod ring_hash;
mod ring_pick;
mod round_robin;
mod state;
mod subchannel;
mod transport;
mod weighted_target;
mod work;
mod xds_clusters;
mod xds_config;

#[cfg(test)]
mod api_tests;
#[cfg(test)]
mod incremental_tests;
#[cfg(test)]
mod outlier_scopes_tests;
#[cfg(test)]
mod ring_hash_tests;
#[cfg(test)]
mod scale_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod xds_tests;

pub use action::{LbAction, TimerEvent};
pub use api::{
    BuildOptions, LbConfigError, LoadBalancer, LoadBalancerBuilder, ParsedLbConfig, PolicyUpdate,
};
pub use backoff::{BackoffConfig, ConnectionBackoff};
pub use builtins::{
    PickFirstBuilder, PickFirstConfig, RoundRobinBuilder, XdsClusterManagerBuilder, PICK_FIRST,
    ROUND_ROBIN, XDS_CLUSTER_MANAGER,
};
pub use cluster_picker::{ClusterPick, ClusterPickerSpec, ReadyLocality};
pub use grpc_base::Address;
pub use grpc_base::{AttributeValue, Attributes, Endpoint, Rng};
pub use health::{health_of_serving_status, Health, WatchEnd, WatchNext, WatchRetry};
pub use outlier_detection::{
    AddressStats, CallCounts, EjectionCause, FailurePercentageEjection, NotEjected,
    NotEjectedReason, OutlierDetectionConfig, OutlierDetector, OutlierEvent, Percentage,
    SuccessRateEjection, UnejectReason, MIN_SWEEP_INTERVAL,
};
pub use outlier_scopes::{OutlierDetectors, OutlierScope, ScopedEjection};
pub use pick::{BreakerClaim, InFlightCounter, PickGuard, PickRequest, PickResult};
pub use pick_first::{interleave_families, DEFAULT_ATTEMPT_DELAY};
pub use picker::{CustomPick, CustomPicker, Picker, PickerSpec, SubchannelPicker};
pub use policy::{LbPolicy, PolicyConfig};
pub use priority::{DEACTIVATION_RETENTION, FAILOVER_TIMEOUT};
pub use registry::{builtin_policy, register_policy, PolicyRegistry};
pub use ring_hash::{xxh64, RING_SIZE_CAP};
pub use ring_pick::RingPick;
pub use state::{ConnectivityState, SubchannelId};
pub use subchannel::{Subchannel, Subchannels};
pub use transport::TransportKey;
pub use xds_config::{
    ClusterConfig, ClusterLbConfig, DropOverload, LocalityConfig, PriorityConfig,
    XdsClustersConfig, DEFAULT_MAX_REQUESTS, MILLION,
};
