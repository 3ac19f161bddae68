use super::*;
use envoy_types::pb::envoy::config::core::v3::{Locality, Pipe};
use envoy_types::pb::envoy::config::endpoint::v3::cluster_load_assignment::Policy;
use envoy_types::pb::envoy::config::endpoint::v3::endpoint::AdditionalAddress;
use envoy_types::pb::envoy::config::endpoint::v3::Endpoint as ProtoEndpoint;
use envoy_types::pb::envoy::r#type::v3::FractionalPercent;
use envoy_types::pb::google::protobuf::UInt32Value;
use prost::Message;

fn socket(address: &str, port: u32) -> ProtoAddress {
    ProtoAddress {
        address: Some(AddressKind::SocketAddress(SocketAddress {
            address: address.to_owned(),
            port_specifier: Some(PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    }
}

fn endpoint(address: &str, port: u32) -> LbEndpoint {
    LbEndpoint {
        host_identifier: Some(HostIdentifier::Endpoint(ProtoEndpoint {
            address: Some(socket(address, port)),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn locality(
    zone: &str,
    weight: Option<u32>,
    priority: u32,
    eps: Vec<LbEndpoint>,
) -> LocalityLbEndpoints {
    LocalityLbEndpoints {
        locality: Some(Locality {
            region: "r".to_owned(),
            zone: zone.to_owned(),
            sub_zone: "s".to_owned(),
        }),
        load_balancing_weight: weight.map(|value| UInt32Value { value }),
        priority,
        lb_endpoints: eps,
        ..Default::default()
    }
}

fn cla(localities: Vec<LocalityLbEndpoints>) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: "svc".to_owned(),
        endpoints: localities,
        ..Default::default()
    }
}

fn id(zone: &str) -> LocalityId {
    LocalityId {
        region: "r".to_owned(),
        zone: zone.to_owned(),
        sub_zone: "s".to_owned(),
    }
}

fn tcp(s: &str) -> Address {
    Address::Tcp(s.parse().expect("socket address"))
}

fn weight(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

fn err(proto: &ClusterLoadAssignment) -> ResourceError {
    Endpoints::from_proto(proto).expect_err("invalid")
}

#[test]
fn a_full_resource_is_read() {
    let mut with_extra = endpoint("10.0.0.1", 80);
    with_extra.load_balancing_weight = Some(UInt32Value { value: 7 });
    with_extra.health_status = HealthStatus::Healthy as i32;
    if let Some(HostIdentifier::Endpoint(e)) = &mut with_extra.host_identifier {
        e.additional_addresses.push(AdditionalAddress {
            address: Some(socket("::1", 81)),
        });
    }
    let proto = cla(vec![
        locality("a", Some(2), 0, vec![with_extra, endpoint("10.0.0.2", 80)]),
        locality("b", Some(3), 1, vec![endpoint("10.0.0.3", 80)]),
        locality("c", Some(1), 0, vec![]),
    ]);
    let got = Endpoints::from_proto(&proto).expect("valid");
    assert_eq!(
        got,
        Endpoints {
            cluster_name: "svc".to_owned(),
            priorities: vec![
                Priority {
                    localities: vec![
                        LocalityEndpoints {
                            locality: id("a"),
                            weight: weight(2),
                            endpoints: vec![
                                Endpoint {
                                    addresses: vec![tcp("10.0.0.1:80"), tcp("[::1]:81")],
                                    weight: weight(7),
                                    health: EndpointHealth::Healthy,
                                },
                                Endpoint {
                                    addresses: vec![tcp("10.0.0.2:80")],
                                    weight: weight(1),
                                    health: EndpointHealth::Unknown,
                                },
                            ],
                        },
                        LocalityEndpoints {
                            locality: id("c"),
                            weight: weight(1),
                            endpoints: vec![],
                        },
                    ],
                },
                Priority {
                    localities: vec![LocalityEndpoints {
                        locality: id("b"),
                        weight: weight(3),
                        endpoints: vec![Endpoint {
                            addresses: vec![tcp("10.0.0.3:80")],
                            weight: weight(1),
                            health: EndpointHealth::Unknown,
                        }],
                    }],
                },
            ],
            drop_overloads: vec![],
        }
    );
}

#[test]
fn decode_reads_the_any() {
    let proto = cla(vec![locality(
        "a",
        Some(1),
        0,
        vec![endpoint("10.0.0.1", 1)],
    )]);
    let any = Any {
        type_url: ResourceType::ClusterLoadAssignment.type_url().to_owned(),
        value: proto.encode_to_vec(),
    };
    assert_eq!(Endpoints::decode(&any), Endpoints::from_proto(&proto));
}

#[test]
fn an_empty_cluster_name_is_rejected() {
    let mut proto = cla(vec![]);
    proto.cluster_name.clear();
    assert_eq!(err(&proto).field, "cluster_name");
}

#[test]
fn zero_localities_or_endpoints_are_valid() {
    let none = Endpoints::from_proto(&cla(vec![])).expect("valid");
    assert!(none.priorities.is_empty());
    let empty =
        Endpoints::from_proto(&cla(vec![locality("a", Some(1), 0, vec![])])).expect("valid");
    assert_eq!(empty.priorities.len(), 1);
    assert!(empty.priorities[0].localities[0].endpoints.is_empty());
}

#[test]
fn localities_without_weight_are_skipped_unexamined() {
    let mut no_id = locality("x", None, 0, vec![endpoint("not an ip", 1)]);
    no_id.locality = None;
    let proto = cla(vec![
        locality("a", Some(1), 0, vec![]),
        locality("b", Some(0), 0, vec![]),
        no_id,
    ]);
    let got = Endpoints::from_proto(&proto).expect("valid");
    assert_eq!(got.priorities.len(), 1);
    assert_eq!(got.priorities[0].localities.len(), 1);
    assert_eq!(got.priorities[0].localities[0].locality, id("a"));
}

#[test]
fn a_weighted_locality_needs_its_locality() {
    let mut l = locality("a", Some(1), 0, vec![]);
    l.locality = None;
    assert_eq!(err(&cla(vec![l])).field, "endpoints[0].locality");
}

#[test]
fn the_same_locality_twice_in_a_priority_is_rejected() {
    let proto = cla(vec![
        locality("a", Some(1), 0, vec![]),
        locality("a", Some(1), 0, vec![]),
    ]);
    let e = err(&proto);
    assert_eq!(e.field, "endpoints[1].locality");
    assert!(e.reason.contains("twice"), "{e}");
    // In different priorities it is fine.
    let proto = cla(vec![
        locality("a", Some(1), 0, vec![]),
        locality("a", Some(1), 1, vec![]),
    ]);
    assert!(Endpoints::from_proto(&proto).is_ok());
}

#[test]
fn locality_weights_of_a_priority_fit_in_32_bits() {
    let fits = cla(vec![
        locality("a", Some(u32::MAX - 1), 0, vec![]),
        locality("b", Some(1), 0, vec![]),
        locality("c", Some(u32::MAX), 1, vec![]),
    ]);
    assert!(Endpoints::from_proto(&fits).is_ok());
    let over = cla(vec![
        locality("a", Some(u32::MAX), 0, vec![]),
        locality("b", Some(1), 0, vec![]),
    ]);
    assert_eq!(err(&over).field, "endpoints[1].load_balancing_weight");
}

#[test]
fn priorities_must_be_contiguous_from_zero() {
    let gap = cla(vec![
        locality("a", Some(1), 0, vec![]),
        locality("b", Some(1), 2, vec![]),
    ]);
    let e = err(&gap);
    assert_eq!(e.field, "endpoints");
    assert!(e.reason.contains("priority 1"), "{e}");
    let no_zero = cla(vec![locality("a", Some(1), 1, vec![])]);
    assert!(err(&no_zero).reason.contains("priority 0"));
    // A priority whose only locality is skipped leaves a gap too.
    let skipped = cla(vec![
        locality("a", Some(0), 0, vec![]),
        locality("b", Some(1), 1, vec![]),
    ]);
    assert!(Endpoints::from_proto(&skipped).is_err());
    // A huge priority is an error, not a huge allocation.
    let huge = cla(vec![
        locality("a", Some(1), 0, vec![]),
        locality("b", Some(1), u32::MAX, vec![]),
    ]);
    assert!(Endpoints::from_proto(&huge).is_err());
    // Order in the resource does not matter.
    let shuffled = cla(vec![
        locality("b", Some(1), 1, vec![]),
        locality("a", Some(1), 0, vec![]),
    ]);
    let got = Endpoints::from_proto(&shuffled).expect("valid");
    assert_eq!(got.priorities[0].localities[0].locality, id("a"));
    assert_eq!(got.priorities[1].localities[0].locality, id("b"));
}

#[test]
fn endpoints_that_are_not_healthy_or_unknown_are_skipped_unexamined() {
    let mut kept = Vec::new();
    for status in [HealthStatus::Unknown, HealthStatus::Healthy] {
        let mut e = endpoint(&format!("10.0.0.{}", status as i32 + 1), 1);
        e.health_status = status as i32;
        kept.push(e);
    }
    let mut skipped = Vec::new();
    for status in [
        HealthStatus::Unhealthy,
        HealthStatus::Draining,
        HealthStatus::Timeout,
        HealthStatus::Degraded,
    ] {
        // Invalid in every way, yet skipped before it is looked at.
        let mut e = endpoint("not an ip", 1);
        e.health_status = status as i32;
        e.load_balancing_weight = Some(UInt32Value { value: 0 });
        skipped.push(e);
    }
    let mut unknown_value = endpoint("10.9.9.9", 1);
    unknown_value.health_status = 99;
    skipped.push(unknown_value);
    let proto = cla(vec![locality("a", Some(1), 0, [skipped, kept].concat())]);
    let got = Endpoints::from_proto(&proto).expect("valid");
    let endpoints = &got.priorities[0].localities[0].endpoints;
    assert_eq!(
        endpoints.iter().map(|e| e.health).collect::<Vec<_>>(),
        [EndpointHealth::Unknown, EndpointHealth::Healthy]
    );
}

#[test]
fn endpoint_weight_defaults_to_one_and_zero_is_rejected() {
    let got = Endpoints::from_proto(&cla(vec![locality(
        "a",
        Some(1),
        0,
        vec![endpoint("10.0.0.1", 1)],
    )]))
    .expect("valid");
    assert_eq!(got.priorities[0].localities[0].endpoints[0].weight.get(), 1);
    let mut zero = endpoint("10.0.0.1", 1);
    zero.load_balancing_weight = Some(UInt32Value { value: 0 });
    let e = err(&cla(vec![locality("a", Some(1), 0, vec![zero])]));
    assert_eq!(
        e.field,
        "endpoints[0].lb_endpoints[0].load_balancing_weight"
    );
}

#[test]
fn endpoint_weights_of_a_locality_fit_in_32_bits() {
    let mut big = endpoint("10.0.0.1", 1);
    big.load_balancing_weight = Some(UInt32Value { value: u32::MAX });
    let fits = cla(vec![locality("a", Some(1), 0, vec![big.clone()])]);
    assert!(Endpoints::from_proto(&fits).is_ok());
    let over = cla(vec![locality(
        "a",
        Some(1),
        0,
        vec![big, endpoint("10.0.0.2", 1)],
    )]);
    assert_eq!(
        err(&over).field,
        "endpoints[0].lb_endpoints[1].load_balancing_weight"
    );
}

#[test]
fn an_endpoint_needs_an_ip_socket_address_with_a_numeric_port() {
    let at = |e: LbEndpoint| err(&cla(vec![locality("a", Some(1), 0, vec![e])])).field;
    let prefix = "endpoints[0].lb_endpoints[0]";

    let mut missing = endpoint("10.0.0.1", 1);
    missing.host_identifier = None;
    assert_eq!(at(missing), format!("{prefix}.endpoint"));

    let mut named = endpoint("10.0.0.1", 1);
    named.host_identifier = Some(HostIdentifier::EndpointName("n".to_owned()));
    assert_eq!(at(named), format!("{prefix}.endpoint_name"));

    let mut no_address = endpoint("10.0.0.1", 1);
    if let Some(HostIdentifier::Endpoint(e)) = &mut no_address.host_identifier {
        e.address = None;
    }
    assert_eq!(
        at(no_address),
        format!("{prefix}.endpoint.address.socket_address")
    );

    let mut pipe = endpoint("10.0.0.1", 1);
    if let Some(HostIdentifier::Endpoint(e)) = &mut pipe.host_identifier {
        e.address = Some(ProtoAddress {
            address: Some(AddressKind::Pipe(Pipe::default())),
        });
    }
    assert_eq!(at(pipe), format!("{prefix}.endpoint.address"));

    for host in ["", "example.com", "10.0.0", "[::1]"] {
        assert_eq!(
            at(endpoint(host, 1)),
            format!("{prefix}.endpoint.address.socket_address.address"),
            "{host:?}"
        );
    }
    assert_eq!(
        at(endpoint("10.0.0.1", 65536)),
        format!("{prefix}.endpoint.address.socket_address.port_value")
    );

    let mut named_port = endpoint("10.0.0.1", 1);
    let mut no_port = endpoint("10.0.0.1", 1);
    for (e, port) in [
        (
            &mut named_port,
            Some(PortSpecifier::NamedPort("http".to_owned())),
        ),
        (&mut no_port, None),
    ] {
        if let Some(HostIdentifier::Endpoint(ep)) = &mut e.host_identifier {
            if let Some(AddressKind::SocketAddress(s)) =
                ep.address.as_mut().and_then(|a| a.address.as_mut())
            {
                s.port_specifier = port;
            }
        }
    }
    assert_eq!(
        at(named_port),
        format!("{prefix}.endpoint.address.socket_address.named_port")
    );
    assert_eq!(
        at(no_port),
        format!("{prefix}.endpoint.address.socket_address.port_value")
    );

    // IPv6 literals and the largest port are fine.
    let ok = cla(vec![locality(
        "a",
        Some(1),
        0,
        vec![endpoint("2001:db8::1", 65535)],
    )]);
    let got = Endpoints::from_proto(&ok).expect("valid");
    assert_eq!(
        got.priorities[0].localities[0].endpoints[0].addresses,
        [tcp("[2001:db8::1]:65535")]
    );
}

#[test]
fn additional_addresses_are_validated_alike() {
    let mut e = endpoint("10.0.0.1", 1);
    if let Some(HostIdentifier::Endpoint(ep)) = &mut e.host_identifier {
        ep.additional_addresses = vec![
            AdditionalAddress {
                address: Some(socket("10.0.0.2", 2)),
            },
            AdditionalAddress {
                address: Some(socket("host.example", 2)),
            },
        ];
    }
    assert_eq!(
        err(&cla(vec![locality("a", Some(1), 0, vec![e])])).field,
        "endpoints[0].lb_endpoints[0].endpoint.additional_addresses[1].address.socket_address.address"
    );
}

#[test]
fn an_address_twice_in_the_resource_is_rejected() {
    // In two endpoints of two priorities.
    let twice = cla(vec![
        locality("a", Some(1), 0, vec![endpoint("10.0.0.1", 1)]),
        locality("b", Some(1), 1, vec![endpoint("10.0.0.1", 1)]),
    ]);
    let e = err(&twice);
    assert_eq!(e.field, "endpoints[1].lb_endpoints[0].endpoint.address");
    assert!(e.reason.contains("10.0.0.1:1"), "{e}");
    // As an additional address of the same endpoint.
    let mut own = endpoint("10.0.0.1", 1);
    if let Some(HostIdentifier::Endpoint(ep)) = &mut own.host_identifier {
        ep.additional_addresses = vec![AdditionalAddress {
            address: Some(socket("10.0.0.1", 1)),
        }];
    }
    assert_eq!(
        err(&cla(vec![locality("a", Some(1), 0, vec![own])])).field,
        "endpoints[0].lb_endpoints[0].endpoint.additional_addresses[0].address"
    );
    // Same IP, other port: two addresses.
    let ports = cla(vec![locality(
        "a",
        Some(1),
        0,
        vec![endpoint("10.0.0.1", 1), endpoint("10.0.0.1", 2)],
    )]);
    assert!(Endpoints::from_proto(&ports).is_ok());
}

fn with_drops(drops: Vec<ProtoDrop>) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        policy: Some(Policy {
            drop_overloads: drops,
            ..Default::default()
        }),
        ..cla(vec![])
    }
}

fn drop_of(category: &str, numerator: u32, denominator: i32) -> ProtoDrop {
    ProtoDrop {
        category: category.to_owned(),
        drop_percentage: Some(FractionalPercent {
            numerator,
            denominator,
        }),
    }
}

#[test]
fn drop_overloads_become_rates_per_million() {
    let proto = with_drops(vec![
        drop_of("hundred", 3, DenominatorType::Hundred as i32),
        drop_of("ten_thousand", 3, DenominatorType::TenThousand as i32),
        drop_of("million", 3, DenominatorType::Million as i32),
        drop_of("capped", 101, DenominatorType::Hundred as i32),
        drop_of("huge", u32::MAX, DenominatorType::Hundred as i32),
        drop_of("over_a_million", 2_000_000, DenominatorType::Million as i32),
        ProtoDrop {
            category: "unset".to_owned(),
            drop_percentage: None,
        },
    ]);
    let got = Endpoints::from_proto(&proto).expect("valid");
    let rates: Vec<(&str, u32)> = got
        .drop_overloads
        .iter()
        .map(|d| (d.category.as_str(), d.per_million))
        .collect();
    assert_eq!(
        rates,
        [
            ("hundred", 30_000),
            ("ten_thousand", 300),
            ("million", 3),
            ("capped", 1_000_000),
            ("huge", 1_000_000),
            ("over_a_million", 1_000_000),
            ("unset", 0),
        ]
    );
}

#[test]
fn a_drop_needs_a_category_and_a_known_denominator() {
    let empty = with_drops(vec![drop_of("", 1, DenominatorType::Hundred as i32)]);
    assert_eq!(err(&empty).field, "policy.drop_overloads[0].category");
    let unknown = with_drops(vec![
        drop_of("a", 1, DenominatorType::Hundred as i32),
        drop_of("b", 1, 7),
    ]);
    assert_eq!(
        err(&unknown).field,
        "policy.drop_overloads[1].drop_percentage.denominator"
    );
}
mod scale;
