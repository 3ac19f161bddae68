//! [`LbPolicy`]: how the channel drives any policy, built-in or the user's: a [`LoadBalancer`] trait object
//! made by its builder, fed endpoints, subchannel events and timers, with the overlays every policy shares
//! applied on its [`Subchannels`] (outlier detection's ejections, health), and a panic in the policy's
//! code caught: the policy is then gone and the channel fails its calls with an UNAVAILABLE
//! "load-balancing policy ... panicked" until a new one is built.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use grpc_base::{Address, Endpoint, Rng};

use crate::action::LbAction;
use crate::api::{BuildOptions, LoadBalancer, LoadBalancerBuilder, ParsedLbConfig, PolicyUpdate};
use crate::backoff::BackoffConfig;
use crate::builtins::{
    PickFirstBuilder, PickFirstConfig, RoundRobinBuilder, XdsClusterManagerBuilder,
    XDS_CLUSTER_MANAGER,
};
use crate::health::Health;
use crate::panics::{drop_caught, panic_message};
use crate::pick_first::DEFAULT_ATTEMPT_DELAY;
use crate::picker::PickerSpec;
use crate::state::{ConnectivityState, SubchannelId};
use crate::xds_config::XdsClustersConfig;

/// Which built-in policy, with its configuration (a shorthand for building one through its builder).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyConfig {
    /// pick_first.
    PickFirst {
        /// A62 `shuffleAddressList`.
        shuffle_address_list: bool,
    },
    /// round_robin.
    RoundRobin,
    /// The xDS cluster manager (priorities of weighted localities per cluster, `xds_clusters.rs`): its
    /// clusters and addresses come from [`LbPolicy::update_clusters`], not from address lists.
    XdsClusterManager,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig::PickFirst {
            shuffle_address_list: false,
        }
    }
}

enum Inner {
    Running(Box<dyn LoadBalancer>),
    /// The policy panicked and was dropped: what is left to tell the channel.
    Panicked {
        message: String,
        out: VecDeque<LbAction>,
    },
}

/// A load-balancing policy as the channel drives it.
pub struct LbPolicy {
    name: String,
    /// The config the last update carried (used again by [`LbPolicy::update_addresses`]).
    config: ParsedLbConfig,
    inner: Inner,
}

impl std::fmt::Debug for LbPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LbPolicy")
            .field("name", &self.name)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl LbPolicy {
    /// A built-in policy with the default connection backoff and Happy Eyeballs delay.
    pub fn new(config: PolicyConfig, rng: Box<dyn Rng>) -> LbPolicy {
        LbPolicy::with(config, BackoffConfig::default(), DEFAULT_ATTEMPT_DELAY, rng)
    }

    /// A built-in policy with explicit backoff parameters and Happy Eyeballs delay.
    pub fn with(
        config: PolicyConfig,
        backoff: BackoffConfig,
        attempt_delay: Duration,
        rng: Box<dyn Rng>,
    ) -> LbPolicy {
        let options = BuildOptions::new(rng)
            .with_backoff(backoff)
            .with_attempt_delay(attempt_delay);
        match config {
            PolicyConfig::PickFirst {
                shuffle_address_list,
            } => LbPolicy::build(
                &PickFirstBuilder,
                ParsedLbConfig::new(PickFirstConfig::new(shuffle_address_list)),
                options,
            ),
            PolicyConfig::RoundRobin => {
                LbPolicy::build(&RoundRobinBuilder, ParsedLbConfig::empty(), options)
            }
            PolicyConfig::XdsClusterManager => {
                LbPolicy::build(&XdsClusterManagerBuilder, ParsedLbConfig::empty(), options)
            }
        }
    }

    /// Builds the policy of `builder`, whose updates carry `config` until another is given. A panic in
    /// the builder makes a policy that failed ([`LbPolicy::panicked`]).
    pub fn build(
        builder: &dyn LoadBalancerBuilder,
        config: ParsedLbConfig,
        options: BuildOptions,
    ) -> LbPolicy {
        let name = builder.name().to_owned();
        let inner = match catch_unwind(AssertUnwindSafe(|| builder.build(options))) {
            Ok(policy) => Inner::Running(policy),
            Err(panic) => Inner::Panicked {
                message: String::new(),
                out: VecDeque::new(),
            }
            .failed(&name, panic.as_ref()),
        };
        LbPolicy {
            name,
            config,
            inner,
        }
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// If the policy panicked, the error the channel fails calls with (the policy is gone).
    pub fn panicked(&self) -> Option<&str> {
        match &self.inner {
            Inner::Running(_) => None,
            Inner::Panicked { message, .. } => Some(message),
        }
    }

    /// Runs `f` on the policy, unless it panicked before; a panic now drops it.
    fn call<R: Default>(&mut self, f: impl FnOnce(&mut dyn LoadBalancer) -> R) -> R {
        let Inner::Running(policy) = &mut self.inner else {
            return R::default();
        };
        match catch_unwind(AssertUnwindSafe(|| f(policy.as_mut()))) {
            Ok(r) => r,
            Err(panic) => {
                let failed = Inner::Panicked {
                    message: String::new(),
                    out: VecDeque::new(),
                }
                .failed(&self.name, panic.as_ref());
                let old = std::mem::replace(&mut self.inner, failed);
                // Dropping the policy may panic too: that is caught and forgotten.
                drop_caught(old);
                R::default()
            }
        }
    }

    /// Reads the policy (`default` if it panicked before or panics now, without dropping it: a read
    /// changes nothing).
    fn read<R>(&self, default: R, f: impl FnOnce(&dyn LoadBalancer) -> R) -> R {
        match &self.inner {
            Inner::Running(policy) => {
                catch_unwind(AssertUnwindSafe(|| f(policy.as_ref()))).unwrap_or(default)
            }
            Inner::Panicked { .. } => default,
        }
    }

    /// The policy's connectivity state (TRANSIENT_FAILURE once it panicked).
    pub fn state(&self) -> ConnectivityState {
        self.read(ConnectivityState::TransientFailure, |p| p.state())
    }

    /// New endpoints from the resolver, with the policy's config (kept for later updates).
    pub fn update(&mut self, endpoints: &[Endpoint], config: ParsedLbConfig, now: Instant) {
        self.config = config;
        let config = self.config.clone();
        self.call(|p| p.update(PolicyUpdate::new(endpoints, &config), now));
    }

    /// A new address list from the resolver, one endpoint per address, with the last config (ignored by
    /// the xDS cluster manager, which takes [`LbPolicy::update_clusters`]).
    pub fn update_addresses(&mut self, addresses: Vec<Address>, now: Instant) {
        if self.name == XDS_CLUSTER_MANAGER {
            return;
        }
        let endpoints: Vec<Endpoint> = addresses.into_iter().map(Endpoint::new).collect();
        let config = self.config.clone();
        self.call(|p| p.update(PolicyUpdate::new(&endpoints, &config), now));
    }

    /// The resolver failed.
    pub fn resolver_error(&mut self, error: &str, now: Instant) {
        self.call(|p| p.resolver_error(error, now));
    }

    /// A new cluster configuration for the xDS cluster manager: clusters, priorities, localities,
    /// endpoints, drops and circuit-breaking limits. The subchannels (and connections) of addresses still
    /// present stay. Returns false, doing nothing, if this policy is not the xDS cluster manager.
    pub fn update_clusters(&mut self, config: XdsClustersConfig, now: Instant) -> bool {
        if self.name != XDS_CLUSTER_MANAGER {
            return false;
        }
        self.update(&[], ParsedLbConfig::new(config), now);
        true
    }

    /// A call found the policy IDLE: connect.
    pub fn exit_idle(&mut self, now: Instant) {
        self.call(|p| p.exit_idle(now));
    }

    /// Subchannel `id` connected and the server's SETTINGS arrived.
    pub fn subchannel_ready(&mut self, id: SubchannelId, now: Instant) {
        self.call(|p| p.subchannel_ready(id, now));
    }

    /// Subchannel `id`'s connection attempt failed.
    pub fn subchannel_failed(&mut self, id: SubchannelId, error: String, now: Instant) {
        self.call(|p| p.subchannel_failed(id, error, now));
    }

    /// Subchannel `id`'s READY connection closed (GOAWAY, error, EOF).
    pub fn subchannel_closed(&mut self, id: SubchannelId, now: Instant) {
        self.call(|p| p.subchannel_closed(id, now));
    }

    /// Outlier detection (gRFC A50) ejected `addr`: its subchannel looks TRANSIENT_FAILURE to the policy
    /// (round_robin stops picking it, pick_first treats it as failed) while its connection stays open, and a
    /// subchannel created for it later starts ejected. Nothing happens if it is ejected already.
    pub fn eject(&mut self, addr: &Address, now: Instant) {
        self.call(|p| {
            if p.subchannels_mut().set_ejected(addr, true) {
                p.ejection_changed(addr, now);
            }
        });
    }

    /// `addr` is back from ejection: its subchannel shows its real state again.
    pub fn uneject(&mut self, addr: &Address, now: Instant) {
        self.call(|p| {
            if p.subchannels_mut().set_ejected(addr, false) {
                p.ejection_changed(addr, now);
            }
        });
    }

    /// The outlier detection of the xDS cluster `cluster` ejected `addr` from that cluster's picks
    /// (`ejected`), or returned it: the subchannel stays connected and other clusters keep picking it
    /// (A50's xDS mapping, one detector per cluster). Ignored by policies without clusters.
    pub fn set_ejected_in_cluster(
        &mut self,
        cluster: &str,
        addr: &Address,
        ejected: bool,
        now: Instant,
    ) {
        self.call(|p| p.cluster_ejection_changed(cluster, addr, ejected, now));
    }

    /// Whether `addr` is ejected.
    pub fn is_ejected(&self, addr: &Address) -> bool {
        self.read(false, |p| p.subchannels().is_address_ejected(addr))
    }

    /// Turns client-side health checking (gRFC A17) on or off: on when the service config has a
    /// `healthCheckConfig` and nothing local vetoes it. Only a policy that uses health does anything
    /// ([`LoadBalancer::uses_health`]: round_robin; A61: a top-level pick_first never health checks; see
    /// [`LbPolicy::health_checking`]). On, a READY subchannel takes picks only once
    /// [`LbPolicy::set_health`] said [`Health::Serving`]. A new policy starts with it off.
    pub fn set_health_checking(&mut self, enabled: bool, now: Instant) {
        self.call(|p| {
            if p.uses_health() && p.subchannels_mut().set_health_checking(enabled) {
                p.health_changed(now);
            }
        });
    }

    /// Whether this policy runs health checking (gRFC A17) when the service config asks for it
    /// ([`LoadBalancer::uses_health`]: round_robin does; pick_first never does, A61). The channel warns
    /// when a config asks for health checking under a policy that does not.
    pub fn uses_health(&self) -> bool {
        self.read(false, |p| p.uses_health())
    }

    /// Whether this policy health checks its subchannels, i.e. whether the channel should run a health
    /// Watch on each READY connection and report it with [`LbPolicy::set_health`]: a policy that uses
    /// health (round_robin) with health checking on; never pick_first nor (not yet) the xDS cluster manager.
    pub fn health_checking(&self) -> bool {
        self.read(false, |p| {
            p.uses_health() && p.subchannels().health_checking()
        })
    }

    /// The health Watch on `addr`'s READY connection answered `health`. With health checking on, a READY
    /// subchannel that is not [`Health::Serving`] looks CONNECTING ([`Health::Unknown`]) or
    /// TRANSIENT_FAILURE ([`Health::NotServing`]) to the policy, which stops picking it and keeps its
    /// connection. Ignored if `addr` has no READY subchannel (an answer from a connection already lost);
    /// health goes back to [`Health::Unknown`] by itself when the connection is lost or a new one is READY.
    pub fn set_health(&mut self, addr: &Address, health: Health, now: Instant) {
        self.call(|p| {
            if p.subchannels_mut().set_health(addr, health) && p.uses_health() {
                p.health_changed(now);
            }
        });
    }

    /// The health of `addr`'s subchannel's current connection ([`Health::Unknown`] unless READY and
    /// answered; `None` without a subchannel for `addr`).
    pub fn health(&self, addr: &Address) -> Option<Health> {
        self.read(None, |p| p.subchannels().health(addr))
    }

    /// When to call [`LbPolicy::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.read(None, |p| p.poll_timeout())
    }

    /// Fires the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.call(|p| p.handle_timeout(now));
    }

    /// The next action, until `None`. A custom picker's list carries each subchannel's own address (the
    /// one its connection is made to), whatever address the policy paired with its id.
    pub fn poll_action(&mut self) -> Option<LbAction> {
        match &mut self.inner {
            Inner::Running(_) => self.call(|p| {
                let action = p.subchannels_mut().poll_action();
                match action {
                    Some(LbAction::UpdatePicker {
                        state,
                        picker: PickerSpec::Custom(custom),
                    }) => {
                        let subs = p.subchannels();
                        let custom =
                            custom.with_addresses(|id| subs.get(id).map(|s| s.address().clone()));
                        Some(LbAction::UpdatePicker {
                            state,
                            picker: PickerSpec::Custom(custom),
                        })
                    }
                    other => other,
                }
            }),
            Inner::Panicked { out, .. } => out.pop_front(),
        }
    }

    /// The state of subchannel `id` as the policy sees it: TRANSIENT_FAILURE while ejected; with health
    /// checking on, CONNECTING or TRANSIENT_FAILURE while READY but not [`Health::Serving`] (SHUTDOWN once
    /// removed).
    pub fn subchannel_state(&self, id: SubchannelId) -> ConnectivityState {
        self.read(ConnectivityState::Shutdown, |p| p.subchannels().state(id))
    }

    /// Every subchannel with its address and state.
    pub fn subchannels(&self) -> Vec<(SubchannelId, Address, ConnectivityState)> {
        self.read(Vec::new(), |p| {
            p.subchannels()
                .iter()
                .map(|s| (s.id, s.addr.clone(), s.state))
                .collect()
        })
    }
}

/// A policy's `Drop` is the application's code too: a panic in it (on a policy switch, when the channel
/// goes IDLE or closes) is caught and forgotten, never the channel's event loop's.
impl Drop for LbPolicy {
    fn drop(&mut self) {
        let gone = Inner::Panicked {
            message: String::new(),
            out: VecDeque::new(),
        };
        if let Inner::Running(policy) = std::mem::replace(&mut self.inner, gone) {
            drop_caught(policy);
        }
    }
}

impl Inner {
    /// The state after the policy `name` panicked with `payload`: a failing picker queued for the channel.
    fn failed(self, name: &str, payload: &(dyn std::any::Any + Send)) -> Inner {
        let message = format!(
            "load-balancing policy {name:?} panicked: {}",
            panic_message(payload)
        );
        let mut out = VecDeque::new();
        out.push_back(LbAction::UpdatePicker {
            state: ConnectivityState::TransientFailure,
            picker: PickerSpec::Fail(message.clone()),
        });
        Inner::Panicked { message, out }
    }
}
