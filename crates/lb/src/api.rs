//! The public load-balancing policy API: a policy ([`LoadBalancer`]) and its builder
//! ([`LoadBalancerBuilder`]), which parses the policy's JSON config from a service config's
//! `loadBalancingConfig` ([`ParsedLbConfig`]) and builds the policy ([`BuildOptions`]).
//!
//! A policy is sans-IO like the rest of the crate: it receives the resolver's endpoints with its config
//! ([`PolicyUpdate`]), resolver errors, subchannel events and timers, with the time as `now` arguments,
//! and answers through its [`Subchannels`] registry, whose queue of [`crate::LbAction`]s the channel
//! drains: connect or disconnect a subchannel, re-resolve, publish a picker (which may be the policy's
//! own, [`crate::PickerSpec::Custom`]). Randomness comes from the registry's injected `grpc_base::Rng`. The
//! registry also carries the overlays the channel applies to every policy: outlier detection's ejections
//! and, when health checking is on and the policy asks for it ([`LoadBalancer::uses_health`]), health.
//!
//! The built-in policies (pick_first, round_robin, the xDS cluster manager) implement these traits too;
//! the names they and the user's policies are registered under are in `registry.rs`, and the wrapper the
//! channel drives every policy through (catching a policy's panic) is [`crate::LbPolicy`]. Not here: the
//! picker side (`picker.rs`, `pick.rs`).

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use grpc_base::{Address, Endpoint, Rng};

use crate::backoff::BackoffConfig;
use crate::pick_first::DEFAULT_ATTEMPT_DELAY;
use crate::state::{ConnectivityState, SubchannelId};
use crate::subchannel::Subchannels;

/// A policy's parsed configuration, as its builder made it from JSON ([`LoadBalancerBuilder::parse_config`]):
/// any type the policy reads back with [`ParsedLbConfig::downcast_ref`]. Cheap to clone.
#[derive(Clone)]
pub struct ParsedLbConfig(Arc<dyn Any + Send + Sync>);

impl ParsedLbConfig {
    /// Wraps a policy's configuration.
    pub fn new<T: Any + Send + Sync>(config: T) -> ParsedLbConfig {
        ParsedLbConfig(Arc::new(config))
    }

    /// The configuration, if it is a `T`.
    pub fn downcast_ref<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }

    /// An empty configuration (`()`), for policies that have none.
    pub fn empty() -> ParsedLbConfig {
        ParsedLbConfig::new(())
    }
}

impl fmt::Debug for ParsedLbConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ParsedLbConfig(..)")
    }
}

/// Why a builder rejected a policy's JSON config: the service config that carries it is invalid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LbConfigError {
    /// The config is not what the policy accepts.
    #[error("invalid {policy} config: {reason}")]
    Invalid {
        /// The policy's name.
        policy: String,
        /// What is wrong.
        reason: String,
    },
}

impl LbConfigError {
    /// `policy`'s config is invalid for `reason`.
    pub fn invalid(policy: impl Into<String>, reason: impl Into<String>) -> LbConfigError {
        LbConfigError::Invalid {
            policy: policy.into(),
            reason: reason.into(),
        }
    }
}

/// What a policy is built with: the connection backoff of its subchannels, the Happy Eyeballs delay
/// (pick_first) and the randomness it must use. [`BuildOptions::into_subchannels`] makes the registry
/// of subchannels a policy keeps.
#[non_exhaustive]
pub struct BuildOptions {
    /// The connection backoff of each subchannel (`doc/connection-backoff.md`).
    pub backoff: BackoffConfig,
    /// The Happy Eyeballs connection attempt delay (pick_first).
    pub attempt_delay: Duration,
    /// The policy's randomness (shuffles, random starts, backoff jitter).
    pub rng: Box<dyn Rng>,
}

impl BuildOptions {
    /// The default backoff and Happy Eyeballs delay, with `rng`.
    pub fn new(rng: Box<dyn Rng>) -> BuildOptions {
        BuildOptions {
            backoff: BackoffConfig::default(),
            attempt_delay: DEFAULT_ATTEMPT_DELAY,
            rng,
        }
    }

    /// With this connection backoff.
    pub fn with_backoff(mut self, backoff: BackoffConfig) -> BuildOptions {
        self.backoff = backoff;
        self
    }

    /// With this Happy Eyeballs delay.
    pub fn with_attempt_delay(mut self, delay: Duration) -> BuildOptions {
        self.attempt_delay = delay;
        self
    }

    /// A registry of subchannels with these options' backoff and randomness.
    pub fn into_subchannels(self) -> Subchannels {
        Subchannels::new(self.backoff, self.rng)
    }
}

impl fmt::Debug for BuildOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuildOptions")
            .field("backoff", &self.backoff)
            .field("attempt_delay", &self.attempt_delay)
            .finish_non_exhaustive()
    }
}

/// What the resolver gave a policy: its endpoints (each one or more addresses, with attributes) and the
/// policy's parsed config.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct PolicyUpdate<'a> {
    /// The endpoints, in the resolver's order.
    pub endpoints: &'a [Endpoint],
    /// The policy's config (from the service config's `loadBalancingConfig`, or its builder's default).
    pub config: &'a ParsedLbConfig,
}

impl<'a> PolicyUpdate<'a> {
    /// An update with these endpoints and config.
    pub fn new(endpoints: &'a [Endpoint], config: &'a ParsedLbConfig) -> PolicyUpdate<'a> {
        PolicyUpdate { endpoints, config }
    }

    /// Every address of every endpoint, in order (a policy that balances over addresses).
    pub fn addresses(&self) -> Vec<Address> {
        self.endpoints
            .iter()
            .flat_map(|e| e.addresses().iter().cloned())
            .collect()
    }
}

/// Makes a policy: registered under its name (`crate::register_policy`, or per channel), it parses the
/// policy's config from a service config's `loadBalancingConfig` and builds the policy when a resolution
/// selects it.
pub trait LoadBalancerBuilder: Send + Sync + 'static {
    /// The name a `loadBalancingConfig` entry selects the policy by, e.g. `"round_robin"`.
    fn name(&self) -> &str;

    /// Parses the policy's JSON config (the value of its `loadBalancingConfig` entry, when that entry is
    /// the one chosen: the first the client supports). An error makes the whole service config invalid (the
    /// channel keeps its last good one, gRFC A21); so does a panic, which the channel catches.
    fn parse_config(&self, config: &serde_json::Value) -> Result<ParsedLbConfig, LbConfigError>;

    /// The config used when the policy is selected without one (e.g. as a default).
    fn default_config(&self) -> ParsedLbConfig {
        ParsedLbConfig::empty()
    }

    /// A new policy. It has no endpoints until its first [`LoadBalancer::update`].
    fn build(&self, options: BuildOptions) -> Box<dyn LoadBalancer>;
}

/// A load-balancing policy, driven by the channel (sans-IO).
///
/// The channel calls it with the resolver's endpoints, subchannel events (ready, failed, closed) and its
/// timers, and drains the actions queued on its [`Subchannels`] registry after every call. A policy creates
/// subchannels in the registry ([`Subchannels::find_or_add`], [`Subchannels::sync`]), connects them
/// ([`Subchannels::connect`]: the channel makes the connection and reports back), removes them, and
/// publishes pickers ([`Subchannels::publish`]). Every call that may change what it shows should publish
/// (the channel publishes only the last picker of a batch).
///
/// The channel catches a policy's panic (its `Drop`'s and its pickers' included): the policy is then
/// dropped, its connections closed, and the channel goes TRANSIENT_FAILURE with an UNAVAILABLE
/// "load-balancing policy ... panicked" error; it asks the resolver to resolve again (ResolveNow, within
/// the resolver's rate limit), and the next resolution, even one identical to the last, builds a new
/// policy.
pub trait LoadBalancer: Send {
    /// New endpoints (and config) from the resolver.
    fn update(&mut self, update: PolicyUpdate<'_>, now: Instant);

    /// The resolver failed. A policy with endpoints usually keeps using them; the default does nothing.
    fn resolver_error(&mut self, error: &str, now: Instant) {
        let _ = (error, now);
    }

    /// A call found the policy IDLE: connect.
    fn exit_idle(&mut self, now: Instant);

    /// Subchannel `id` connected (the server's SETTINGS arrived). The registry's state is not updated yet:
    /// call [`Subchannels::ready`].
    fn subchannel_ready(&mut self, id: SubchannelId, now: Instant);

    /// Subchannel `id`'s connection attempt failed ([`Subchannels::failed`] records it).
    fn subchannel_failed(&mut self, id: SubchannelId, error: String, now: Instant);

    /// Subchannel `id`'s READY connection closed ([`Subchannels::closed`] records it).
    fn subchannel_closed(&mut self, id: SubchannelId, now: Instant);

    /// Outlier detection ejected `addr` or returned it: the registry already shows it
    /// ([`Subchannels::state`]); the policy should publish a picker that follows.
    fn ejection_changed(&mut self, addr: &Address, now: Instant);

    /// The outlier detection of the xDS cluster `cluster` (A50's xDS mapping) ejected `addr` from that
    /// cluster's picks (`ejected`), or returned it; other clusters and the registry are not affected.
    /// Only a policy with clusters (the xDS cluster manager) has anything to do: the default ignores it.
    fn cluster_ejection_changed(
        &mut self,
        cluster: &str,
        addr: &Address,
        ejected: bool,
        now: Instant,
    ) {
        let _ = (cluster, addr, ejected, now);
    }

    /// Health checking was turned on or off, or a subchannel's health changed (only for a policy that
    /// [`LoadBalancer::uses_health`]); the registry already shows it.
    fn health_changed(&mut self, now: Instant) {
        let _ = now;
    }

    /// Whether the policy uses health checking (gRFC A17) when the service config asks for it: the channel
    /// then runs a health Watch on each READY connection and reports answers through the registry. No by
    /// default (pick_first never health checks, A61).
    fn uses_health(&self) -> bool {
        false
    }

    /// When [`LoadBalancer::handle_timeout`] should be called next: the registry's timers by default.
    fn poll_timeout(&self) -> Option<Instant> {
        self.subchannels().poll_timeout()
    }

    /// Fires the timers due at `now` (the registry's: [`Subchannels::handle_timeout`]).
    fn handle_timeout(&mut self, now: Instant);

    /// The policy's connectivity state.
    fn state(&self) -> ConnectivityState;

    /// The policy's subchannels.
    fn subchannels(&self) -> &Subchannels;

    /// The policy's subchannels, to change.
    fn subchannels_mut(&mut self) -> &mut Subchannels;
}
