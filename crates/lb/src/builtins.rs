//! The built-in policies behind the public API: their builders ([`PickFirstBuilder`], [`RoundRobinBuilder`],
//! [`XdsClusterManagerBuilder`]), their configs, and their [`LoadBalancer`] implementations, which hand
//! each call to the policy's own code (`pick_first.rs`, `round_robin.rs`, `xds_clusters.rs`). The channel
//! finds them by name in the registry (`registry.rs`) like any user policy.
//!
//! Not here: outlier detection and health checking, which are overlays on any policy's [`Subchannels`]
//! that the channel applies (through [`crate::LbPolicy`]), not policies of their own.

use std::time::Instant;

use grpc_base::Address;

use crate::api::{
    BuildOptions, LbConfigError, LoadBalancer, LoadBalancerBuilder, ParsedLbConfig, PolicyUpdate,
};
use crate::pick_first::PickFirst;
use crate::round_robin::RoundRobin;
use crate::state::{ConnectivityState, SubchannelId};
use crate::subchannel::Subchannels;
use crate::xds_clusters::XdsClusters;
use crate::xds_config::XdsClustersConfig;

/// pick_first's name.
pub const PICK_FIRST: &str = "pick_first";
/// round_robin's name.
pub const ROUND_ROBIN: &str = "round_robin";
/// The xDS cluster manager's name. It is configured by the xDS resolver (its parsed config is an
/// [`XdsClustersConfig`]), never by a service config's JSON.
pub const XDS_CLUSTER_MANAGER: &str = "xds_cluster_manager_experimental";

/// pick_first's config (gRFC A62).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PickFirstConfig {
    /// `shuffleAddressList`: shuffle the address list before connecting.
    pub shuffle_address_list: bool,
}

impl PickFirstConfig {
    /// A config that shuffles the address list or not.
    pub fn new(shuffle_address_list: bool) -> PickFirstConfig {
        PickFirstConfig {
            shuffle_address_list,
        }
    }
}

/// Builds pick_first (gRFC A62, A61, Happy Eyeballs): config `{"shuffleAddressList": bool}`.
#[derive(Clone, Copy, Debug, Default)]
pub struct PickFirstBuilder;

impl LoadBalancerBuilder for PickFirstBuilder {
    fn name(&self) -> &str {
        PICK_FIRST
    }

    fn parse_config(&self, config: &serde_json::Value) -> Result<ParsedLbConfig, LbConfigError> {
        let obj = config
            .as_object()
            .ok_or_else(|| LbConfigError::invalid(PICK_FIRST, "not a JSON object"))?;
        let shuffle = match obj.get("shuffleAddressList") {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Bool(b)) => *b,
            Some(_) => {
                return Err(LbConfigError::invalid(
                    PICK_FIRST,
                    "shuffleAddressList is not a boolean",
                ))
            }
        };
        Ok(ParsedLbConfig::new(PickFirstConfig::new(shuffle)))
    }

    fn default_config(&self) -> ParsedLbConfig {
        ParsedLbConfig::new(PickFirstConfig::default())
    }

    fn build(&self, options: BuildOptions) -> Box<dyn LoadBalancer> {
        let delay = options.attempt_delay;
        Box::new(PickFirst::new(options.into_subchannels(), false, delay))
    }
}

/// Builds round_robin: config `{}`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RoundRobinBuilder;

impl LoadBalancerBuilder for RoundRobinBuilder {
    fn name(&self) -> &str {
        ROUND_ROBIN
    }

    fn parse_config(&self, config: &serde_json::Value) -> Result<ParsedLbConfig, LbConfigError> {
        match config {
            serde_json::Value::Object(_) => Ok(ParsedLbConfig::empty()),
            _ => Err(LbConfigError::invalid(ROUND_ROBIN, "not a JSON object")),
        }
    }

    fn build(&self, options: BuildOptions) -> Box<dyn LoadBalancer> {
        Box::new(RoundRobin::new(options.into_subchannels()))
    }
}

/// Builds the xDS cluster manager (priorities of weighted localities per cluster, ring_hash, EDS drops,
/// circuit breaking). Its config is the xDS resolver's [`XdsClustersConfig`], given in each
/// [`PolicyUpdate`] as a [`ParsedLbConfig`]; a service config cannot configure it.
#[derive(Clone, Copy, Debug, Default)]
pub struct XdsClusterManagerBuilder;

impl LoadBalancerBuilder for XdsClusterManagerBuilder {
    fn name(&self) -> &str {
        XDS_CLUSTER_MANAGER
    }

    fn parse_config(&self, _config: &serde_json::Value) -> Result<ParsedLbConfig, LbConfigError> {
        Err(LbConfigError::invalid(
            XDS_CLUSTER_MANAGER,
            "configured by the xDS resolver only",
        ))
    }

    fn build(&self, options: BuildOptions) -> Box<dyn LoadBalancer> {
        Box::new(XdsClusters::new(options.into_subchannels()))
    }
}

impl LoadBalancer for PickFirst {
    fn update(&mut self, update: PolicyUpdate<'_>, now: Instant) {
        let shuffle = update
            .config
            .downcast_ref::<PickFirstConfig>()
            .is_some_and(|c| c.shuffle_address_list);
        self.set_shuffle(shuffle);
        PickFirst::update(self, update.addresses(), now);
    }

    fn exit_idle(&mut self, now: Instant) {
        PickFirst::exit_idle(self, now);
    }

    fn subchannel_ready(&mut self, id: SubchannelId, now: Instant) {
        PickFirst::subchannel_ready(self, id, now);
    }

    fn subchannel_failed(&mut self, id: SubchannelId, error: String, now: Instant) {
        PickFirst::subchannel_failed(self, id, error, now);
    }

    fn subchannel_closed(&mut self, id: SubchannelId, now: Instant) {
        PickFirst::subchannel_closed(self, id, now);
    }

    fn ejection_changed(&mut self, addr: &Address, now: Instant) {
        PickFirst::ejection_changed(self, addr, now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        PickFirst::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Instant) {
        PickFirst::handle_timeout(self, now);
    }

    fn state(&self) -> ConnectivityState {
        PickFirst::state(self)
    }

    fn subchannels(&self) -> &Subchannels {
        &self.subs
    }

    fn subchannels_mut(&mut self) -> &mut Subchannels {
        &mut self.subs
    }
}

impl LoadBalancer for RoundRobin {
    fn update(&mut self, update: PolicyUpdate<'_>, now: Instant) {
        // A61: one backend per endpoint, which uses its addresses in order.
        let endpoints = update
            .endpoints
            .iter()
            .map(|e| e.addresses().to_vec())
            .collect();
        RoundRobin::update(self, endpoints, now);
    }

    fn exit_idle(&mut self, now: Instant) {
        RoundRobin::exit_idle(self, now);
    }

    fn subchannel_ready(&mut self, id: SubchannelId, now: Instant) {
        RoundRobin::subchannel_ready(self, id, now);
    }

    fn subchannel_failed(&mut self, id: SubchannelId, error: String, now: Instant) {
        RoundRobin::subchannel_failed(self, id, error, now);
    }

    fn subchannel_closed(&mut self, id: SubchannelId, now: Instant) {
        RoundRobin::subchannel_closed(self, id, now);
    }

    fn ejection_changed(&mut self, addr: &Address, now: Instant) {
        RoundRobin::ejection_changed(self, addr, now);
    }

    fn health_changed(&mut self, _now: Instant) {
        RoundRobin::health_changed(self);
    }

    fn uses_health(&self) -> bool {
        true
    }

    fn poll_timeout(&self) -> Option<Instant> {
        RoundRobin::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Instant) {
        RoundRobin::handle_timeout(self, now);
    }

    fn state(&self) -> ConnectivityState {
        RoundRobin::state(self)
    }

    fn subchannels(&self) -> &Subchannels {
        &self.subs
    }

    fn subchannels_mut(&mut self) -> &mut Subchannels {
        &mut self.subs
    }
}

impl LoadBalancer for XdsClusters {
    /// The endpoints are not used: the clusters' endpoints come with the config.
    fn update(&mut self, update: PolicyUpdate<'_>, now: Instant) {
        if let Some(config) = update.config.downcast_ref::<XdsClustersConfig>() {
            self.update_clusters(config.clone(), now);
        }
    }

    fn exit_idle(&mut self, now: Instant) {
        XdsClusters::exit_idle(self, now);
    }

    fn subchannel_ready(&mut self, id: SubchannelId, now: Instant) {
        XdsClusters::subchannel_ready(self, id, now);
    }

    fn subchannel_failed(&mut self, id: SubchannelId, error: String, now: Instant) {
        XdsClusters::subchannel_failed(self, id, error, now);
    }

    fn subchannel_closed(&mut self, id: SubchannelId, now: Instant) {
        XdsClusters::subchannel_closed(self, id, now);
    }

    fn ejection_changed(&mut self, addr: &Address, now: Instant) {
        XdsClusters::ejection_changed(self, addr, now);
    }

    fn cluster_ejection_changed(
        &mut self,
        cluster: &str,
        addr: &Address,
        ejected: bool,
        now: Instant,
    ) {
        XdsClusters::cluster_ejection_changed(self, cluster, addr, ejected, now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        XdsClusters::poll_timeout(self)
    }

    fn handle_timeout(&mut self, now: Instant) {
        XdsClusters::handle_timeout(self, now);
    }

    fn state(&self) -> ConnectivityState {
        XdsClusters::state(self)
    }

    fn subchannels(&self) -> &Subchannels {
        &self.subs
    }

    fn subchannels_mut(&mut self) -> &mut Subchannels {
        &mut self.subs
    }
}
