//! The configuration of the xDS cluster manager policy ([`crate::PolicyConfig::XdsClusterManager`]): per
//! cluster, its priorities (gRFC A56, `beyond-a6.md` §11), each a list of weighted localities (§12) with
//! their endpoint addresses (and endpoint weights), the cluster's EDS `drop_overloads` and circuit-breaking
//! limit (A32, §8), and its load-balancing policy: round_robin under weighted localities, or ring_hash
//! (A42, §10) over every endpoint of a priority.
//!
//! This is what the xDS resolver derives from CDS and EDS resources; decoding and validating those
//! resources is not done here. The types cannot hold a zero locality weight (xDS drops 0-weight localities
//! before they get here); drop rates above one million per million drop every call.

use crate::transport::TransportKey;
use std::collections::BTreeMap;
use std::num::NonZeroU32;

use grpc_base::Address;

/// The circuit-breaking limit when the cluster sets none (gRFC A32).
pub const DEFAULT_MAX_REQUESTS: u32 = 1024;

/// One million: the denominator of a drop rate.
pub const MILLION: u32 = 1_000_000;

/// Every cluster the channel's routes may choose, by cluster name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct XdsClustersConfig {
    /// The clusters, by name.
    pub clusters: BTreeMap<String, ClusterConfig>,
}

/// One cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The priorities, highest first; a lower one takes calls only while the higher ones fail (§11).
    pub priorities: Vec<PriorityConfig>,
    /// EDS `drop_overloads`: each category drops its share of the calls, before the circuit breaker.
    pub drop_overloads: Vec<DropOverload>,
    /// The most calls in flight at once ([`DEFAULT_MAX_REQUESTS`] unless the cluster's DEFAULT threshold
    /// sets `max_requests`); more are dropped with "circuit breaker drop".
    pub max_requests: u32,
    /// How each priority balances its endpoints.
    pub lb: ClusterLbConfig,
    /// Why the cluster cannot take calls (it does not exist, or is of a kind the channel does not
    /// support): its calls fail with this message, whatever its priorities.
    pub failure: Option<String>,
    /// The transport its endpoints' connections use (`None`: the channel's own): clusters with distinct
    /// transports never share a subchannel, those with equal ones do.
    pub transport: Option<TransportKey>,
    /// Outlier detection over the cluster's endpoints (the Cluster's `outlier_detection`, A50's xDS
    /// mapping): the channel runs one detector per cluster that has one, fed by this cluster's calls,
    /// whose ejections apply to this cluster's picks only (`LbPolicy::set_ejected_in_cluster`). `None`
    /// ejects nothing.
    pub outlier_detection: Option<crate::OutlierDetectionConfig>,
    /// Non-empty: an aggregate cluster (A37, A75), which has no endpoints, drops, breaker or policy of
    /// its own and delegates each call to these clusters of the same config, in priority order: the first
    /// READY one serves (under its own drops, breaker, policy and outlier detection); while the first one
    /// not in TRANSIENT_FAILURE is CONNECTING or IDLE, the call queues; a leaf in TRANSIENT_FAILURE (or
    /// missing from the config) is skipped; none left fails the call. `priorities` is then ignored. A
    /// leaf must not itself be an aggregate (the resolver flattens the graph): such a leaf is skipped.
    pub leaves: Vec<String>,
    /// Every address of the cluster is one endpoint (a LOGICAL_DNS cluster, A37 and A61): its calls all
    /// go to one READY address (the first that became READY, kept while it stays READY), failing over to
    /// another READY one, instead of being spread over them. The addresses are still connected eagerly
    /// (pick_first would connect them one at a time).
    pub single_endpoint: bool,
}

impl ClusterConfig {
    /// A cluster with these priorities, no drops, the default circuit-breaking limit and no failure.
    pub fn new(priorities: Vec<PriorityConfig>) -> ClusterConfig {
        ClusterConfig {
            priorities,
            drop_overloads: Vec::new(),
            max_requests: DEFAULT_MAX_REQUESTS,
            lb: ClusterLbConfig::RoundRobin,
            failure: None,
            transport: None,
            outlier_detection: None,
            leaves: Vec::new(),
            single_endpoint: false,
        }
    }

    /// An aggregate cluster delegating to `leaves` in priority order (see [`ClusterConfig::leaves`]).
    pub fn aggregate(leaves: Vec<String>) -> ClusterConfig {
        let mut config = ClusterConfig::new(Vec::new());
        config.leaves = leaves;
        config
    }
}

/// A cluster's load-balancing policy (its CDS `lb_policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClusterLbConfig {
    /// `ROUND_ROBIN`: weighted_target over the localities, round_robin within each (A28).
    #[default]
    RoundRobin,
    /// `RING_HASH` (A42): one ring over all the priority's endpoints, each weighted by its locality's weight
    /// times its own; the ring has between `min_ring_size` and `max_ring_size` entries, both capped at
    /// [`crate::RING_SIZE_CAP`].
    RingHash {
        /// The smallest ring.
        min_ring_size: u64,
        /// The largest ring.
        max_ring_size: u64,
    },
}

/// One priority: localities under a weighted target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PriorityConfig {
    /// The localities.
    pub localities: Vec<LocalityConfig>,
}

/// One locality: its endpoints (under round_robin, or in the priority's ring), and its weight among the priority's localities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalityConfig {
    /// The locality's name (its region, zone and sub-zone, written by the resolver so that distinct
    /// localities never share one): a locality keeps its state across updates under the same name.
    pub name: String,
    /// Its load-balancing weight.
    pub weight: NonZeroU32,
    /// Its endpoints.
    pub addresses: Vec<Address>,
    /// The endpoints' load-balancing weights, in the order of `addresses` (ring_hash uses them, A42); an
    /// endpoint without one (the list is shorter) or with 0 weighs 1.
    pub endpoint_weights: Vec<u32>,
}

impl LocalityConfig {
    /// The weight of the endpoint at `index` in `addresses` (1 unless set).
    pub fn endpoint_weight(&self, index: usize) -> u32 {
        self.endpoint_weights
            .get(index)
            .copied()
            .filter(|w| *w > 0)
            .unwrap_or(1)
    }
}

/// One EDS `drop_overloads` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropOverload {
    /// The drop category (reported with the dropped call).
    pub category: String,
    /// How many calls in a million to drop (a million or more drops every call).
    pub per_million: u32,
}
