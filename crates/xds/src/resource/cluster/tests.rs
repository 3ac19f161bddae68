use super::*;
use envoy_types::pb::envoy::config::cluster::v3::circuit_breakers::Thresholds;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    LeastRequestLbConfig, RingHashLbConfig, TransportSocketMatch,
};
use envoy_types::pb::envoy::config::cluster::v3::{CircuitBreakers, OutlierDetection};
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ApiConfigSource, SelfConfigSource, SocketAddress,
};
use envoy_types::pb::envoy::config::endpoint::v3::{Endpoint, LbEndpoint, LocalityLbEndpoints};
use envoy_types::pb::google::protobuf::{UInt32Value, UInt64Value};

fn ads() -> Option<ConfigSource> {
    Some(ConfigSource {
        config_source_specifier: Some(ConfigSourceSpecifier::Ads(AggregatedConfigSource {})),
        ..Default::default()
    })
}

fn self_source() -> Option<ConfigSource> {
    Some(ConfigSource {
        config_source_specifier: Some(ConfigSourceSpecifier::Self_(SelfConfigSource::default())),
        ..Default::default()
    })
}

fn eds_cluster(name: &str, service_name: &str) -> ProtoCluster {
    ProtoCluster {
        name: name.to_owned(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig {
            eds_config: ads(),
            service_name: service_name.to_owned(),
        }),
        ..Default::default()
    }
}

fn dns_endpoint(host: &str, port: u32) -> LbEndpoint {
    LbEndpoint {
        host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
            address: Some(Address {
                address: Some(AddressKind::SocketAddress(SocketAddress {
                    address: host.to_owned(),
                    port_specifier: Some(PortSpecifier::PortValue(port)),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn dns_cluster(localities: Vec<Vec<LbEndpoint>>) -> ProtoCluster {
    ProtoCluster {
        name: "dns".to_owned(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::LogicalDns as i32)),
        load_assignment: Some(ClusterLoadAssignment {
            cluster_name: "dns".to_owned(),
            endpoints: localities
                .into_iter()
                .map(|lb_endpoints| LocalityLbEndpoints {
                    lb_endpoints,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn aggregate_cluster(type_url: &str, clusters: &[&str]) -> ProtoCluster {
    let config = ClusterConfig {
        clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
    };
    ProtoCluster {
        name: "agg".to_owned(),
        cluster_discovery_type: Some(ClusterDiscoveryType::ClusterType(CustomClusterType {
            name: "envoy.clusters.aggregate".to_owned(),
            typed_config: Some(Any {
                type_url: type_url.to_owned(),
                value: config.encode_to_vec(),
            }),
        })),
        ..Default::default()
    }
}

fn ok(proto: &ProtoCluster) -> Cluster {
    Cluster::from_proto(proto).expect("valid")
}

fn err(proto: &ProtoCluster) -> ResourceError {
    Cluster::from_proto(proto).expect_err("invalid")
}

#[test]
fn a_plain_eds_cluster_has_the_defaults() {
    assert_eq!(
        ok(&eds_cluster("c", "")),
        Cluster {
            name: "c".to_owned(),
            kind: ClusterKind::Eds { service_name: None },
            lb_policy: ClusterLb::RoundRobin,
            max_requests: 1024,
            outlier_detection: None,
            load_reporting: LoadReporting::Off,
            security: None,
        }
    );
}

#[test]
fn decode_reads_the_any() {
    let proto = eds_cluster("c", "svc");
    let any = Any {
        type_url: ResourceType::Cluster.type_url().to_owned(),
        value: proto.encode_to_vec(),
    };
    assert_eq!(Cluster::decode(&any), Cluster::from_proto(&proto));
}

#[test]
fn an_empty_name_is_rejected() {
    assert_eq!(err(&eds_cluster("", "")).field, "name");
}

#[test]
fn eds_service_name_is_kept_and_required_for_xdstp_names() {
    assert_eq!(
        ok(&eds_cluster("c", "svc")).kind,
        ClusterKind::Eds {
            service_name: Some("svc".to_owned())
        }
    );
    let xdstp = "xdstp://authority/envoy.config.cluster.v3.Cluster/c";
    assert_eq!(
        err(&eds_cluster(xdstp, "")).field,
        "eds_cluster_config.service_name"
    );
    assert!(Cluster::from_proto(&eds_cluster(xdstp, "xdstp://a/e/s")).is_ok());
}

#[test]
fn eds_config_must_be_ads_or_self() {
    let mut with_self = eds_cluster("c", "");
    if let Some(config) = &mut with_self.eds_cluster_config {
        config.eds_config = self_source();
    }
    assert!(Cluster::from_proto(&with_self).is_ok());

    let mut api = eds_cluster("c", "");
    if let Some(config) = &mut api.eds_cluster_config {
        config.eds_config = Some(ConfigSource {
            config_source_specifier: Some(ConfigSourceSpecifier::ApiConfigSource(
                ApiConfigSource::default(),
            )),
            ..Default::default()
        });
    }
    assert_eq!(err(&api).field, "eds_cluster_config.eds_config");

    let mut unset = eds_cluster("c", "");
    if let Some(config) = &mut unset.eds_cluster_config {
        config.eds_config = None;
    }
    assert_eq!(err(&unset).field, "eds_cluster_config.eds_config");

    let mut missing = eds_cluster("c", "");
    missing.eds_cluster_config = None;
    assert_eq!(err(&missing).field, "eds_cluster_config");
}

#[test]
fn other_discovery_types_are_rejected() {
    for t in [
        DiscoveryType::Static,
        DiscoveryType::StrictDns,
        DiscoveryType::OriginalDst,
    ] {
        let mut proto = eds_cluster("c", "");
        proto.cluster_discovery_type = Some(ClusterDiscoveryType::Type(t as i32));
        assert_eq!(err(&proto).field, "type", "{t:?}");
    }
    let mut unknown = eds_cluster("c", "");
    unknown.cluster_discovery_type = Some(ClusterDiscoveryType::Type(42));
    assert_eq!(err(&unknown).field, "type");
    // Unset is STATIC.
    let mut unset = eds_cluster("c", "");
    unset.cluster_discovery_type = None;
    assert_eq!(err(&unset).field, "type");
}

#[test]
fn a_logical_dns_cluster_has_one_host_and_port() {
    assert_eq!(
        ok(&dns_cluster(vec![vec![dns_endpoint(
            "svc.example.com",
            443
        )]]))
        .kind,
        ClusterKind::LogicalDns {
            host: "svc.example.com".to_owned(),
            port: 443
        }
    );
}

#[test]
fn a_logical_dns_cluster_needs_exactly_one_locality_and_endpoint() {
    let e = |h: &str| dns_endpoint(h, 1);
    assert_eq!(err(&dns_cluster(vec![])).field, "load_assignment.endpoints");
    assert_eq!(
        err(&dns_cluster(vec![vec![e("a")], vec![e("b")]])).field,
        "load_assignment.endpoints"
    );
    assert_eq!(
        err(&dns_cluster(vec![vec![]])).field,
        "load_assignment.endpoints[0].lb_endpoints"
    );
    assert_eq!(
        err(&dns_cluster(vec![vec![e("a"), e("b")]])).field,
        "load_assignment.endpoints[0].lb_endpoints"
    );
    let mut no_assignment = dns_cluster(vec![]);
    no_assignment.load_assignment = None;
    assert_eq!(err(&no_assignment).field, "load_assignment");
}

#[test]
fn a_logical_dns_endpoint_needs_an_address_and_a_numeric_port() {
    let at = "load_assignment.endpoints[0].lb_endpoints[0].endpoint";
    let mut no_endpoint = dns_endpoint("a", 1);
    no_endpoint.host_identifier = None;
    assert_eq!(err(&dns_cluster(vec![vec![no_endpoint]])).field, at);

    let mut no_address = dns_endpoint("a", 1);
    if let Some(HostIdentifier::Endpoint(e)) = &mut no_address.host_identifier {
        e.address = None;
    }
    assert_eq!(
        err(&dns_cluster(vec![vec![no_address]])).field,
        format!("{at}.address.socket_address")
    );
    assert_eq!(
        err(&dns_cluster(vec![vec![dns_endpoint("", 1)]])).field,
        format!("{at}.address.socket_address.address")
    );
    assert_eq!(
        err(&dns_cluster(vec![vec![dns_endpoint("a", 70000)]])).field,
        format!("{at}.address.socket_address.port_value")
    );

    let edit = |f: fn(&mut SocketAddress)| {
        let mut ep = dns_endpoint("a", 1);
        if let Some(HostIdentifier::Endpoint(e)) = &mut ep.host_identifier {
            if let Some(AddressKind::SocketAddress(s)) =
                e.address.as_mut().and_then(|a| a.address.as_mut())
            {
                f(s);
            }
        }
        err(&dns_cluster(vec![vec![ep]])).field
    };
    assert_eq!(
        edit(|s| s.port_specifier = Some(PortSpecifier::NamedPort("https".to_owned()))),
        format!("{at}.address.socket_address.named_port")
    );
    assert_eq!(
        edit(|s| s.port_specifier = None),
        format!("{at}.address.socket_address.port_value")
    );
    assert_eq!(
        edit(|s| s.resolver_name = "custom".to_owned()),
        format!("{at}.address.socket_address.resolver_name")
    );
}

#[test]
fn an_aggregate_cluster_lists_its_clusters() {
    assert_eq!(
        ok(&aggregate_cluster(AGGREGATE_CLUSTER_TYPE_URL, &["a", "b"])).kind,
        ClusterKind::Aggregate {
            clusters: vec!["a".to_owned(), "b".to_owned()]
        }
    );
    assert_eq!(
        err(&aggregate_cluster(AGGREGATE_CLUSTER_TYPE_URL, &[])).field,
        "cluster_type.typed_config.clusters"
    );
}

#[test]
fn other_custom_cluster_types_are_rejected() {
    let other = aggregate_cluster(
        "type.googleapis.com/envoy.extensions.clusters.redis.v3.X",
        &["a"],
    );
    assert_eq!(err(&other).field, "cluster_type.typed_config");
    let mut untyped = aggregate_cluster(AGGREGATE_CLUSTER_TYPE_URL, &["a"]);
    if let Some(ClusterDiscoveryType::ClusterType(custom)) = &mut untyped.cluster_discovery_type {
        custom.typed_config = None;
    }
    assert_eq!(err(&untyped).field, "cluster_type.typed_config");
    let mut garbage = aggregate_cluster(AGGREGATE_CLUSTER_TYPE_URL, &["a"]);
    if let Some(ClusterDiscoveryType::ClusterType(custom)) = &mut garbage.cluster_discovery_type {
        if let Some(any) = &mut custom.typed_config {
            any.value = vec![0xff, 0xff];
        }
    }
    assert_eq!(err(&garbage).field, "cluster_type.typed_config");
}

fn ring_hash(config: Option<RingHashLbConfig>) -> ProtoCluster {
    ProtoCluster {
        lb_policy: LbPolicy::RingHash as i32,
        lb_config: config.map(LbConfig::RingHashLbConfig),
        ..eds_cluster("c", "")
    }
}

fn sizes(min: Option<u64>, max: Option<u64>) -> Option<RingHashLbConfig> {
    Some(RingHashLbConfig {
        minimum_ring_size: min.map(|value| UInt64Value { value }),
        maximum_ring_size: max.map(|value| UInt64Value { value }),
        ..Default::default()
    })
}

#[test]
fn ring_hash_defaults_to_1024_and_8m() {
    let expected = ClusterLb::RingHash {
        min_ring_size: 1024,
        max_ring_size: 8_388_608,
    };
    assert_eq!(ok(&ring_hash(None)).lb_policy, expected);
    assert_eq!(ok(&ring_hash(sizes(None, None))).lb_policy, expected);
    assert_eq!(
        ok(&ring_hash(sizes(Some(10), Some(20)))).lb_policy,
        ClusterLb::RingHash {
            min_ring_size: 10,
            max_ring_size: 20
        }
    );
    // The lb_config of another policy is ignored.
    let mut other = ring_hash(None);
    other.lb_config = Some(LbConfig::LeastRequestLbConfig(
        LeastRequestLbConfig::default(),
    ));
    assert_eq!(ok(&other).lb_policy, expected);
}

#[test]
fn ring_hash_sizes_are_limited() {
    let field = |min, max| err(&ring_hash(sizes(min, max))).field;
    assert_eq!(
        field(Some(0), None),
        "ring_hash_lb_config.minimum_ring_size"
    );
    assert_eq!(
        field(Some(8_388_609), None),
        "ring_hash_lb_config.minimum_ring_size"
    );
    assert_eq!(
        field(None, Some(8_388_609)),
        "ring_hash_lb_config.maximum_ring_size"
    );
    assert_eq!(
        field(None, Some(0)),
        "ring_hash_lb_config.maximum_ring_size"
    );
    // min > max, including an explicit max below the default min.
    assert_eq!(
        field(Some(20), Some(10)),
        "ring_hash_lb_config.minimum_ring_size"
    );
    assert_eq!(
        field(None, Some(100)),
        "ring_hash_lb_config.minimum_ring_size"
    );
    assert!(Cluster::from_proto(&ring_hash(sizes(Some(8_388_608), Some(8_388_608)))).is_ok());
    assert!(Cluster::from_proto(&ring_hash(sizes(Some(1), Some(1)))).is_ok());
}

#[test]
fn ring_hash_needs_xx_hash() {
    let murmur = ring_hash(Some(RingHashLbConfig {
        hash_function: HashFunction::MurmurHash2 as i32,
        ..Default::default()
    }));
    assert_eq!(err(&murmur).field, "ring_hash_lb_config.hash_function");
}

#[test]
fn least_request_choice_count_defaults_to_2_and_is_at_least_2() {
    let with = |count: Option<u32>| ProtoCluster {
        lb_policy: LbPolicy::LeastRequest as i32,
        lb_config: Some(LbConfig::LeastRequestLbConfig(LeastRequestLbConfig {
            choice_count: count.map(|value| UInt32Value { value }),
            ..Default::default()
        })),
        ..eds_cluster("c", "")
    };
    assert_eq!(
        ok(&with(None)).lb_policy,
        ClusterLb::LeastRequest { choice_count: 2 }
    );
    assert_eq!(
        ok(&with(Some(5))).lb_policy,
        ClusterLb::LeastRequest { choice_count: 5 }
    );
    let bare = ProtoCluster {
        lb_policy: LbPolicy::LeastRequest as i32,
        ..eds_cluster("c", "")
    };
    assert_eq!(
        ok(&bare).lb_policy,
        ClusterLb::LeastRequest { choice_count: 2 }
    );
    for bad in [0, 1] {
        assert_eq!(
            err(&with(Some(bad))).field,
            "least_request_lb_config.choice_count"
        );
    }
}

#[test]
fn other_lb_policies_are_rejected() {
    for policy in [
        LbPolicy::Random as i32,
        LbPolicy::Maglev as i32,
        LbPolicy::ClusterProvided as i32,
        LbPolicy::LoadBalancingPolicyConfig as i32,
        4,
        99,
    ] {
        let proto = ProtoCluster {
            lb_policy: policy,
            ..eds_cluster("c", "")
        };
        assert_eq!(err(&proto).field, "lb_policy", "{policy}");
    }
}

fn threshold(priority: RoutingPriority, max_requests: Option<u32>) -> Thresholds {
    Thresholds {
        priority: priority as i32,
        max_requests: max_requests.map(|value| UInt32Value { value }),
        ..Default::default()
    }
}

#[test]
fn max_requests_comes_from_the_first_default_threshold() {
    let with = |thresholds: Vec<Thresholds>| {
        ok(&ProtoCluster {
            circuit_breakers: Some(CircuitBreakers {
                thresholds,
                ..Default::default()
            }),
            ..eds_cluster("c", "")
        })
        .max_requests
    };
    assert_eq!(with(vec![]), 1024);
    assert_eq!(with(vec![threshold(RoutingPriority::High, Some(5))]), 1024);
    assert_eq!(
        with(vec![
            threshold(RoutingPriority::High, Some(5)),
            threshold(RoutingPriority::Default, Some(7)),
            threshold(RoutingPriority::Default, Some(9)),
        ]),
        7
    );
    // The first DEFAULT threshold without max_requests means the default, not the next one.
    assert_eq!(
        with(vec![
            threshold(RoutingPriority::Default, None),
            threshold(RoutingPriority::Default, Some(9)),
        ]),
        1024
    );
    assert_eq!(with(vec![threshold(RoutingPriority::Default, Some(0))]), 0);
}

#[test]
fn outlier_detection_is_mapped_and_its_errors_are_nacks() {
    let with = |od: OutlierDetection| ProtoCluster {
        outlier_detection: Some(od),
        ..eds_cluster("c", "")
    };
    let config = ok(&with(OutlierDetection::default()))
        .outlier_detection
        .expect("present");
    assert!(config.success_rate.is_some());
    assert!(config.failure_percentage.is_none());
    let bad = with(OutlierDetection {
        max_ejection_percent: Some(UInt32Value { value: 101 }),
        ..Default::default()
    });
    assert_eq!(err(&bad).field, "outlier_detection.max_ejection_percent");
}

#[test]
fn lrs_server_must_be_self() {
    let with = |lrs: Option<ConfigSource>| ProtoCluster {
        lrs_server: lrs,
        ..eds_cluster("c", "")
    };
    assert_eq!(
        ok(&with(self_source())).load_reporting,
        LoadReporting::ToSameServer
    );
    assert_eq!(err(&with(ads())).field, "lrs_server");
    assert_eq!(
        err(&with(Some(ConfigSource::default()))).field,
        "lrs_server"
    );
}

#[test]
fn transport_socket_matches_are_rejected() {
    let proto = ProtoCluster {
        transport_socket_matches: vec![TransportSocketMatch::default()],
        ..eds_cluster("c", "")
    };
    assert_eq!(err(&proto).field, "transport_socket_matches");
}
