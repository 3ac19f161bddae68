#![allow(deprecated)] // The deprecated forms are part of what is tested.

use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, EdsClusterConfig,
};
use envoy_types::pb::envoy::config::cluster::v3::Cluster as ProtoCluster;
use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
use envoy_types::pb::envoy::config::core::v3::{
    AggregatedConfigSource, ConfigSource, DataSource, TypedExtensionConfig,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::certificate_validation_context::SystemRootCerts;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::common_tls_context::{
    CertificateProvider, CombinedCertificateValidationContext,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    SdsSecretConfig, SubjectAltNameMatcher, TlsCertificate, TlsParameters,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{RegexMatcher, StringMatcher};
use envoy_types::pb::google::protobuf::{Any, BoolValue, UInt32Value};

use super::*;
use crate::resource::testing::any;
use crate::resource::{
    decode_response, decode_response_with, Cluster, Decoded, Resource, ResourceType,
};

/// The bootstrap's instances in these tests.
fn context() -> DecodeContext {
    DecodeContext::new(["roots", "id"])
}

fn instance(name: &str) -> Option<CertificateProviderPluginInstance> {
    Some(CertificateProviderPluginInstance {
        instance_name: name.to_owned(),
        certificate_name: String::new(),
    })
}

fn old_instance(name: &str) -> CertificateProviderInstance {
    CertificateProviderInstance {
        instance_name: name.to_owned(),
        certificate_name: "cert".to_owned(),
    }
}

fn provider(name: &str) -> ProviderInstance {
    ProviderInstance {
        instance_name: name.to_owned(),
        certificate_name: String::new(),
    }
}

fn exact(value: &str) -> StringMatcher {
    StringMatcher {
        match_pattern: Some(MatchPattern::Exact(value.to_owned())),
        ..Default::default()
    }
}

/// A validation context with the `roots` instance and these SAN matchers.
fn roots_with(sans: Vec<StringMatcher>) -> CertificateValidationContext {
    CertificateValidationContext {
        ca_certificate_provider_instance: instance("roots"),
        match_subject_alt_names: sans,
        ..Default::default()
    }
}

/// mTLS: identity `id`, roots `roots`, one exact SAN.
fn mtls() -> UpstreamTlsContext {
    UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificate_provider_instance: instance("id"),
            validation_context_type: Some(ValidationContextType::ValidationContext(roots_with(
                vec![exact("spiffe://mesh/ns/default/sa/server")],
            ))),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn socket(tls: &UpstreamTlsContext) -> TransportSocket {
    TransportSocket {
        name: TLS_TRANSPORT_SOCKET_NAME.to_owned(),
        config_type: Some(ConfigType::TypedConfig(any(tls))),
    }
}

fn cluster_with(socket: Option<TransportSocket>) -> ProtoCluster {
    ProtoCluster {
        name: "c".to_owned(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig {
            eds_config: Some(ConfigSource {
                config_source_specifier: Some(ConfigSourceSpecifier::Ads(
                    AggregatedConfigSource {},
                )),
                ..Default::default()
            }),
            service_name: String::new(),
        }),
        transport_socket: socket,
        ..Default::default()
    }
}

fn security(tls: &UpstreamTlsContext) -> Result<Option<ClusterSecurity>, ResourceError> {
    Cluster::from_proto_with(&cluster_with(Some(socket(tls))), &context()).map(|c| c.security)
}

fn accepted(tls: &UpstreamTlsContext) -> ClusterSecurity {
    security(tls).expect("valid").expect("security")
}

fn rejected(tls: &UpstreamTlsContext) -> ResourceError {
    security(tls).expect_err("invalid")
}

fn common(tls: &mut UpstreamTlsContext) -> &mut CommonTlsContext {
    tls.common_tls_context.as_mut().expect("common")
}

fn validation(tls: &mut UpstreamTlsContext) -> &mut CertificateValidationContext {
    match common(tls).validation_context_type.as_mut() {
        Some(ValidationContextType::ValidationContext(vc)) => vc,
        _ => panic!("a validation_context"),
    }
}

const COMMON: &str = "transport_socket.typed_config.common_tls_context";

#[test]
fn no_transport_socket_is_no_security() {
    let c = Cluster::from_proto_with(&cluster_with(None), &context()).expect("valid");
    assert_eq!(c.security, None);
}

#[test]
fn mtls_with_san_matchers_and_sni() {
    let mut tls = mtls();
    validation(&mut tls).match_subject_alt_names = vec![
        exact("spiffe://mesh/ns/default/sa/server"),
        StringMatcher {
            match_pattern: Some(MatchPattern::Prefix("Server.".into())),
            ignore_case: true,
        },
        StringMatcher {
            match_pattern: Some(MatchPattern::Suffix(".example.com".into())),
            ..Default::default()
        },
        StringMatcher {
            match_pattern: Some(MatchPattern::Contains("mesh".into())),
            ..Default::default()
        },
        StringMatcher {
            match_pattern: Some(MatchPattern::SafeRegex(RegexMatcher {
                regex: "spiffe://mesh/.*".into(),
                ..Default::default()
            })),
            ..Default::default()
        },
    ];
    tls.sni = "server.example.com".into();
    let s = accepted(&tls);
    assert_eq!(s.identity, Some(provider("id")));
    assert_eq!(s.roots, RootSource::Provider(provider("roots")));
    assert_eq!(s.sni.as_deref(), Some("server.example.com"));
    assert_eq!(s.san_matchers.len(), 5);
    assert_eq!(
        s.san_matchers[0],
        StringMatch::Exact {
            value: "spiffe://mesh/ns/default/sa/server".into(),
            ignore_case: false
        }
    );
    assert_eq!(
        s.san_matchers[1],
        StringMatch::Prefix {
            value: "server.".into(),
            ignore_case: true
        }
    );
    assert!(s.san_matchers[4].matches("spiffe://mesh/ns/x"));
    assert!(!s.san_matchers[4].matches("spiffe://other/ns/x"));
}

#[test]
fn tls_without_identity_or_sans() {
    let tls = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            validation_context_type: Some(ValidationContextType::ValidationContext(roots_with(
                vec![],
            ))),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        accepted(&tls),
        ClusterSecurity {
            identity: None,
            roots: RootSource::Provider(provider("roots")),
            san_matchers: vec![],
            sni: None,
        }
    );
}

#[test]
fn the_combined_validation_context() {
    let combined = |default: Option<CertificateValidationContext>,
                    deprecated: Option<CertificateProviderInstance>| {
        UpstreamTlsContext {
            common_tls_context: Some(CommonTlsContext {
                validation_context_type: Some(ValidationContextType::CombinedValidationContext(
                    CombinedCertificateValidationContext {
                        default_validation_context: default,
                        validation_context_certificate_provider_instance: deprecated,
                        ..Default::default()
                    },
                )),
                ..Default::default()
            }),
            ..Default::default()
        }
    };
    // The current form.
    let s = accepted(&combined(Some(roots_with(vec![exact("a")])), None));
    assert_eq!(s.roots, RootSource::Provider(provider("roots")));
    assert_eq!(s.san_matchers.len(), 1);
    // The current form wins over the deprecated one.
    let s = accepted(&combined(
        Some(roots_with(vec![])),
        Some(old_instance("id")),
    ));
    assert_eq!(s.roots, RootSource::Provider(provider("roots")));
    // The deprecated instance, with the SANs of the default context.
    let s = accepted(&combined(
        Some(CertificateValidationContext {
            match_subject_alt_names: vec![exact("a")],
            ..Default::default()
        }),
        Some(old_instance("roots")),
    ));
    assert_eq!(
        s.roots,
        RootSource::Provider(ProviderInstance {
            instance_name: "roots".into(),
            certificate_name: "cert".into()
        })
    );
    assert_eq!(s.san_matchers.len(), 1);
    // The deprecated instance alone.
    let s = accepted(&combined(None, Some(old_instance("roots"))));
    assert!(matches!(s.roots, RootSource::Provider(_)));
    // The deprecated instance wins over system roots (C-core: those only without any instance).
    let s = accepted(&combined(
        Some(CertificateValidationContext {
            system_root_certs: Some(SystemRootCerts {}),
            ..Default::default()
        }),
        Some(old_instance("roots")),
    ));
    assert!(matches!(s.roots, RootSource::Provider(_)));
    // System roots alone.
    let s = accepted(&combined(
        Some(CertificateValidationContext {
            system_root_certs: Some(SystemRootCerts {}),
            ..Default::default()
        }),
        None,
    ));
    assert_eq!(s.roots, RootSource::System);
    // Neither.
    let e = security(&combined(
        Some(CertificateValidationContext {
            match_subject_alt_names: vec![exact("a")],
            ..Default::default()
        }),
        None,
    ))
    .expect_err("no roots");
    assert_eq!(e.field, format!("{COMMON}.combined_validation_context"));
    assert!(e.reason.contains("no root certificates"), "{e}");
    // An unknown deprecated instance.
    let e = security(&combined(None, Some(old_instance("nope")))).expect_err("unknown");
    assert_eq!(
        e.field,
        format!(
            "{COMMON}.combined_validation_context.validation_context_certificate_provider_instance.instance_name"
        )
    );
}

#[test]
fn the_deprecated_forms() {
    let tls = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificate_certificate_provider_instance: Some(old_instance("id")),
            validation_context_type: Some(
                ValidationContextType::ValidationContextCertificateProviderInstance(old_instance(
                    "roots",
                )),
            ),
            ..Default::default()
        }),
        ..Default::default()
    };
    let s = accepted(&tls);
    assert_eq!(s.identity.expect("identity").instance_name, "id");
    assert_eq!(
        s.roots,
        RootSource::Provider(ProviderInstance {
            instance_name: "roots".into(),
            certificate_name: "cert".into()
        })
    );
    // The current identity form wins over the deprecated one.
    let mut both = tls.clone();
    common(&mut both).tls_certificate_provider_instance = instance("roots");
    assert_eq!(
        accepted(&both).identity,
        Some(provider("roots")),
        "the current form"
    );
}

#[test]
fn system_roots_only_without_a_provider_instance() {
    let mut tls = mtls();
    validation(&mut tls).system_root_certs = Some(SystemRootCerts {});
    assert_eq!(
        accepted(&tls).roots,
        RootSource::Provider(provider("roots")),
        "the instance wins"
    );
    validation(&mut tls).ca_certificate_provider_instance = None;
    assert_eq!(accepted(&tls).roots, RootSource::System);
}

#[test]
fn ignored_fields_are_ignored() {
    let mut tls = mtls();
    tls.allow_renegotiation = true;
    tls.max_session_keys = Some(UInt32Value { value: 3 });
    tls.auto_host_sni = true;
    tls.auto_sni_san_validation = true;
    common(&mut tls).alpn_protocols = vec!["h2".into()];
    let vc = validation(&mut tls);
    vc.trusted_ca = Some(DataSource::default());
    vc.allow_expired_certificate = true;
    vc.require_signed_certificate_timestamp = Some(BoolValue { value: false });
    assert_eq!(accepted(&tls), accepted(&mtls()));
}

#[test]
fn nack_rules_name_their_field() {
    type Mutation = fn(&mut UpstreamTlsContext);
    let cases: Vec<(Mutation, String)> = vec![
        (
            |t| t.common_tls_context = None,
            "transport_socket.typed_config.common_tls_context".into(),
        ),
        (
            |t| common(t).tls_params = Some(TlsParameters::default()),
            format!("{COMMON}.tls_params"),
        ),
        (
            |t| common(t).custom_handshaker = Some(TypedExtensionConfig::default()),
            format!("{COMMON}.custom_handshaker"),
        ),
        (
            |t| {
                common(t).tls_certificate_provider_instance = None;
                common(t).tls_certificates = vec![TlsCertificate::default()];
            },
            format!("{COMMON}.tls_certificates"),
        ),
        (
            |t| {
                common(t).tls_certificate_provider_instance = None;
                common(t).tls_certificate_sds_secret_configs = vec![SdsSecretConfig::default()];
            },
            format!("{COMMON}.tls_certificate_sds_secret_configs"),
        ),
        (
            |t| {
                common(t).tls_certificate_provider_instance = None;
                common(t).tls_certificate_certificate_provider =
                    Some(CertificateProvider::default());
            },
            format!("{COMMON}.tls_certificate_certificate_provider"),
        ),
        (
            |t| common(t).tls_certificate_provider_instance = instance("nope"),
            format!("{COMMON}.tls_certificate_provider_instance.instance_name"),
        ),
        (
            |t| common(t).tls_certificate_provider_instance = instance(""),
            format!("{COMMON}.tls_certificate_provider_instance.instance_name"),
        ),
        (
            |t| {
                common(t).tls_certificate_provider_instance = None;
                common(t).tls_certificate_certificate_provider_instance = Some(old_instance("x"));
            },
            format!("{COMMON}.tls_certificate_certificate_provider_instance.instance_name"),
        ),
        (
            |t| validation(t).ca_certificate_provider_instance = instance("nope"),
            format!("{COMMON}.validation_context.ca_certificate_provider_instance.instance_name"),
        ),
        (
            |t| validation(t).ca_certificate_provider_instance = None,
            COMMON.to_owned(),
        ),
        (
            |t| common(t).validation_context_type = None,
            COMMON.to_owned(),
        ),
        (
            |t| {
                common(t).validation_context_type =
                    Some(ValidationContextType::ValidationContextSdsSecretConfig(
                        SdsSecretConfig::default(),
                    ))
            },
            format!("{COMMON}.validation_context_sds_secret_config"),
        ),
        (
            |t| {
                common(t).validation_context_type =
                    Some(ValidationContextType::ValidationContextCertificateProvider(
                        CertificateProvider::default(),
                    ))
            },
            format!("{COMMON}.validation_context_certificate_provider"),
        ),
        (
            |t| {
                common(t).validation_context_type =
                    Some(ValidationContextType::CombinedValidationContext(
                        CombinedCertificateValidationContext {
                            default_validation_context: Some(CertificateValidationContext {
                                crl: Some(DataSource::default()),
                                ..roots_with(vec![])
                            }),
                            ..Default::default()
                        },
                    ))
            },
            format!("{COMMON}.combined_validation_context.default_validation_context.crl"),
        ),
        (
            |t| validation(t).verify_certificate_spki = vec!["x".into()],
            format!("{COMMON}.validation_context.verify_certificate_spki"),
        ),
        (
            |t| validation(t).verify_certificate_hash = vec!["x".into()],
            format!("{COMMON}.validation_context.verify_certificate_hash"),
        ),
        (
            |t| {
                validation(t).require_signed_certificate_timestamp = Some(BoolValue { value: true })
            },
            format!("{COMMON}.validation_context.require_signed_certificate_timestamp"),
        ),
        (
            |t| validation(t).crl = Some(DataSource::default()),
            format!("{COMMON}.validation_context.crl"),
        ),
        (
            |t| validation(t).custom_validator_config = Some(TypedExtensionConfig::default()),
            format!("{COMMON}.validation_context.custom_validator_config"),
        ),
        (
            |t| {
                validation(t).match_typed_subject_alt_names = vec![SubjectAltNameMatcher {
                    san_type: 2,
                    matcher: Some(exact("a")),
                    oid: String::new(),
                }]
            },
            format!("{COMMON}.validation_context.match_typed_subject_alt_names"),
        ),
        (
            |t| {
                validation(t).match_subject_alt_names = vec![
                    exact("a"),
                    StringMatcher {
                        match_pattern: Some(MatchPattern::SafeRegex(RegexMatcher {
                            regex: "a.*".into(),
                            ..Default::default()
                        })),
                        ignore_case: true,
                    },
                ]
            },
            format!("{COMMON}.validation_context.match_subject_alt_names[1].ignore_case"),
        ),
        (
            |t| {
                validation(t).match_subject_alt_names = vec![StringMatcher {
                    match_pattern: Some(MatchPattern::Suffix(String::new())),
                    ignore_case: true,
                }]
            },
            format!("{COMMON}.validation_context.match_subject_alt_names[0]"),
        ),
        (
            |t| {
                validation(t).match_subject_alt_names = vec![StringMatcher {
                    match_pattern: Some(MatchPattern::SafeRegex(RegexMatcher::default())),
                    ignore_case: false,
                }]
            },
            format!("{COMMON}.validation_context.match_subject_alt_names[0]"),
        ),
        (
            |t| validation(t).match_subject_alt_names = vec![StringMatcher::default()],
            format!("{COMMON}.validation_context.match_subject_alt_names[0]"),
        ),
        (
            |t| {
                validation(t).match_subject_alt_names = vec![StringMatcher {
                    match_pattern: Some(MatchPattern::SafeRegex(RegexMatcher {
                        regex: "(".into(),
                        ..Default::default()
                    })),
                    ignore_case: false,
                }]
            },
            format!("{COMMON}.validation_context.match_subject_alt_names[0].safe_regex.regex"),
        ),
    ];
    for (i, (mutate, field)) in cases.into_iter().enumerate() {
        let mut tls = mtls();
        mutate(&mut tls);
        let e = rejected(&tls);
        assert_eq!(e.field, field, "case {i}: {e}");
    }
}

#[test]
fn the_socket_itself() {
    let mut named = socket(&mtls());
    named.name = "envoy.transport_sockets.raw_buffer".into();
    let mut unnamed = socket(&mtls());
    unnamed.name = String::new();
    let untyped = TransportSocket {
        name: TLS_TRANSPORT_SOCKET_NAME.into(),
        config_type: None,
    };
    let wrong_type = TransportSocket {
        name: TLS_TRANSPORT_SOCKET_NAME.into(),
        config_type: Some(ConfigType::TypedConfig(any(&CommonTlsContext::default()))),
    };
    let garbage = TransportSocket {
        name: TLS_TRANSPORT_SOCKET_NAME.into(),
        config_type: Some(ConfigType::TypedConfig(Any {
            type_url: UPSTREAM_TLS_CONTEXT_TYPE_URL.into(),
            value: vec![0xff, 0xff],
        })),
    };
    for (socket, field) in [
        (named, "transport_socket.name"),
        (unnamed, "transport_socket.name"),
        (untyped, "transport_socket.typed_config"),
        (wrong_type, "transport_socket.typed_config"),
        (garbage, "transport_socket.typed_config"),
    ] {
        let e = Cluster::from_proto_with(&cluster_with(Some(socket)), &context()).expect_err(field);
        assert_eq!(e.field, field, "{e}");
    }
}

#[test]
fn san_matchers_are_bounded() {
    let mut tls = mtls();
    validation(&mut tls).match_subject_alt_names = (0..MAX_SAN_MATCHERS)
        .map(|i| exact(&format!("san{i}")))
        .collect();
    assert_eq!(accepted(&tls).san_matchers.len(), MAX_SAN_MATCHERS);
    validation(&mut tls)
        .match_subject_alt_names
        .push(exact("one more"));
    let e = rejected(&tls);
    assert_eq!(
        e.field,
        format!("{COMMON}.validation_context.match_subject_alt_names")
    );
    assert!(e.reason.contains("65 matchers"), "{e}");
}

#[test]
fn sni_is_bounded() {
    let mut tls = mtls();
    tls.sni = "a".repeat(MAX_SNI_LENGTH);
    assert_eq!(accepted(&tls).sni.map(|s| s.len()), Some(MAX_SNI_LENGTH));
    tls.sni.push('a');
    let e = rejected(&tls);
    assert_eq!(e.field, "transport_socket.typed_config.sni");
}

#[test]
fn san_regexes_count_against_the_resource_budget() {
    let mut tls = mtls();
    validation(&mut tls).match_subject_alt_names = (0..3)
        .map(|i| StringMatcher {
            match_pattern: Some(MatchPattern::SafeRegex(RegexMatcher {
                regex: format!("spiffe://mesh/{i}/.*"),
                ..Default::default()
            })),
            ..Default::default()
        })
        .collect();
    let mut budget = RegexBudget::resource();
    Cluster::from_proto_within(&cluster_with(Some(socket(&tls))), &context(), &mut budget)
        .expect("valid");
    assert_eq!(budget.compiled(), 3);
    assert!(budget.spent() > 0);
    // A spent budget NACKs the first regex that does not fit.
    let mut spent = RegexBudget::single();
    let big = "(a|b|c|d|e|f|g|h){1000}";
    let mut heavy = mtls();
    validation(&mut heavy).match_subject_alt_names = (0..64)
        .map(|_| StringMatcher {
            match_pattern: Some(MatchPattern::SafeRegex(RegexMatcher {
                regex: big.into(),
                ..Default::default()
            })),
            ..Default::default()
        })
        .collect();
    let e = Cluster::from_proto_within(&cluster_with(Some(socket(&heavy))), &context(), &mut spent)
        .expect_err("over budget");
    assert!(
        e.field.starts_with(&format!(
            "{COMMON}.validation_context.match_subject_alt_names["
        )),
        "{e}"
    );
}

#[test]
fn the_context_decides_which_instances_exist() {
    let resources = [any(&cluster_with(Some(socket(&mtls()))))];
    let with = decode_response_with(ResourceType::Cluster, &resources, &context());
    let [Decoded::Valid {
        value: Resource::Cluster(c),
        ..
    }] = with.as_slice()
    else {
        panic!("valid: {with:?}")
    };
    assert!(c.security.is_some());
    // Without the bootstrap's names, the same cluster is invalid.
    let without = decode_response(ResourceType::Cluster, &resources);
    let [Decoded::Invalid { name, reason }] = without.as_slice() else {
        panic!("invalid: {without:?}")
    };
    assert_eq!(name.as_deref(), Some("c"));
    assert!(
        reason.contains("instance_name") && reason.contains("\"id\""),
        "{reason}"
    );
    let only_roots = DecodeContext::new(["roots"]);
    assert!(matches!(
        decode_response_with(ResourceType::Cluster, &resources, &only_roots).as_slice(),
        [Decoded::Invalid { .. }]
    ));
}

// An `exact` SAN matcher with an empty string is a valid Envoy StringMatcher (only prefix, suffix and
// contains carry `min_len: 1`), and both C-core (`StringMatcherParseInternal` in
// xds_common_types_parser.cc: only a matcher with no pattern at all is "invalid string matcher") and
// grpc-go (`matcher.StringMatcherFromProto`) accept it; it can only ever match an empty SAN, which
// never matches (turn4.md §3.4), so accepting it weakens nothing. upstream_tls.rs
// (`validation_context`, the `empty` check) NACKs the whole Cluster instead, so a control plane that
// C-core and grpc-go clients accept leaves this client without the cluster.
#[test]
fn an_empty_exact_san_matcher_is_accepted_as_in_c_core_and_grpc_go() {
    let mut tls = mtls();
    validation(&mut tls).match_subject_alt_names =
        vec![exact(""), exact("spiffe://mesh/sa/server")];
    let s = security(&tls).expect("C-core and grpc-go accept an empty exact matcher");
    assert_eq!(s.expect("security").san_matchers.len(), 2);
}

// C-core (`CommonTlsContextParse`, xds_common_types_parser.cc) falls back to the deprecated
// `combined_validation_context.validation_context_certificate_provider_instance` whenever the default
// validation context yields no *provider instance* — system roots included — and turn4.md §3.3 says
// `system_root_certs` is used "only when no provider instance". A Cluster naming both must verify the
// server with the provider's CA, not with every public CA of the platform: upstream_tls.rs
// (`common_tls_context`, the `(Some(roots), _) => roots` arm of the combined case) keeps the system
// roots, widening the trust the control plane asked for (and the existing test's "(C-core)" comment
// has C-core backwards).
#[test]
fn a_deprecated_combined_provider_instance_wins_over_system_roots() {
    let tls = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            validation_context_type: Some(ValidationContextType::CombinedValidationContext(
                CombinedCertificateValidationContext {
                    default_validation_context: Some(CertificateValidationContext {
                        system_root_certs: Some(SystemRootCerts {}),
                        ..Default::default()
                    }),
                    validation_context_certificate_provider_instance: Some(old_instance("roots")),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        accepted(&tls).roots,
        RootSource::Provider(ProviderInstance {
            instance_name: "roots".into(),
            certificate_name: "cert".into()
        }),
        "the provider instance the Cluster names must be used, not the platform's roots"
    );
}

// An `Any`'s type URL names its type by the part after the last `/` (protobuf's rule); C-core
// (`ExtractXdsExtension`/`StripTypePrefix`) compares only that part, and this crate does the same for
// the Listener's HCM and for HTTP filters (`http_filter::type_name`). upstream_tls.rs (`upstream_tls`,
// `any.type_url != UPSTREAM_TLS_CONTEXT_TYPE_URL`) compares the whole URL, so a control plane using
// another type URL prefix (allowed by google.protobuf.Any) has its secured Clusters NACKed.
#[test]
fn an_upstream_tls_context_under_another_type_url_prefix_is_accepted_as_in_c_core() {
    let mut s = socket(&mtls());
    if let Some(ConfigType::TypedConfig(any)) = &mut s.config_type {
        any.type_url =
            "example.com/types/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext".into();
    }
    let c = Cluster::from_proto_with(&cluster_with(Some(s)), &context())
        .expect("C-core accepts any type URL prefix, as the Listener's HCM here does");
    assert_eq!(c.security.expect("security").identity, Some(provider("id")));
}

// Neither C-core (`CommonTlsContextParse` reads only `default_validation_context` and
// `validation_context_certificate_provider_instance` of a combined context) nor grpc-go
// (`securityConfigFromCommonTLSContextUsingNewFields` takes the default context and looks no further)
// looks at a combined context's `validation_context_sds_secret_config`: with a provider instance in the
// default context the Cluster is valid and its roots are that instance (a control plane serving Envoy
// too fills both). upstream_tls.rs (`common_tls_context`, the combined arm's first check) NACKs it,
// so this client alone loses the cluster.
#[test]
fn a_combined_context_with_a_provider_instance_ignores_its_sds_config_as_c_core_and_grpc_go() {
    let tls = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            validation_context_type: Some(ValidationContextType::CombinedValidationContext(
                CombinedCertificateValidationContext {
                    default_validation_context: Some(roots_with(vec![exact("a")])),
                    validation_context_sds_secret_config: Some(SdsSecretConfig {
                        name: "envoy-roots".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }),
        ..Default::default()
    };
    let s = security(&tls)
        .expect("C-core and grpc-go accept it")
        .expect("security");
    assert_eq!(s.roots, RootSource::Provider(provider("roots")));
    assert_eq!(s.san_matchers.len(), 1);
}

// A combined context's SDS and plugin-config forms are ignored (C-core and grpc-go read neither).
#[test]
fn a_combined_context_ignores_its_sds_and_plugin_forms() {
    let combined = |default: Option<CertificateValidationContext>| UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            validation_context_type: Some(ValidationContextType::CombinedValidationContext(
                CombinedCertificateValidationContext {
                    default_validation_context: default,
                    validation_context_sds_secret_config: Some(SdsSecretConfig::default()),
                    validation_context_certificate_provider: Some(CertificateProvider::default()),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        accepted(&combined(Some(roots_with(vec![])))).roots,
        RootSource::Provider(provider("roots"))
    );
    let e = rejected(&combined(None));
    assert_eq!(e.field, format!("{COMMON}.combined_validation_context"));
    assert!(e.reason.contains("no root certificates"), "{e}");
}
