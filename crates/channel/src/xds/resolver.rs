//! The resolver of `xds:///name` targets (gRFC A27, A28, A31, A44, with A74's "complete config" rule):
//! it watches the Listener named by the bootstrap's template, its RouteConfiguration (RDS, or inline), the
//! Clusters the chosen virtual host's routes name, and their endpoints (EDS), through the shared ADS
//! stream ([`AdsClient`]), and publishes a resolution only once every resource it needs is known (or known
//! not to exist): the clusters for grpc-lb's xDS cluster manager and a [`Router`] that sends each call to
//! a cluster by its route, with the route's A44 retry policy as the call's method config and its A31
//! stream duration as a cap on the call's deadline.
//!
//! A cluster's lifetime (A28): a published router holds a reference ([`ClusterRef`]) to each cluster its
//! routes name, and each call it routes shares its cluster's until the call commits (every attempt of the
//! call goes there; `shared/spec/beyond-a6.md`: refcounts until commit). A cluster with a reference stays in every routing published (and stays watched),
//! named by the current routes or not; when the last reference to a cluster the routes no longer name goes
//! (the old routing is dropped by the channel and the last call routed to the cluster committed or ended), the resolver
//! publishes a routing without it and drops its watches. So a route change that stops naming a cluster
//! publishes twice: first with the old cluster kept (a call may still be routed by the old routing), then
//! without it. References are per published routing and per call in flight: nothing accumulates.
//!
//! Missing resources (A27): a Listener or RouteConfiguration that does not exist, or one never valid,
//! fails the channel (TRANSIENT_FAILURE, calls UNAVAILABLE); a virtual host missing for the target's name
//! likewise. A Cluster the routes name that does not exist fails the calls routed to it. Control plane
//! errors never reach calls as their own codes: every failure is UNAVAILABLE.
//!
//! Cluster kinds (A37): EDS clusters get their endpoints from EDS; LOGICAL_DNS clusters from the channel's
//! DNS resolver (`logical_dns.rs`: the options its `dns:` targets use, no TXT lookup; re-resolved when the
//! channel asks this resolver, and at the options' refresh interval), one priority of one locality; an
//! aggregate cluster's graph is walked depth first into its leaf clusters (`aggregate.rs`: depth 16,
//! loops, at most 1024 clusters, a missing child skipped as A74 says), each published as a cluster of its
//! own (its policy, circuit breaker, drops, outlier detection and transport: A75), the aggregate a
//! cluster that delegates to them in order (`grpc_lb::ClusterConfig::leaves`). The router names the
//! aggregate: A28's references hold the aggregate, and its leaves stay published and watched while it is. A leaf cluster's watches (and its EDS or DNS name) go when no
//! aggregate reaches it any more.
//!
//! Outlier detection (A50's xDS mapping): each cluster's config carries its Cluster's
//! `outlier_detection`; the channel's event loop runs one detector per cluster that has one.
//!
//! Clusters run ROUND_ROBIN or RING_HASH (A42): a ring_hash cluster's config carries its ring sizes and
//! every endpoint's weight, and the router gives each call a request hash from its route's hash policies
//! (`grpc_xds::request_hash`, with a random id per channel for `io.grpc.channel_id`), or a random one when
//! they produce none; the hash is fixed for the call's attempts.
//!
//! With xDS credentials (A29, `credentials.rs`), a Cluster's security settings give its config (and so
//! its subchannels) a transport key, whose transport the resolver registers before it publishes the
//! clusters (and drops once no published cluster uses it); an aggregate cluster whose leaves have
//! different settings fails its calls (never plaintext); without xDS credentials `transport_socket` is
//! ignored.
//!
//! Not here: least_request (its clusters fail calls with a message saying so), circuit-breaker counters
//! shared across channels (or per leaf of an aggregate), load reporting.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use grpc_lb::{Address, ClusterConfig, XdsClustersConfig};
use grpc_retry::{Rng, SplitMix64};
use grpc_service_config::{MethodConfig, ParseOptions, ServiceConfig};
use grpc_xds::resource::{
    Cluster, ClusterKind, Listener, Resource, ResourceType, RetryPolicy, RouteAction, RouteConfig,
    RouteSource, VirtualHost,
};
use grpc_xds::{request_hash, route_call, Bootstrap, RouteOutcome};
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::ads::{AdsClient, ResourceWatch, WatchState};
use super::aggregate::{self, Node};
use super::cluster_config::{
    aggregate_config, cluster_config, dns_cluster_config, failing_cluster, lb_config,
};
use super::credentials::XdsCredentials;
use super::logical_dns::{DnsState, DnsWatches};
use crate::control::resolver_api::{
    Resolver, ResolverBuilder, ResolverError, ResolverSink, ResolverTarget,
};
use crate::control::resolver_state::{ClusterHold, Inspect, Routed, Router, Routing, State};
use crate::wire::metadata::MetadataMap;
use crate::wire::status::Status;
use grpc_lb::TransportKey;
use grpc_xds::resource::ClusterSecurity;

/// The resolver's task; dropping it stops the task (and its watches).
#[derive(Debug)]
pub(crate) struct ResolverTask {
    task: tokio::task::JoinHandle<()>,
    /// The ADS stream its watches use (for `Channel::xds_resources`).
    ads: Arc<AdsClient>,
    /// Its LOGICAL_DNS names' resolutions (re-resolved when the channel asks).
    dns: Arc<DnsWatches>,
}

impl Drop for ResolverTask {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts resolving `xds:///name`: results go to `sink`. Virtual hosts are matched against `authority` (the
/// channel's `:authority` override, A28's data-plane authority), else against `name`. Must be called
/// inside a tokio runtime.
pub(crate) fn start(
    bootstrap: Bootstrap,
    name: &str,
    authority: Option<&str>,
    default_config: Option<ServiceConfig>,
    dns_options: grpc_service_config::ResolverOptions,
    credentials: Option<XdsCredentials>,
    sink: ResolverSink,
) -> Result<ResolverTask, Status> {
    let listener = bootstrap
        .listener_name(None, name)
        .map_err(|e| Status::unavailable(format!("xDS: {e}")))?;
    let ads = AdsClient::shared(&bootstrap)?;
    let config = Arc::new(default_config.unwrap_or_else(ServiceConfig::empty));
    let authority = authority.unwrap_or(name).to_owned();
    let notify = Arc::new(Notify::new());
    let dns = Arc::new(DnsWatches::new(dns_options, notify.clone()));
    let task = tokio::spawn(run(
        ads.clone(),
        listener,
        authority,
        config,
        credentials,
        sink,
        notify,
        dns.clone(),
    ));
    Ok(ResolverTask { task, ads, dns })
}

/// The watches of one resolver.
struct Watches {
    ads: Arc<AdsClient>,
    notify: Arc<Notify>,
    /// The clusters held by routings and the calls they routed (kept while held).
    holds: Arc<ClusterHolds>,
    listener: ResourceWatch,
    route: Option<(String, ResourceWatch)>,
    clusters: BTreeMap<String, ResourceWatch>,
    endpoints: BTreeMap<String, ResourceWatch>,
    /// The LOGICAL_DNS clusters' names, resolving.
    dns: Arc<DnsWatches>,
    /// The channel's random id (A42's `filter_state` key `io.grpc.channel_id`), the same in every router.
    channel_id: u64,
    /// xDS credentials, when the application opted in (A29).
    credentials: Option<XdsCredentials>,
}

impl Watches {
    fn watch(&self, resource_type: ResourceType, name: &str) -> ResourceWatch {
        self.ads.watch(resource_type, name, self.notify.clone())
    }
}

/// A28's cluster lifetime: how many [`ClusterRef`]s each cluster has. A cluster with one stays in every
/// routing the resolver publishes (and watched), named by the routes or not; the resolver is woken when a
/// cluster's last one goes.
struct ClusterHolds {
    counts: Mutex<BTreeMap<String, usize>>,
    /// The resolver's wake-up.
    notify: Arc<Notify>,
}

impl ClusterHolds {
    fn new(notify: Arc<Notify>) -> Arc<ClusterHolds> {
        Arc::new(ClusterHolds {
            counts: Mutex::new(BTreeMap::new()),
            notify,
        })
    }

    /// A new reference to cluster `name`.
    fn hold(self: &Arc<Self>, name: &str) -> Arc<ClusterRef> {
        *self.counts.lock().entry(name.to_owned()).or_insert(0) += 1;
        Arc::new(ClusterRef {
            name: name.to_owned(),
            holds: self.clone(),
        })
    }

    /// The clusters with a reference.
    fn held(&self) -> BTreeSet<String> {
        self.counts.lock().keys().cloned().collect()
    }
}

/// One reference to a cluster: a published router holds one for each cluster its routes name, and each
/// call it routes shares (a clone of the `Arc` of) its cluster's until it commits, so that a cluster
/// stays while a routing that names it may still route calls or a call routed to it has not committed.
struct ClusterRef {
    name: String,
    holds: Arc<ClusterHolds>,
}

impl Drop for ClusterRef {
    fn drop(&mut self) {
        let mut counts = self.holds.counts.lock();
        let last = match counts.get_mut(&self.name) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            _ => true,
        };
        if last {
            counts.remove(&self.name);
            drop(counts);
            // A permit if the resolver is busy: it evaluates again, without this cluster.
            self.holds.notify.notify_one();
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    ads: Arc<AdsClient>,
    listener_name: String,
    authority: String,
    config: Arc<ServiceConfig>,
    credentials: Option<XdsCredentials>,
    sink: ResolverSink,
    notify: Arc<Notify>,
    dns: Arc<DnsWatches>,
) {
    let listener = ads.watch(ResourceType::Listener, &listener_name, notify.clone());
    let holds = ClusterHolds::new(notify.clone());
    let mut watches = Watches {
        ads,
        notify: notify.clone(),
        holds: holds.clone(),
        listener,
        route: None,
        clusters: BTreeMap::new(),
        endpoints: BTreeMap::new(),
        dns,
        channel_id: SplitMix64::new(crate::control::clock_seed() ^ (Arc::as_ptr(&notify) as u64))
            .next_u64(),
        credentials,
    };
    let mut last: Option<Arc<Routing>> = None;
    let mut generation = 0u64;
    let mut failed: Option<String> = None;
    loop {
        match evaluate(&mut watches, &listener_name, &authority) {
            Outcome::Pending => {}
            Outcome::Failed(status) => {
                // A failure after a good config keeps nothing: the resource is gone (A27).
                last = None;
                if failed.as_deref() != Some(status.message()) {
                    failed = Some(status.message().to_owned());
                    if sink.publish_state(State::Failed(status)).is_err() {
                        return;
                    }
                }
            }
            Outcome::Ready(clusters, mut router, endpoints, security) => {
                let changed = last.as_ref().is_none_or(|l| {
                    l.clusters != clusters || format!("{:?}", l.router) != format!("{router:?}")
                });
                if changed {
                    // The transports first: the policy connects with them as soon as it has the clusters.
                    if let Some(credentials) = &watches.credentials {
                        credentials.sync(&security);
                    }
                    failed = None;
                    generation += 1;
                    // Only a published router holds its clusters (one dropped here would wake the resolver).
                    router.hold_clusters(&holds);
                    let routing = Arc::new(Routing {
                        generation,
                        clusters,
                        router: Arc::new(*router),
                    });
                    last = Some(routing.clone());
                    let published = sink.publish_state(State::Ready {
                        endpoints: endpoints
                            .into_iter()
                            .map(grpc_base::Endpoint::new)
                            .collect(),
                        config: config.clone(),
                        routing: Some(routing),
                    });
                    if published.is_err() {
                        return;
                    }
                }
            }
        }
        tokio::select! {
            () = notify.notified() => {}
            () = sink.closed() => return,
        }
    }
}

enum Outcome {
    /// Something needed is not known yet.
    Pending,
    /// The channel cannot route calls.
    Failed(Status),
    /// The clusters, their router, every endpoint address, and the security settings of each transport
    /// key the clusters use (A29).
    Ready(
        XdsClustersConfig,
        Box<XdsRouter>,
        Vec<Address>,
        BTreeMap<TransportKey, ClusterSecurity>,
    ),
}

fn value_or<'a>(state: &'a WatchState, what: &str) -> Result<Option<&'a Resource>, Status> {
    if state.does_not_exist {
        return Err(Status::unavailable(format!("xDS: {what} does not exist")));
    }
    match (&state.value, &state.error) {
        (Some(v), _) => Ok(Some(v)),
        (None, Some(e)) => Err(Status::unavailable(format!("xDS: {what}: {e}"))),
        (None, None) => Ok(None),
    }
}

/// What the watches say now; adjusts the route, cluster and endpoint watches to what is needed.
fn evaluate(w: &mut Watches, listener_name: &str, authority: &str) -> Outcome {
    let state = w.listener.state();
    let listener = match value_or(&state, &format!("listener {listener_name:?}")) {
        Err(status) => return Outcome::Failed(status),
        Ok(None) => return Outcome::Pending,
        Ok(Some(Resource::Listener(l))) => l.clone(),
        Ok(Some(_)) => return Outcome::Pending,
    };
    let route_config = match route_config(w, &listener) {
        Err(status) => return Outcome::Failed(status),
        Ok(None) => return Outcome::Pending,
        Ok(Some(rc)) => rc,
    };
    let Some(vhost) = route_config.virtual_host(authority).cloned() else {
        return Outcome::Failed(Status::unavailable(format!(
            "xDS: no virtual host of route configuration {:?} matches {authority:?}",
            route_config.name
        )));
    };
    // The clusters the routes name, and those held (A28: a routing that named them may still route calls,
    // or a call routed to them runs): each keeps its watches and its place in the routing.
    let mut wanted = named_clusters(&vhost);
    wanted.extend(w.holds.held());
    // Aggregate clusters (A37) reach more clusters, each watched in turn: a walk's every cluster stays
    // watched while the aggregate names it.
    let mut watched = wanted.clone();
    let mut walks = BTreeMap::new();
    for root in &wanted {
        if let Known::Cluster(c) = known(w, root) {
            if let ClusterKind::Aggregate { .. } = c.kind {
                let walk = aggregate::flatten(root, &|name: &str| match known(w, name) {
                    Known::Pending => Node::NotReceived,
                    Known::Failed(_) => Node::Missing,
                    Known::Cluster(c) => match c.kind {
                        ClusterKind::Aggregate { clusters } => Node::Aggregate(clusters),
                        _ => Node::Leaf,
                    },
                });
                watched.extend(walk.reached.iter().cloned());
                walks.insert(root.clone(), walk.leaves);
            }
        }
    }
    w.clusters.retain(|name, _| watched.contains(name));
    let mut added = false;
    for name in &watched {
        if !w.clusters.contains_key(name) {
            let watch = w.watch(ResourceType::Cluster, name);
            w.clusters.insert(name.clone(), watch);
            added = true;
        }
    }
    let mut clusters = BTreeMap::new();
    // The leaves of aggregate clusters, each a cluster of its own (A75).
    let mut leaf_clusters = BTreeMap::new();
    let mut wants = Wants::default();
    let mut pending = false;
    for root in &wanted {
        let config = match known(w, root) {
            Known::Pending => {
                pending = true;
                continue;
            }
            Known::Failed(message) => failing_cluster(&message),
            Known::Cluster(cluster) => match &cluster.kind {
                ClusterKind::Aggregate { .. } => match walks.remove(root) {
                    None | Some(Ok(None)) => {
                        pending = true;
                        continue;
                    }
                    Some(Err(message)) => {
                        failing_cluster(&format!("xDS cluster {root:?}: {message}"))
                    }
                    Some(Ok(Some(leaves))) => {
                        // A75: each leaf is a cluster of its own (its drops, breaker, policy,
                        // outlier detection and transport), published under its name while the
                        // aggregate names it; the aggregate delegates to them in order.
                        let mut parts = Vec::new();
                        let mut leaf_pending = false;
                        for leaf in &leaves {
                            // A leaf gone since the walk: skipped, as a missing one is (A74).
                            if let Known::Cluster(c) = known(w, leaf) {
                                match leaf_config(w, leaf, &c, &mut wants) {
                                    Some(config) => parts.push((leaf.clone(), config)),
                                    None => leaf_pending = true,
                                }
                            }
                        }
                        if leaf_pending {
                            pending = true;
                            continue;
                        }
                        let config = aggregate_config(root, &parts);
                        for (leaf, leaf_config) in parts {
                            leaf_clusters.insert(leaf, leaf_config);
                        }
                        config
                    }
                },
                _ => match leaf_config(w, root, &cluster, &mut wants) {
                    Some(config) => config,
                    None => {
                        pending = true;
                        continue;
                    }
                },
            },
        };
        clusters.insert(root.clone(), config);
    }
    for (leaf, config) in leaf_clusters {
        clusters.entry(leaf).or_insert(config);
    }
    let eds_wanted = wants.eds;
    w.endpoints.retain(|name, _| eds_wanted.contains(name));
    for name in &eds_wanted {
        if !w.endpoints.contains_key(name) {
            let watch = w.watch(ResourceType::ClusterLoadAssignment, name);
            w.endpoints.insert(name.clone(), watch);
            added = true;
        }
    }
    w.dns.retain(&wants.dns);
    if pending || added {
        return Outcome::Pending;
    }
    let endpoints: Vec<Address> = clusters
        .values()
        .flat_map(|c| c.priorities.iter())
        .flat_map(|p| p.localities.iter())
        .flat_map(|l| l.addresses.iter().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let router = XdsRouter::new(vhost, listener.max_stream_duration, w.channel_id);
    Outcome::Ready(
        XdsClustersConfig { clusters },
        Box::new(router),
        endpoints,
        wants.security,
    )
}

/// A cluster resource as its watch says now.
// A short-lived value of one evaluation; the Cluster (with its TLS settings) is not worth a box.
#[allow(clippy::large_enum_variant)]
enum Known {
    /// Not received yet (or not watched yet).
    Pending,
    /// Does not exist, or was never valid: why.
    Failed(String),
    /// The cluster.
    Cluster(Box<Cluster>),
}

fn known(w: &Watches, name: &str) -> Known {
    let Some(state) = w.clusters.get(name).map(ResourceWatch::state) else {
        return Known::Pending;
    };
    match value_or(&state, &format!("cluster {name:?}")) {
        Err(status) => Known::Failed(status.message().to_owned()),
        Ok(None) => Known::Pending,
        Ok(Some(Resource::Cluster(c))) => Known::Cluster(Box::new(c.clone())),
        Ok(Some(_)) => Known::Failed("not a cluster".to_owned()),
    }
}

/// What the leaf clusters need watched: EDS resources and LOGICAL_DNS names.
#[derive(Default)]
struct Wants {
    eds: BTreeSet<String>,
    dns: BTreeSet<(String, u16)>,
    /// The security settings of each transport key the clusters use (A29).
    security: BTreeMap<TransportKey, ClusterSecurity>,
}

/// The cluster manager's view of a leaf cluster (EDS or LOGICAL_DNS) named `name`; `None` while its
/// endpoints are not known yet. Notes in `wants` what it needs watched.
fn leaf_config(
    w: &Watches,
    name: &str,
    cluster: &Cluster,
    wants: &mut Wants,
) -> Option<ClusterConfig> {
    let Some(lb) = lb_config(&cluster.lb_policy) else {
        return Some(failing_cluster(&format!(
            "xDS cluster {name:?} is not supported yet ({:?}): ROUND_ROBIN or RING_HASH clusters only",
            cluster.lb_policy
        )));
    };
    let mut config = match &cluster.kind {
        ClusterKind::Eds { service_name } => {
            let eds = service_name.clone().unwrap_or_else(|| name.to_owned());
            wants.eds.insert(eds.clone());
            let state = w.endpoints.get(&eds).map(ResourceWatch::state)?;
            match value_or(&state, &format!("endpoints {eds:?}")) {
                Err(status) => return Some(failing_cluster(status.message())),
                Ok(None) => return None,
                Ok(Some(Resource::Endpoints(e))) => cluster_config(e, cluster.max_requests, lb),
                Ok(Some(_)) => return Some(failing_cluster("not an endpoint assignment")),
            }
        }
        ClusterKind::LogicalDns { host, port } => {
            wants.dns.insert((host.clone(), *port));
            match w.dns.state(host, *port)? {
                DnsState::Pending => return None,
                DnsState::Resolved(addresses) => {
                    dns_cluster_config(&addresses, cluster.max_requests, lb)
                }
            }
        }
        ClusterKind::Aggregate { .. } => {
            return Some(failing_cluster(&format!(
                "xDS cluster {name:?} is an aggregate cluster, not a leaf"
            )))
        }
    };
    config.outlier_detection = cluster.outlier_detection.clone();
    if let (Some(_), Some(security)) = (&w.credentials, &cluster.security) {
        let key = XdsCredentials::key(security);
        wants.security.insert(key.clone(), security.clone());
        config.transport = Some(key);
    }
    Some(config)
}

/// The clusters the routes of `vhost` name.
fn named_clusters(vhost: &VirtualHost) -> BTreeSet<String> {
    vhost
        .routes
        .iter()
        .flat_map(|r| match &r.action {
            RouteAction::Cluster(c) => vec![c.clone()],
            RouteAction::WeightedClusters(cs) => cs.iter().map(|c| c.name.clone()).collect(),
            RouteAction::NonForwarding => Vec::new(),
        })
        .collect()
}

/// The listener's route configuration: inline, or from its RDS watch (started or switched here).
fn route_config(w: &mut Watches, listener: &Listener) -> Result<Option<RouteConfig>, Status> {
    match &listener.route_source {
        RouteSource::Inline(rc) => {
            w.route = None;
            Ok(Some(rc.clone()))
        }
        RouteSource::Rds { name } => {
            if w.route.as_ref().is_none_or(|(n, _)| n != name) {
                let watch = w.watch(ResourceType::RouteConfiguration, name);
                w.route = Some((name.clone(), watch));
            }
            let Some((_, watch)) = &w.route else {
                return Ok(None);
            };
            let state = watch.state();
            match value_or(&state, &format!("route configuration {name:?}"))? {
                Some(Resource::RouteConfiguration(rc)) => Ok(Some(rc.clone())),
                _ => Ok(None),
            }
        }
    }
}

/// Routes calls by the chosen virtual host's routes.
struct XdsRouter {
    vhost: VirtualHost,
    listener_max_stream_duration: Option<Duration>,
    /// Per route: its A44 retry policy as a method config.
    methods: Vec<Option<Arc<MethodConfig>>>,
    /// Per route: what telemetry calls it (its name, else `virtual host name/index`).
    labels: Vec<Arc<str>>,
    rng: Mutex<SplitMix64>,
    /// The channel's random id, for the `io.grpc.channel_id` hash policy.
    channel_id: u64,
    /// Once published: a reference to each cluster the routes name, shared by the calls routed to it.
    holds: BTreeMap<String, Arc<ClusterRef>>,
}

impl std::fmt::Debug for XdsRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdsRouter")
            .field("vhost", &self.vhost)
            .field(
                "listener_max_stream_duration",
                &self.listener_max_stream_duration,
            )
            .finish_non_exhaustive()
    }
}

impl XdsRouter {
    fn new(
        vhost: VirtualHost,
        listener_max_stream_duration: Option<Duration>,
        channel_id: u64,
    ) -> XdsRouter {
        let methods = vhost
            .routes
            .iter()
            .map(|r| r.retry_policy.as_ref().and_then(method_config))
            .collect();
        let labels = vhost
            .routes
            .iter()
            .map(|r| match r.name.as_str() {
                "" => Arc::from(format!("{}/{}", vhost.name, r.index)),
                name => Arc::from(name),
            })
            .collect();
        XdsRouter {
            vhost,
            listener_max_stream_duration,
            methods,
            labels,
            rng: Mutex::new(SplitMix64::new(crate::control::clock_seed() ^ channel_id)),
            channel_id,
            holds: BTreeMap::new(),
        }
    }

    /// Takes a reference to each cluster the routes name.
    fn hold_clusters(&mut self, holds: &Arc<ClusterHolds>) {
        self.holds = named_clusters(&self.vhost)
            .into_iter()
            .map(|name| {
                let hold = holds.hold(&name);
                (name, hold)
            })
            .collect();
    }
}

impl Router for XdsRouter {
    fn route(&self, path: &str, metadata: &MetadataMap) -> Result<Routed, Status> {
        // The header view of A28: text metadata only (`-bin` keys are absent to route matching), each
        // value its bytes, so one that is not UTF-8 is present (see grpc_xds's routing).
        let headers: Vec<(&str, &[u8])> = metadata
            .iter()
            .filter(|(k, _)| !k.ends_with("-bin"))
            .collect();
        let mut rng = self.rng.lock();
        match route_call(
            &self.vhost,
            path,
            headers.as_slice(),
            self.listener_max_stream_duration,
            &mut *rng,
        ) {
            RouteOutcome::Routed(r) => Ok(Routed {
                // A42: the route's hash, else a random one; the call keeps it for all its attempts.
                hash: Some(
                    request_hash(r.hash_policies, headers.as_slice(), self.channel_id)
                        .unwrap_or_else(|| rng.next_u64()),
                ),
                hold: self.holds.get(r.cluster).map(|h| h.clone() as ClusterHold),
                route: self
                    .labels
                    .get(r.route_index)
                    .cloned()
                    .unwrap_or_else(|| Arc::from("")),
                cluster: Arc::from(r.cluster),
                method: self.methods.get(r.route_index).cloned().flatten(),
                max_duration: r.max_stream_duration,
            }),
            RouteOutcome::NoRoute => {
                Err(Status::unavailable(format!("xDS: no route matches {path}")))
            }
            RouteOutcome::NonForwarding { .. } => Err(Status::unavailable(format!(
                "xDS: the route matching {path} does not forward calls"
            ))),
        }
    }
}

/// A44: the route's retry policy as an A6 method config (through the service config's own parser).
fn method_config(policy: &RetryPolicy) -> Option<Arc<MethodConfig>> {
    let codes: Vec<String> = policy
        .retryable_codes()
        .iter()
        .map(|c| format!("{:?}", c.name()))
        .collect();
    let json = format!(
        r#"{{"methodConfig":[{{"name":[{{}}],"retryPolicy":{{"maxAttempts":{},"initialBackoff":"{:.6}s","maxBackoff":"{:.6}s","backoffMultiplier":{},"retryableStatusCodes":[{}]}}}}]}}"#,
        policy.max_attempts(),
        policy.initial_backoff().as_secs_f64(),
        policy.max_backoff().as_secs_f64(),
        policy.backoff_multiplier(),
        codes.join(",")
    );
    let config = ServiceConfig::parse(&json, ParseOptions::default()).ok()?;
    config.method_config("/any/method").cloned()
}

/// The resolver of `xds:///name` as a [`ResolverBuilder`]: [`start`] with this bootstrap (and the
/// channel's authority override, if any). Built per channel; its running task's ADS stream shows in
/// `inspect` (for `Channel::xds_resources`) while it runs.
pub(crate) struct XdsResolverBuilder {
    pub(crate) bootstrap: Bootstrap,
    pub(crate) name: String,
    pub(crate) authority: Option<String>,
    pub(crate) default_config: Option<ServiceConfig>,
    /// The channel's DNS resolver options, for LOGICAL_DNS clusters.
    pub(crate) dns_options: grpc_service_config::ResolverOptions,
    pub(crate) inspect: Inspect,
    /// xDS credentials (A29), when the application opted in.
    pub(crate) credentials: Option<XdsCredentials>,
}

/// A running xDS resolver: its task stops when this is dropped.
struct RunningXds {
    task: ResolverTask,
    inspect: Inspect,
}

impl Resolver for RunningXds {
    /// The policy wants re-resolution: the LOGICAL_DNS names resolve again (the ADS stream pushes
    /// everything else).
    fn resolve_now(&mut self) {
        self.task.dns.resolve_now();
    }
}

impl Drop for RunningXds {
    fn drop(&mut self) {
        *self.inspect.lock() = None;
    }
}

impl ResolverBuilder for XdsResolverBuilder {
    fn scheme(&self) -> &str {
        "xds"
    }

    fn build(
        &self,
        _target: &ResolverTarget,
        sink: ResolverSink,
    ) -> Result<Box<dyn Resolver>, ResolverError> {
        let task = start(
            self.bootstrap.clone(),
            &self.name,
            self.authority.as_deref(),
            self.default_config.clone(),
            self.dns_options.clone(),
            self.credentials.clone(),
            sink,
        )
        .map_err(|status| ResolverError::Other(status.message().to_owned()))?;
        *self.inspect.lock() = Some(Box::new(task.ads.clone()));
        Ok(Box::new(RunningXds {
            task,
            inspect: self.inspect.clone(),
        }))
    }
}

#[cfg(test)]
mod hash_tests;
