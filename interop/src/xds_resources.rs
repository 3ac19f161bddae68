//! Builders of xDS resources for tests (feature `xds-server`): the usual shapes a management server sends
//! a gRPC client, as `Any`s ready for [`crate::xds_server::ManagementServer::set`].

use std::net::SocketAddr;

use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, EdsClusterConfig, LbPolicy,
};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ConfigSource, Locality, SocketAddress,
};
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::google::protobuf::{Any, UInt32Value};
use prost::Message;

/// The type URLs of the four resource types.
pub mod type_url {
    /// Listener.
    pub const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
    /// RouteConfiguration.
    pub const ROUTE: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
    /// Cluster.
    pub const CLUSTER: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
    /// ClusterLoadAssignment.
    pub const ENDPOINTS: &str =
        "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
}

/// `message` in an `Any` of `type_url`, named `name` for the server's snapshot.
pub fn named(name: &str, type_url: &str, message: &impl Message) -> (String, Any) {
    (
        name.to_owned(),
        Any {
            type_url: type_url.to_owned(),
            value: message.encode_to_vec(),
        },
    )
}

/// `ConfigSource { ads {} }`.
pub fn ads_source() -> ConfigSource {
    ConfigSource {
        config_source_specifier: Some(ConfigSourceSpecifier::Ads(AggregatedConfigSource {})),
        ..Default::default()
    }
}

/// An EDS cluster under round_robin, its endpoints named after the cluster.
pub fn eds_cluster(name: &str) -> Cluster {
    Cluster {
        name: name.to_owned(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig {
            eds_config: Some(ads_source()),
            service_name: String::new(),
        }),
        lb_policy: LbPolicy::RoundRobin as i32,
        ..Default::default()
    }
}

/// One locality of an assignment: its zone, weight, priority and endpoints.
#[derive(Clone, Debug)]
pub struct LocalitySpec {
    /// The zone (region and sub-zone are fixed).
    pub zone: String,
    /// `load_balancing_weight`.
    pub weight: u32,
    /// `priority`.
    pub priority: u32,
    /// The endpoints.
    pub endpoints: Vec<SocketAddr>,
}

impl LocalitySpec {
    /// A locality of weight 1 at priority 0.
    pub fn new(zone: &str, endpoints: &[SocketAddr]) -> LocalitySpec {
        LocalitySpec {
            zone: zone.to_owned(),
            weight: 1,
            priority: 0,
            endpoints: endpoints.to_vec(),
        }
    }
}

/// A ClusterLoadAssignment for `cluster`.
pub fn assignment(cluster: &str, localities: &[LocalitySpec]) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: cluster.to_owned(),
        endpoints: localities
            .iter()
            .map(|l| LocalityLbEndpoints {
                locality: Some(Locality {
                    region: "test".to_owned(),
                    zone: l.zone.clone(),
                    sub_zone: String::new(),
                }),
                load_balancing_weight: Some(UInt32Value { value: l.weight }),
                priority: l.priority,
                lb_endpoints: l.endpoints.iter().map(|a| lb_endpoint(*a)).collect(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

fn lb_endpoint(addr: SocketAddr) -> LbEndpoint {
    LbEndpoint {
        host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
            address: Some(Address {
                address: Some(AddressKind::SocketAddress(SocketAddress {
                    address: addr.ip().to_string(),
                    port_specifier: Some(PortSpecifier::PortValue(u32::from(addr.port()))),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
}
