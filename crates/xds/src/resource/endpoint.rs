//! EDS: `envoy.config.endpoint.v3.ClusterLoadAssignment` decoded and validated into [`Endpoints`], the
//! prioritised, weighted localities of one cluster (or EDS service name) and its drop policy, as gRFC A27
//! (with A42's endpoint weights, A61's additional addresses and C-core's and grpc-go's checks) has a
//! client read them.
//!
//! The rules:
//! * the resource's name is `cluster_name`, which must not be empty;
//! * a locality whose `load_balancing_weight` is unset or 0 is skipped, unexamined; a kept one needs its
//!   `locality`, may not appear twice in a priority, and the weights of a priority add up to at most
//!   2^32 − 1;
//! * priorities are contiguous from 0: a priority with no kept locality below a used one is an error
//!   (the output's `priorities[i]` is priority `i`);
//! * an endpoint whose `health_status` is neither UNKNOWN nor HEALTHY is skipped, unexamined; a kept one
//!   needs `endpoint.address.socket_address` with an IP literal and a numeric port, each A61
//!   `additional_addresses[]` likewise; its `load_balancing_weight` defaults to 1 and may not be 0; the
//!   endpoint weights of a locality add up to at most 2^32 − 1 (grpc-go);
//! * an address may appear only once in the whole resource (across endpoints, localities and
//!   priorities);
//! * `policy.drop_overloads[]` need a non-empty `category` (C-core) and a known denominator; each becomes
//!   a rate per million, at most 1,000,000;
//! * zero localities or endpoints is valid (the cluster then has nothing to connect to and fails calls).
//!
//! Validation takes time linear in the resource: each locality and each address is checked against
//! sets of those met before it, and the weights against running sums.
//!
//! Ignored on purpose: `named_endpoints`, `overprovisioning_factor`, `endpoint_stale_after`, metadata
//! (A76's `hash_key` is not read), hostnames, health-check config and LEDS. Not here: DRAINING endpoints
//! for A55's override-host (they are skipped like other unhealthy ones), and what the channel builds from
//! [`Endpoints`] (the `priority` and `weighted_target` children, `xds_cluster_impl`'s drops).

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;

use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::config::core::v3::{
    Address as ProtoAddress, HealthStatus, SocketAddress,
};
use envoy_types::pb::envoy::config::endpoint::v3::cluster_load_assignment::policy::DropOverload as ProtoDrop;
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::envoy::r#type::v3::fractional_percent::DenominatorType;
use envoy_types::pb::google::protobuf::Any;
use grpc_base::Address;

use super::{decode_any, ResourceError, ResourceType};

/// A validated ClusterLoadAssignment: the endpoints of one EDS resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// The resource's name: the cluster's EDS service name, or the cluster name.
    pub cluster_name: String,
    /// The priorities, best first: `priorities[i]` is priority `i`. Never has a gap; may be empty.
    pub priorities: Vec<Priority>,
    /// The drop policy, in the resource's order.
    pub drop_overloads: Vec<DropOverload>,
}

/// One priority: its localities, in the resource's order, each at most once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Priority {
    /// The localities; never empty, and their weights add up to at most 2^32 − 1.
    pub localities: Vec<LocalityEndpoints>,
}

/// A locality of a priority with its weight and endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalityEndpoints {
    /// Which locality.
    pub locality: LocalityId,
    /// Its `load_balancing_weight` (a locality without one is not kept).
    pub weight: NonZeroU32,
    /// Its healthy (or UNKNOWN) endpoints, in the resource's order; may be empty.
    pub endpoints: Vec<Endpoint>,
}

/// A locality's identity (`envoy.config.core.v3.Locality`); any part may be empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LocalityId {
    /// The region.
    pub region: String,
    /// The zone within the region.
    pub zone: String,
    /// The sub-zone within the zone.
    pub sub_zone: String,
}

/// One endpoint: a backend with one or more addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Its addresses, never empty: `endpoint.address` first, then A61's `additional_addresses`. All are
    /// [`Address::Tcp`].
    pub addresses: Vec<Address>,
    /// Its `load_balancing_weight` (default 1), for `ring_hash` and weighted round robin.
    pub weight: NonZeroU32,
    /// Its health status as the control plane reports it.
    pub health: EndpointHealth,
}

/// The health statuses an endpoint is kept with (the others make the client skip it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndpointHealth {
    /// `UNKNOWN`: treated as healthy.
    Unknown,
    /// `HEALTHY`.
    Healthy,
}

/// One `drop_overloads` entry: calls the `xds_cluster_impl` policy drops in this category.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropOverload {
    /// The category reported in load reports; never empty.
    pub category: String,
    /// How many calls in a million are dropped, at most 1,000,000.
    pub per_million: u32,
}

/// The largest sum of weights (of a priority's localities, of a locality's endpoints).
const MAX_WEIGHT_SUM: u64 = u32::MAX as u64;

impl Endpoints {
    /// The endpoints in a response's `Any` (unwrapped from a `Resource` if need be).
    pub fn decode(any: &Any) -> Result<Endpoints, ResourceError> {
        Endpoints::from_proto(&decode_any(any, ResourceType::ClusterLoadAssignment)?)
    }

    /// The endpoints of a decoded ClusterLoadAssignment, or why it is invalid.
    pub fn from_proto(proto: &ClusterLoadAssignment) -> Result<Endpoints, ResourceError> {
        if proto.cluster_name.is_empty() {
            return Err(ResourceError::new("cluster_name", "empty"));
        }
        let mut seen = HashSet::new();
        let mut by_priority: BTreeMap<u32, PriorityLocalities> = BTreeMap::new();
        for (i, locality) in proto.endpoints.iter().enumerate() {
            let field = format!("endpoints[{i}]");
            let Some(parsed) = parse_locality(locality, &mut seen).map_err(|e| e.within(&field))?
            else {
                continue;
            };
            by_priority
                .entry(locality.priority)
                .or_default()
                .add(parsed, locality.priority)
                .map_err(|e| e.within(&field))?;
        }
        let mut priorities = Vec::with_capacity(by_priority.len());
        for (index, (priority, p)) in by_priority.into_iter().enumerate() {
            if u64::from(priority) != index as u64 {
                return Err(ResourceError::new(
                    "endpoints",
                    format!(
                        "priority {index} has no locality with a weight but priority {priority} has \
                         (priorities must be contiguous from 0)"
                    ),
                ));
            }
            priorities.push(Priority {
                localities: p.localities,
            });
        }
        let drop_overloads = match &proto.policy {
            None => Vec::new(),
            Some(policy) => policy
                .drop_overloads
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    parse_drop(d).map_err(|e| e.within(&format!("policy.drop_overloads[{i}]")))
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(Endpoints {
            cluster_name: proto.cluster_name.clone(),
            priorities,
            drop_overloads,
        })
    }
}

/// The localities of one priority as they are read, with what checking the next one needs: the ids
/// met and the weights' sum so far, so that each locality costs the same to check however many came
/// before it.
#[derive(Default)]
struct PriorityLocalities {
    /// The localities, in the resource's order.
    localities: Vec<LocalityEndpoints>,
    /// Their ids.
    ids: HashSet<LocalityId>,
    /// Their weights' sum, at most 2^32 − 1 (so adding a weight cannot overflow).
    weight: u64,
}

impl PriorityLocalities {
    /// Adds `locality` to this priority (number `priority`, for errors), unless it is already there or
    /// would take the weights past 2^32 − 1. Errors name the field within the locality.
    fn add(&mut self, locality: LocalityEndpoints, priority: u32) -> Result<(), ResourceError> {
        if self.ids.contains(&locality.locality) {
            return Err(ResourceError::new(
                "locality",
                format!(
                    "locality {:?} appears twice in priority {priority}",
                    locality.locality
                ),
            ));
        }
        let weight = self.weight + u64::from(locality.weight.get());
        if weight > MAX_WEIGHT_SUM {
            return Err(ResourceError::new(
                "load_balancing_weight",
                format!("the locality weights of priority {priority} add up to more than 2^32 - 1"),
            ));
        }
        self.weight = weight;
        self.ids.insert(locality.locality.clone());
        self.localities.push(locality);
        Ok(())
    }
}

/// A locality with its endpoints, `None` when its weight is unset or 0 (skipped). `seen` holds the
/// addresses met so far in the resource.
fn parse_locality(
    proto: &LocalityLbEndpoints,
    seen: &mut HashSet<SocketAddr>,
) -> Result<Option<LocalityEndpoints>, ResourceError> {
    let Some(weight) = proto
        .load_balancing_weight
        .as_ref()
        .and_then(|w| NonZeroU32::new(w.value))
    else {
        return Ok(None);
    };
    let locality = proto
        .locality
        .as_ref()
        .map(|l| LocalityId {
            region: l.region.clone(),
            zone: l.zone.clone(),
            sub_zone: l.sub_zone.clone(),
        })
        .ok_or_else(|| ResourceError::new("locality", "missing"))?;
    let mut endpoints = Vec::new();
    let mut sum = 0u64;
    for (i, lb_endpoint) in proto.lb_endpoints.iter().enumerate() {
        let field = format!("lb_endpoints[{i}]");
        let Some(endpoint) = parse_endpoint(lb_endpoint, seen).map_err(|e| e.within(&field))?
        else {
            continue;
        };
        sum += u64::from(endpoint.weight.get());
        if sum > MAX_WEIGHT_SUM {
            return Err(ResourceError::new(
                format!("{field}.load_balancing_weight"),
                "the endpoint weights of the locality add up to more than 2^32 - 1",
            ));
        }
        endpoints.push(endpoint);
    }
    Ok(Some(LocalityEndpoints {
        locality,
        weight,
        endpoints,
    }))
}

/// An endpoint, `None` when its health status makes the client skip it.
fn parse_endpoint(
    proto: &LbEndpoint,
    seen: &mut HashSet<SocketAddr>,
) -> Result<Option<Endpoint>, ResourceError> {
    let health = match HealthStatus::try_from(proto.health_status) {
        Ok(HealthStatus::Unknown) => EndpointHealth::Unknown,
        Ok(HealthStatus::Healthy) => EndpointHealth::Healthy,
        _ => return Ok(None),
    };
    let weight = match &proto.load_balancing_weight {
        None => NonZeroU32::MIN,
        Some(w) => NonZeroU32::new(w.value)
            .ok_or_else(|| ResourceError::new("load_balancing_weight", "0"))?,
    };
    let endpoint = match &proto.host_identifier {
        Some(HostIdentifier::Endpoint(endpoint)) => endpoint,
        Some(HostIdentifier::EndpointName(_)) => {
            return Err(ResourceError::new(
                "endpoint_name",
                "named endpoints are not supported",
            ))
        }
        None => return Err(ResourceError::new("endpoint", "missing")),
    };
    let mut addresses = Vec::with_capacity(1 + endpoint.additional_addresses.len());
    let first =
        ip_socket_address(endpoint.address.as_ref()).map_err(|e| e.within("endpoint.address"))?;
    addresses.push(first);
    for (i, additional) in endpoint.additional_addresses.iter().enumerate() {
        let addr = ip_socket_address(additional.address.as_ref())
            .map_err(|e| e.within(&format!("endpoint.additional_addresses[{i}].address")))?;
        addresses.push(addr);
    }
    // Checked after all of the endpoint's addresses parse, so the error names the repeated address.
    for (i, addr) in addresses.iter().enumerate() {
        if !seen.insert(*addr) {
            let field = match i {
                0 => "endpoint.address".to_owned(),
                n => format!("endpoint.additional_addresses[{}].address", n - 1),
            };
            return Err(ResourceError::new(
                field,
                format!("address {addr} appears more than once in the resource"),
            ));
        }
    }
    Ok(Some(Endpoint {
        addresses: addresses.into_iter().map(Address::Tcp).collect(),
        weight,
        health,
    }))
}

/// The numeric port of a socket address (`port_value`, at most 65535); a named port is an error.
pub(crate) fn socket_port(proto: &SocketAddress) -> Result<u16, ResourceError> {
    match &proto.port_specifier {
        Some(PortSpecifier::PortValue(port)) => u16::try_from(*port)
            .map_err(|_| ResourceError::new("port_value", format!("{port} is not a port"))),
        Some(PortSpecifier::NamedPort(_)) => Err(ResourceError::new(
            "named_port",
            "named ports are not supported",
        )),
        None => Err(ResourceError::new("port_value", "missing")),
    }
}

/// An `Address` that must be a `socket_address` with an IP literal and a numeric port. Errors name the
/// field inside the `Address`.
fn ip_socket_address(proto: Option<&ProtoAddress>) -> Result<SocketAddr, ResourceError> {
    let socket = match proto.and_then(|a| a.address.as_ref()) {
        Some(AddressKind::SocketAddress(socket)) => socket,
        Some(_) => {
            return Err(ResourceError::new(
                "",
                "not a socket_address (pipes and internal addresses are not supported)",
            ))
        }
        None => return Err(ResourceError::new("socket_address", "missing")),
    };
    let ip: IpAddr = socket.address.parse().map_err(|_| {
        ResourceError::new(
            "socket_address.address",
            format!("{:?} is not an IP address", socket.address),
        )
    })?;
    let port = socket_port(socket).map_err(|e| e.within("socket_address"))?;
    Ok(SocketAddr::new(ip, port))
}

/// A drop category with its rate per million.
fn parse_drop(proto: &ProtoDrop) -> Result<DropOverload, ResourceError> {
    if proto.category.is_empty() {
        return Err(ResourceError::new("category", "empty"));
    }
    let per_million = match &proto.drop_percentage {
        None => 0,
        Some(fraction) => {
            let scale: u64 = match DenominatorType::try_from(fraction.denominator) {
                Ok(DenominatorType::Hundred) => 10_000,
                Ok(DenominatorType::TenThousand) => 100,
                Ok(DenominatorType::Million) => 1,
                Err(_) => {
                    return Err(ResourceError::new(
                        "drop_percentage.denominator",
                        format!("unknown denominator {}", fraction.denominator),
                    ))
                }
            };
            // At most 1,000,000, so the conversion cannot fail.
            u32::try_from((u64::from(fraction.numerator) * scale).min(1_000_000))
                .unwrap_or(1_000_000)
        }
    };
    Ok(DropOverload {
        category: proto.category.clone(),
        per_million,
    })
}

#[cfg(test)]
mod tests;
