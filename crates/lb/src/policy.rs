//! [`LbPolicy`]: the policy a service config selects, behind one sans-IO interface: feed it address lists,
//! subchannel events and timers; drain its [`LbAction`]s; re-arm one timer.

use std::time::{Duration, Instant};

use grpc_base::{Address, Rng};

use crate::action::LbAction;
use crate::backoff::BackoffConfig;
use crate::health::Health;
use crate::pick_first::{PickFirst, DEFAULT_ATTEMPT_DELAY};
use crate::round_robin::RoundRobin;
use crate::state::{ConnectivityState, SubchannelId};
use crate::subchannel::Subchannels;
use crate::xds_clusters::XdsClusters;
use crate::xds_config::XdsClustersConfig;

/// Which policy, with its configuration.
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
    PickFirst(PickFirst),
    RoundRobin(RoundRobin),
    Xds(XdsClusters),
}

/// A load-balancing policy.
pub struct LbPolicy {
    config: PolicyConfig,
    inner: Inner,
}

impl std::fmt::Debug for LbPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LbPolicy")
            .field("config", &self.config)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

macro_rules! each {
    ($self:ident, $p:ident => $e:expr) => {
        match &mut $self.inner {
            Inner::PickFirst($p) => $e,
            Inner::RoundRobin($p) => $e,
            Inner::Xds($p) => $e,
        }
    };
}

impl LbPolicy {
    /// A policy with the default connection backoff and Happy Eyeballs delay.
    pub fn new(config: PolicyConfig, rng: Box<dyn Rng>) -> LbPolicy {
        LbPolicy::with(config, BackoffConfig::default(), DEFAULT_ATTEMPT_DELAY, rng)
    }

    /// A policy with explicit backoff parameters and Happy Eyeballs delay.
    pub fn with(
        config: PolicyConfig,
        backoff: BackoffConfig,
        attempt_delay: Duration,
        rng: Box<dyn Rng>,
    ) -> LbPolicy {
        let subs = Subchannels::new(backoff, rng);
        let inner = match config {
            PolicyConfig::PickFirst {
                shuffle_address_list,
            } => Inner::PickFirst(PickFirst::new(subs, shuffle_address_list, attempt_delay)),
            PolicyConfig::RoundRobin => Inner::RoundRobin(RoundRobin::new(subs)),
            PolicyConfig::XdsClusterManager => Inner::Xds(XdsClusters::new(subs)),
        };
        LbPolicy { config, inner }
    }

    /// The policy's configuration.
    pub fn config(&self) -> PolicyConfig {
        self.config
    }

    /// The policy's connectivity state.
    pub fn state(&self) -> ConnectivityState {
        match &self.inner {
            Inner::PickFirst(p) => p.state(),
            Inner::RoundRobin(p) => p.state(),
            Inner::Xds(p) => p.state(),
        }
    }

    /// A new address list from the resolver (ignored by the xDS cluster manager, which takes
    /// [`LbPolicy::update_clusters`]).
    pub fn update_addresses(&mut self, addresses: Vec<Address>, now: Instant) {
        each!(self, p => p.update(addresses, now))
    }

    /// A new cluster configuration for the xDS cluster manager: clusters, priorities, localities,
    /// endpoints, drops and circuit-breaking limits. The subchannels (and connections) of addresses still
    /// present stay. Returns false, doing nothing, if this policy is not the xDS cluster manager.
    pub fn update_clusters(&mut self, config: XdsClustersConfig, now: Instant) -> bool {
        match &mut self.inner {
            Inner::Xds(p) => {
                p.update_clusters(config, now);
                true
            }
            Inner::PickFirst(_) | Inner::RoundRobin(_) => false,
        }
    }

    /// A call found the policy IDLE: connect.
    pub fn exit_idle(&mut self, now: Instant) {
        each!(self, p => p.exit_idle(now))
    }

    /// Subchannel `id` connected and the server's SETTINGS arrived.
    pub fn subchannel_ready(&mut self, id: SubchannelId, now: Instant) {
        each!(self, p => p.subchannel_ready(id, now))
    }

    /// Subchannel `id`'s connection attempt failed.
    pub fn subchannel_failed(&mut self, id: SubchannelId, error: String, now: Instant) {
        each!(self, p => p.subchannel_failed(id, error, now))
    }

    /// Subchannel `id`'s READY connection closed (GOAWAY, error, EOF).
    pub fn subchannel_closed(&mut self, id: SubchannelId, now: Instant) {
        each!(self, p => p.subchannel_closed(id, now))
    }

    /// Outlier detection (gRFC A50) ejected `addr`: its subchannel looks TRANSIENT_FAILURE to the policy
    /// (round_robin stops picking it, pick_first treats it as failed) while its connection stays open, and a
    /// subchannel created for it later starts ejected. Nothing happens if it is ejected already.
    pub fn eject(&mut self, addr: &Address, now: Instant) {
        if each!(self, p => p.subs.set_ejected(addr, true)) {
            each!(self, p => p.ejection_changed(addr, now))
        }
    }

    /// `addr` is back from ejection: its subchannel shows its real state again.
    pub fn uneject(&mut self, addr: &Address, now: Instant) {
        if each!(self, p => p.subs.set_ejected(addr, false)) {
            each!(self, p => p.ejection_changed(addr, now))
        }
    }

    /// Whether `addr` is ejected.
    pub fn is_ejected(&self, addr: &Address) -> bool {
        match &self.inner {
            Inner::PickFirst(p) => p.subs.is_address_ejected(addr),
            Inner::RoundRobin(p) => p.subs.is_address_ejected(addr),
            Inner::Xds(p) => p.subs.is_address_ejected(addr),
        }
    }

    /// Turns client-side health checking (gRFC A17) on or off: on when the service config has a
    /// `healthCheckConfig` and nothing local vetoes it. Only round_robin uses it (A61: a top-level
    /// pick_first never health checks, so this does nothing there; see [`LbPolicy::health_checking`]). On,
    /// a READY subchannel takes picks only once [`LbPolicy::set_health`] said [`Health::Serving`]. A new
    /// policy starts with it off.
    pub fn set_health_checking(&mut self, enabled: bool, _now: Instant) {
        if let Inner::RoundRobin(p) = &mut self.inner {
            if p.subs.set_health_checking(enabled) {
                p.health_changed();
            }
        }
    }

    /// Whether this policy health checks its subchannels, i.e. whether the channel should run a health
    /// Watch on each READY connection and report it with [`LbPolicy::set_health`]: round_robin with health
    /// checking on; never pick_first nor (not yet) the xDS cluster manager.
    pub fn health_checking(&self) -> bool {
        match &self.inner {
            Inner::PickFirst(_) | Inner::Xds(_) => false,
            Inner::RoundRobin(p) => p.subs.health_checking(),
        }
    }

    /// The health Watch on `addr`'s READY connection answered `health`. With health checking on, a READY
    /// subchannel that is not [`Health::Serving`] looks CONNECTING ([`Health::Unknown`]) or
    /// TRANSIENT_FAILURE ([`Health::NotServing`]) to round_robin, which stops picking it and keeps its
    /// connection. Ignored if `addr` has no READY subchannel (an answer from a connection already lost);
    /// health goes back to [`Health::Unknown`] by itself when the connection is lost or a new one is READY.
    pub fn set_health(&mut self, addr: &Address, health: Health, _now: Instant) {
        let changed = each!(self, p => p.subs.set_health(addr, health));
        if let (true, Inner::RoundRobin(p)) = (changed, &mut self.inner) {
            p.health_changed();
        }
    }

    /// The health of `addr`'s subchannel's current connection ([`Health::Unknown`] unless READY and
    /// answered; `None` without a subchannel for `addr`).
    pub fn health(&self, addr: &Address) -> Option<Health> {
        match &self.inner {
            Inner::PickFirst(p) => p.subs.health(addr),
            Inner::RoundRobin(p) => p.subs.health(addr),
            Inner::Xds(p) => p.subs.health(addr),
        }
    }

    /// When to call [`LbPolicy::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.inner {
            Inner::PickFirst(p) => p.poll_timeout(),
            Inner::RoundRobin(p) => p.poll_timeout(),
            Inner::Xds(p) => p.poll_timeout(),
        }
    }

    /// Fires the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        each!(self, p => p.handle_timeout(now))
    }

    /// The next action, until `None`.
    pub fn poll_action(&mut self) -> Option<LbAction> {
        each!(self, p => p.subs.out.pop_front())
    }

    /// The state of subchannel `id` as the policy sees it: TRANSIENT_FAILURE while ejected; with health
    /// checking on, CONNECTING or TRANSIENT_FAILURE while READY but not [`Health::Serving`] (SHUTDOWN once
    /// removed).
    pub fn subchannel_state(&self, id: SubchannelId) -> ConnectivityState {
        match &self.inner {
            Inner::PickFirst(p) => p.subs.state(id),
            Inner::RoundRobin(p) => p.subs.state(id),
            Inner::Xds(p) => p.subs.state(id),
        }
    }

    /// Every subchannel with its address and state.
    pub fn subchannels(&self) -> Vec<(SubchannelId, Address, ConnectivityState)> {
        let subs = match &self.inner {
            Inner::PickFirst(p) => &p.subs,
            Inner::RoundRobin(p) => &p.subs,
            Inner::Xds(p) => &p.subs,
        };
        subs.iter()
            .map(|s| (s.id, s.addr.clone(), s.state))
            .collect()
    }
}
