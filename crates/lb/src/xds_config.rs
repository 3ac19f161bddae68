//! The configuration of the xDS cluster manager policy ([`crate::PolicyConfig::XdsClusterManager`]): per
//! cluster, its priorities (gRFC A56, `beyond-a6.md` §11), each a list of weighted localities (§12) with
//! their endpoint addresses, and the cluster's EDS `drop_overloads` and circuit-breaking limit (A32, §8).
//!
//! This is what the xDS resolver derives from CDS and EDS resources; decoding and validating those
//! resources is not done here. The types cannot hold a zero locality weight (xDS drops 0-weight localities
//! before they get here); drop rates above one million per million drop every call.

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
    /// Why the cluster cannot take calls (it does not exist, or is of a kind the channel does not
    /// support): its calls fail with this message, whatever its priorities.
    pub failure: Option<String>,
}

impl ClusterConfig {
    /// A cluster with these priorities, no drops, the default circuit-breaking limit and no failure.
    pub fn new(priorities: Vec<PriorityConfig>) -> ClusterConfig {
        ClusterConfig {
            priorities,
            drop_overloads: Vec::new(),
            max_requests: DEFAULT_MAX_REQUESTS,
            failure: None,
        }
    }
}

/// One priority: localities under a weighted target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PriorityConfig {
    /// The localities.
    pub localities: Vec<LocalityConfig>,
}

/// One locality: its endpoints under round_robin, and its weight among the priority's localities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalityConfig {
    /// The locality's name (region/zone/sub-zone, as the resolver writes it): a locality keeps its state
    /// across updates under the same name.
    pub name: String,
    /// Its load-balancing weight.
    pub weight: NonZeroU32,
    /// Its endpoints.
    pub addresses: Vec<Address>,
}

/// One EDS `drop_overloads` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropOverload {
    /// The drop category (reported with the dropped call).
    pub category: String,
    /// How many calls in a million to drop (a million or more drops every call).
    pub per_million: u32,
}
