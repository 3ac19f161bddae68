//! CDS: `envoy.config.cluster.v3.Cluster` decoded and validated into a [`Cluster`]: where the cluster's
//! endpoints come from, how calls are balanced over them, the circuit breaker's limit and outlier
//! detection, as gRFC A27, A32, A37, A42, A48 and A50 have a client read them.
//!
//! The rules:
//! * the name must not be empty;
//! * discovery: `type: EDS` with `eds_cluster_config.eds_config` naming `ads` or `self`, and a
//!   `service_name` that may be empty unless the cluster's name is an `xdstp:` name; `type: LOGICAL_DNS`
//!   with a `load_assignment` of exactly one locality holding exactly one endpoint, whose socket address
//!   has a non-empty address, a numeric port and no `resolver_name`; or `cluster_type` with an
//!   `envoy.extensions.clusters.aggregate.v3.ClusterConfig` listing at least one cluster (A37). Anything
//!   else (STATIC, STRICT_DNS, other custom types) is an error;
//! * `lb_policy`: ROUND_ROBIN; RING_HASH (A42) with `XX_HASH`, ring sizes from 1 to 8,388,608 and the
//!   minimum not above the maximum (an unset maximum is 8,388,608, not Envoy's default); LEAST_REQUEST
//!   (A48) with `choice_count` at least 2 (default 2); any other policy is an error;
//! * `circuit_breakers` (A32): `max_requests` of the first threshold with priority DEFAULT, else 1024;
//! * `outlier_detection` (A50): see [`outlier_detection_config`](super::outlier_detection_config);
//! * `lrs_server`, when set, must be `self` (load reports go to the server that sent the cluster);
//! * `transport_socket_matches` must be empty;
//! * `transport_socket` (A29): see `upstream_tls`; validated whether or not the channel uses xDS
//!   credentials, its provider instances checked against the [`DecodeContext`] (the bootstrap's).
//!
//! An error NACKs this cluster only (A46). Ignored on purpose: the `lb_config` of a policy other
//! than the chosen one, DNS settings, health checks, metadata. Left out: `load_balancing_policy` (A52,
//! the typed LB policy list); a cluster that sets it is read from `lb_policy` as a client without A52
//! would. Not here: the channel's cluster policies (`cds`, `xds_cluster_impl`, `priority`), the ring
//! size cap applied by `ring_hash` itself, and the aggregate cluster's graph walk.

use envoy_types::pb::envoy::config::cluster::v3::cluster::ring_hash_lb_config::HashFunction;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, CustomClusterType, DiscoveryType, EdsClusterConfig, LbConfig, LbPolicy,
};
use envoy_types::pb::envoy::config::cluster::v3::Cluster as ProtoCluster;
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
use envoy_types::pb::envoy::config::core::v3::{ConfigSource, RoutingPriority};
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::extensions::clusters::aggregate::v3::ClusterConfig;
use envoy_types::pb::google::protobuf::Any;
use grpc_lb::OutlierDetectionConfig;
use prost::Message;

use super::endpoint::socket_port;
use super::matcher::RegexBudget;
use super::outlier_detection::outlier_detection_config;
use super::upstream_tls::upstream_tls;
use super::{decode_any, DecodeContext, ResourceError, ResourceType};

/// The type URL of an aggregate cluster's configuration (A37).
pub const AGGREGATE_CLUSTER_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.clusters.aggregate.v3.ClusterConfig";

/// The `max_requests` of a cluster without a DEFAULT circuit breaker threshold (A32).
pub const DEFAULT_MAX_REQUESTS: u32 = 1024;

/// The largest ring size an xDS cluster may ask for (A42): 8,388,608 (2^23).
pub const MAX_RING_SIZE: u64 = 8_388_608;

/// `ring_hash`'s minimum ring size when the cluster leaves it out (A42).
pub const DEFAULT_MIN_RING_SIZE: u64 = 1024;

/// `least_request`'s choice count when the cluster leaves it out (A48).
pub const DEFAULT_CHOICE_COUNT: u32 = 2;

/// A validated Cluster: what the channel's cluster policies act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// The resource's name.
    pub name: String,
    /// Where the cluster's endpoints come from.
    pub kind: ClusterKind,
    /// How calls are balanced over the endpoints.
    pub lb_policy: ClusterLb,
    /// The circuit breaker: at most this many calls in flight to the cluster (A32; default 1024).
    pub max_requests: u32,
    /// Outlier detection, when the cluster has an `outlier_detection` (A50). `None` means the field was
    /// absent: outlier detection then runs with neither algorithm, which ejects nothing.
    pub outlier_detection: Option<OutlierDetectionConfig>,
    /// Whether loads are reported (LRS), and where.
    pub load_reporting: LoadReporting,
    /// The cluster's TLS settings (A29): `None` when it has no `transport_socket`.
    pub security: Option<super::ClusterSecurity>,
}

/// Where a cluster's endpoints come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterKind {
    /// From EDS, over the ADS stream.
    Eds {
        /// The ClusterLoadAssignment to subscribe to; `None` means the cluster's own name.
        service_name: Option<String>,
    },
    /// One host name, resolved by the channel's DNS resolver.
    LogicalDns {
        /// The host name (or IP literal); never empty.
        host: String,
        /// The port.
        port: u16,
    },
    /// An aggregate cluster (A37): the endpoints of these clusters, in priority order.
    Aggregate {
        /// The clusters, best first; never empty.
        clusters: Vec<String>,
    },
}

/// The cluster's load balancing policy, with its validated configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterLb {
    /// `ROUND_ROBIN`: `xds_wrr_locality` over `round_robin`.
    RoundRobin,
    /// `RING_HASH` (A42): `1 <= min_ring_size <= max_ring_size <= 8,388,608`.
    RingHash {
        /// The smallest ring (default 1024).
        min_ring_size: u64,
        /// The largest ring (default 8,388,608, before `ring_hash`'s own cap).
        max_ring_size: u64,
    },
    /// `LEAST_REQUEST` (A48).
    LeastRequest {
        /// How many endpoints each pick compares (at least 2; default 2).
        choice_count: u32,
    },
}

/// Whether a cluster's loads are reported over LRS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LoadReporting {
    /// No `lrs_server`: no load reports.
    Off,
    /// `lrs_server` is `self`: report to the xDS server that sent the cluster.
    ToSameServer,
}

impl Cluster {
    /// The cluster in a response's `Any` (unwrapped from a `Resource` if need be).
    pub fn decode(any: &Any) -> Result<Cluster, ResourceError> {
        Cluster::from_proto(&decode_any(any, ResourceType::Cluster)?)
    }

    /// The cluster of a decoded `envoy.config.cluster.v3.Cluster`, or why it is invalid, for a client
    /// whose bootstrap defines no certificate provider instance (see [`Cluster::from_proto_with`]).
    pub fn from_proto(proto: &ProtoCluster) -> Result<Cluster, ResourceError> {
        Cluster::from_proto_with(proto, &DecodeContext::default())
    }

    /// The cluster of a decoded `envoy.config.cluster.v3.Cluster` for a client whose bootstrap gives
    /// `context`, or why it is invalid.
    pub fn from_proto_with(
        proto: &ProtoCluster,
        context: &DecodeContext,
    ) -> Result<Cluster, ResourceError> {
        Cluster::from_proto_within(proto, context, &mut RegexBudget::resource())
    }

    /// [`Cluster::from_proto_with`] within `budget` (the resource's, for its SAN matchers' regexes).
    pub(crate) fn from_proto_within(
        proto: &ProtoCluster,
        context: &DecodeContext,
        budget: &mut RegexBudget,
    ) -> Result<Cluster, ResourceError> {
        if proto.name.is_empty() {
            return Err(ResourceError::new("name", "empty"));
        }
        let kind = cluster_kind(proto)?;
        let lb_policy = lb_policy(proto)?;
        let max_requests = proto
            .circuit_breakers
            .as_ref()
            .and_then(|breakers| {
                breakers
                    .thresholds
                    .iter()
                    .find(|t| t.priority == RoutingPriority::Default as i32)
            })
            .and_then(|t| t.max_requests.as_ref())
            .map_or(DEFAULT_MAX_REQUESTS, |v| v.value);
        let outlier_detection = proto
            .outlier_detection
            .as_ref()
            .map(|od| outlier_detection_config(od).map_err(|e| e.within("outlier_detection")))
            .transpose()?;
        let load_reporting = match &proto.lrs_server {
            None => LoadReporting::Off,
            Some(ConfigSource {
                config_source_specifier: Some(ConfigSourceSpecifier::Self_(_)),
                ..
            }) => LoadReporting::ToSameServer,
            Some(_) => return Err(ResourceError::new(
                "lrs_server",
                "only `self` is supported (load reports go to the server that sent the cluster)",
            )),
        };
        if !proto.transport_socket_matches.is_empty() {
            return Err(ResourceError::new(
                "transport_socket_matches",
                "not supported",
            ));
        }
        let security = proto
            .transport_socket
            .as_ref()
            .map(|socket| {
                upstream_tls(socket, context, budget).map_err(|e| e.within("transport_socket"))
            })
            .transpose()?;
        Ok(Cluster {
            name: proto.name.clone(),
            kind,
            lb_policy,
            max_requests,
            outlier_detection,
            load_reporting,
            security,
        })
    }
}

/// The discovery type and its configuration.
fn cluster_kind(proto: &ProtoCluster) -> Result<ClusterKind, ResourceError> {
    match &proto.cluster_discovery_type {
        Some(ClusterDiscoveryType::ClusterType(custom)) => {
            aggregate(custom).map_err(|e| e.within("cluster_type"))
        }
        // An unset oneof is `type`'s default, STATIC.
        Some(ClusterDiscoveryType::Type(value)) => discovery(proto, *value),
        None => discovery(proto, DiscoveryType::Static as i32),
    }
}

/// A cluster whose `type` is `value`.
fn discovery(proto: &ProtoCluster, value: i32) -> Result<ClusterKind, ResourceError> {
    match DiscoveryType::try_from(value) {
        Ok(DiscoveryType::Eds) => eds(proto.eds_cluster_config.as_ref(), &proto.name)
            .map_err(|e| e.within("eds_cluster_config")),
        Ok(DiscoveryType::LogicalDns) => {
            logical_dns(proto.load_assignment.as_ref()).map_err(|e| e.within("load_assignment"))
        }
        Ok(other) => Err(ResourceError::new(
            "type",
            format!(
                "{} is not supported (EDS, LOGICAL_DNS or an aggregate cluster)",
                other.as_str_name()
            ),
        )),
        Err(_) => Err(ResourceError::new(
            "type",
            format!("unknown discovery type {value}"),
        )),
    }
}

/// An EDS cluster: its config source must be ADS or `self`.
fn eds(config: Option<&EdsClusterConfig>, name: &str) -> Result<ClusterKind, ResourceError> {
    let config = config.ok_or_else(|| ResourceError::new("", "missing for an EDS cluster"))?;
    match config
        .eds_config
        .as_ref()
        .and_then(|c| c.config_source_specifier.as_ref())
    {
        Some(ConfigSourceSpecifier::Ads(_) | ConfigSourceSpecifier::Self_(_)) => {}
        Some(_) => {
            return Err(ResourceError::new(
                "eds_config",
                "only `ads` and `self` config sources are supported",
            ))
        }
        None => return Err(ResourceError::new("eds_config", "missing")),
    }
    if config.service_name.is_empty() {
        if name.starts_with("xdstp:") {
            return Err(ResourceError::new(
                "service_name",
                "required when the cluster's name is an xdstp: name",
            ));
        }
        return Ok(ClusterKind::Eds { service_name: None });
    }
    Ok(ClusterKind::Eds {
        service_name: Some(config.service_name.clone()),
    })
}

/// A LOGICAL_DNS cluster: exactly one locality with exactly one endpoint, a host name and a port.
fn logical_dns(assignment: Option<&ClusterLoadAssignment>) -> Result<ClusterKind, ResourceError> {
    let assignment =
        assignment.ok_or_else(|| ResourceError::new("", "missing for a LOGICAL_DNS cluster"))?;
    let [locality] = assignment.endpoints.as_slice() else {
        return Err(ResourceError::new(
            "endpoints",
            format!(
                "a LOGICAL_DNS cluster needs exactly one locality, not {}",
                assignment.endpoints.len()
            ),
        ));
    };
    let [lb_endpoint] = locality.lb_endpoints.as_slice() else {
        return Err(ResourceError::new(
            "endpoints[0].lb_endpoints",
            format!(
                "a LOGICAL_DNS cluster needs exactly one endpoint, not {}",
                locality.lb_endpoints.len()
            ),
        ));
    };
    let field = "endpoints[0].lb_endpoints[0].endpoint";
    let Some(HostIdentifier::Endpoint(endpoint)) = &lb_endpoint.host_identifier else {
        return Err(ResourceError::new(field, "missing"));
    };
    let field = format!("{field}.address.socket_address");
    let Some(AddressKind::SocketAddress(socket)) =
        endpoint.address.as_ref().and_then(|a| a.address.as_ref())
    else {
        return Err(ResourceError::new(field, "missing"));
    };
    if socket.address.is_empty() {
        return Err(ResourceError::new(format!("{field}.address"), "empty"));
    }
    if !socket.resolver_name.is_empty() {
        return Err(ResourceError::new(
            format!("{field}.resolver_name"),
            "custom resolvers are not supported",
        ));
    }
    let port = socket_port(socket).map_err(|e| e.within(&field))?;
    Ok(ClusterKind::LogicalDns {
        host: socket.address.clone(),
        port,
    })
}

/// An aggregate cluster (A37): the only custom cluster type a client knows.
fn aggregate(custom: &CustomClusterType) -> Result<ClusterKind, ResourceError> {
    let config = custom
        .typed_config
        .as_ref()
        .ok_or_else(|| ResourceError::new("typed_config", "missing"))?;
    if config.type_url != AGGREGATE_CLUSTER_TYPE_URL {
        return Err(ResourceError::new(
            "typed_config",
            format!(
                "unsupported cluster type {:?} (only aggregate clusters)",
                config.type_url
            ),
        ));
    }
    let config = ClusterConfig::decode(config.value.as_slice()).map_err(|e| {
        ResourceError::new("typed_config", format!("cannot decode ClusterConfig: {e}"))
    })?;
    if config.clusters.is_empty() {
        return Err(ResourceError::new(
            "typed_config.clusters",
            "an aggregate cluster needs at least one cluster",
        ));
    }
    Ok(ClusterKind::Aggregate {
        clusters: config.clusters,
    })
}

/// `lb_policy` with the matching `lb_config`.
fn lb_policy(proto: &ProtoCluster) -> Result<ClusterLb, ResourceError> {
    match LbPolicy::try_from(proto.lb_policy) {
        Ok(LbPolicy::RoundRobin) => Ok(ClusterLb::RoundRobin),
        Ok(LbPolicy::RingHash) => {
            let config = match &proto.lb_config {
                Some(LbConfig::RingHashLbConfig(config)) => *config,
                _ => Default::default(),
            };
            let field = "ring_hash_lb_config";
            if config.hash_function != HashFunction::XxHash as i32 {
                return Err(ResourceError::new(
                    format!("{field}.hash_function"),
                    "only XX_HASH is supported",
                ));
            }
            let min = config
                .minimum_ring_size
                .map_or(DEFAULT_MIN_RING_SIZE, |v| v.value);
            let max = config.maximum_ring_size.map_or(MAX_RING_SIZE, |v| v.value);
            for (name, size) in [("minimum_ring_size", min), ("maximum_ring_size", max)] {
                if !(1..=MAX_RING_SIZE).contains(&size) {
                    return Err(ResourceError::new(
                        format!("{field}.{name}"),
                        format!("{size} is not in 1..={MAX_RING_SIZE}"),
                    ));
                }
            }
            if min > max {
                return Err(ResourceError::new(
                    format!("{field}.minimum_ring_size"),
                    format!("{min} is more than maximum_ring_size {max}"),
                ));
            }
            Ok(ClusterLb::RingHash {
                min_ring_size: min,
                max_ring_size: max,
            })
        }
        Ok(LbPolicy::LeastRequest) => {
            let choice_count = match &proto.lb_config {
                Some(LbConfig::LeastRequestLbConfig(config)) => config.choice_count,
                _ => None,
            }
            .map_or(DEFAULT_CHOICE_COUNT, |v| v.value);
            if choice_count < 2 {
                return Err(ResourceError::new(
                    "least_request_lb_config.choice_count",
                    format!("{choice_count} is less than 2"),
                ));
            }
            Ok(ClusterLb::LeastRequest { choice_count })
        }
        Ok(other) => Err(ResourceError::new(
            "lb_policy",
            format!("{} is not supported", other.as_str_name()),
        )),
        Err(_) => Err(ResourceError::new(
            "lb_policy",
            format!("unknown policy {}", proto.lb_policy),
        )),
    }
}

#[cfg(test)]
mod tests;
