//! Calls routed to clusters: what a resolver that routes per call (the xDS resolver, gRFC A28, A31, A44)
//! hands the channel beside the service config. [`Routing`] pairs the clusters the load balancer serves
//! (grpc-lb's xDS cluster manager) with the [`Router`] that sends each call to one of them, with the
//! method config of its route (A44's retry policy) and A31's cap on its deadline.
//!
//! Not here: how routes are matched (grpc-xds) and where the routing comes from (`xds/resolver.rs`).

use std::sync::Arc;
use std::time::Duration;

use grpc_lb::XdsClustersConfig;
use grpc_service_config::MethodConfig;

use crate::metadata::MetadataMap;
use crate::status::Status;

/// The clusters and the router of one resolution result.
#[derive(Debug)]
pub(crate) struct Routing {
    /// What the load balancer serves.
    pub(crate) clusters: XdsClustersConfig,
    /// Which cluster each call goes to.
    pub(crate) router: Arc<dyn Router>,
}

/// Sends a call to a cluster.
pub(crate) trait Router: Send + Sync + std::fmt::Debug {
    /// The cluster for a call to `path` with the application's `metadata`, or the status to fail it with
    /// (no route matched, or the route does not forward).
    fn route(&self, path: &str, metadata: &MetadataMap) -> Result<Routed, Status>;
}

/// Where a call goes.
#[derive(Clone, Debug)]
pub(crate) struct Routed {
    /// The cluster.
    pub(crate) cluster: Arc<str>,
    /// The route's method config (its retry policy), replacing the service config's for this call.
    pub(crate) method: Option<Arc<MethodConfig>>,
    /// The most the call may last from its start (A31); never extends the call's own deadline.
    pub(crate) max_duration: Option<Duration>,
}
