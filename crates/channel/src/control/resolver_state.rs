//! What name resolution hands the channel: the [`State`] the control plane and calls watch (pending,
//! failed, or endpoints with the service config), and for a resolver that routes per call (the xDS
//! resolver, gRFC A28, A31, A44) the [`Routing`] beside them: the clusters the load balancer serves
//! (grpc-lb's xDS cluster manager) and the [`Router`] that sends each call to one of them, with the method
//! config of its route (A44's retry policy) and A31's cap on its deadline, and a reference to the cluster
//! that the call keeps until it commits (A28: the resolver keeps a cluster while a call uses it).
//!
//! Not here: resolvers (`resolver_api.rs`, `builtin_resolvers.rs`, `xds/resolver.rs`), their life cycle
//! (`resolver.rs`), route matching (grpc-xds).

use std::sync::Arc;
use std::time::Duration;

use grpc_base::Endpoint;
use grpc_lb::XdsClustersConfig;
use grpc_service_config::{MethodConfig, ServiceConfig};

use crate::wire::metadata::MetadataMap;
use crate::wire::status::Status;

/// What the channel knows from resolution.
#[derive(Clone, Debug)]
pub(crate) enum State {
    /// No result yet: calls wait.
    Pending,
    /// Endpoints and the config to use, and for a resolver that routes calls to clusters (xDS), the
    /// clusters and their router.
    Ready {
        /// Never empty for a resolver's result (the API rejects an empty one).
        endpoints: Arc<[Endpoint]>,
        config: Arc<ServiceConfig>,
        routing: Option<Arc<Routing>>,
    },
    /// The resolution failed: fail-fast calls fail with this status, wait-for-ready calls wait.
    Failed(Status),
}

/// A resolution result a call uses: the endpoints, the service config, and the routing if any.
pub(crate) type Resolved = (Arc<[Endpoint]>, Arc<ServiceConfig>, Option<Arc<Routing>>);

/// What a resolver of a layer above (the xDS resolver, which runs its own channel to the management
/// server) shows the channel's API while it runs (`Channel::xds_resources`): set by the resolver.
#[cfg_attr(not(feature = "xds"), allow(dead_code))]
pub(crate) type Inspect = Arc<parking_lot::Mutex<Option<Box<dyn std::any::Any + Send + Sync>>>>;

/// The clusters and the router of one resolution result.
#[derive(Debug)]
pub(crate) struct Routing {
    /// Counts the resolver's routings (from 1): a call routed by this one picks only once the load
    /// balancer has applied it (or a later one), so a new cluster is never "unknown" to it (A31: the LB
    /// update before the selector swap).
    pub(crate) generation: u64,
    /// What the load balancer serves.
    pub(crate) clusters: XdsClustersConfig,
    /// Which cluster each call goes to.
    pub(crate) router: Arc<dyn Router>,
}

/// A call's reference to its cluster (A28): the resolver keeps the cluster in its routings while one
/// lives. The call holds it until it commits (or ends before).
pub(crate) type ClusterHold = Arc<dyn std::any::Any + Send + Sync>;

/// Sends a call to a cluster.
pub(crate) trait Router: Send + Sync + std::fmt::Debug {
    /// The cluster for a call to `path` with the application's `metadata`, or the status to fail it with
    /// (no route matched, or the route does not forward).
    fn route(&self, path: &str, metadata: &MetadataMap) -> Result<Routed, Status>;
}

/// Where a call goes.
#[derive(Clone, Debug)]
pub(crate) struct Routed {
    /// The route that took the call, as telemetry names it (`xds.route`).
    pub(crate) route: Arc<str>,
    /// The cluster.
    pub(crate) cluster: Arc<str>,
    /// The call's reference to the cluster, if the router's resolver counts them.
    pub(crate) hold: Option<ClusterHold>,
    /// The route's method config (its retry policy), replacing the service config's for this call.
    pub(crate) method: Option<Arc<MethodConfig>>,
    /// The most the call may last from its start (A31); never extends the call's own deadline.
    pub(crate) max_duration: Option<Duration>,
    /// The call's request hash for a ring_hash cluster (A42), the same for all its attempts.
    pub(crate) hash: Option<u64>,
}

/// What [`method_for`] decides for a call: its method config, the cap on its duration, its cluster.
pub(crate) type CallRoute = (
    Option<Arc<MethodConfig>>,
    Option<Duration>,
    Option<RoutedTo>,
);

/// The cluster a call's route chose, and the routing that chose it.
#[derive(Clone, Debug)]
pub(crate) struct RoutedTo {
    /// The route that chose it (its name, else `virtual host name/index`).
    pub(crate) route: Arc<str>,
    /// The cluster's name.
    pub(crate) cluster: Arc<str>,
    /// [`Routing::generation`] of the routing.
    pub(crate) generation: u64,
    /// The call's request hash ([`Routed::hash`]).
    pub(crate) hash: Option<u64>,
    /// The call's reference to the cluster ([`Routed::hold`]), moved into the call's shared state, which
    /// keeps it until the call commits.
    pub(crate) hold: Option<ClusterHold>,
}

/// A call's method config, the cap on its duration, and its cluster: by its route with `routing` (the
/// route's method config replaces the service config's, and A31's stream duration caps the method's
/// timeout), else by the service config for `path`. A call no route takes fails with the router's status.
pub(crate) fn method_for(
    config: &ServiceConfig,
    routing: Option<&Routing>,
    path: &str,
    metadata: &MetadataMap,
) -> Result<CallRoute, Status> {
    let Some(routing) = routing else {
        let method = config.method_config(path).cloned();
        let timeout = method.as_ref().and_then(|m| m.timeout);
        return Ok((method, timeout, None));
    };
    let routed = routing.router.route(path, metadata)?;
    let timeout = routed.method.as_ref().and_then(|m| m.timeout);
    let cap = match (timeout, routed.max_duration) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok((
        routed.method,
        cap,
        Some(RoutedTo {
            route: routed.route,
            cluster: routed.cluster,
            generation: routing.generation,
            hash: routed.hash,
            hold: routed.hold,
        }),
    ))
}
