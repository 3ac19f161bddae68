use super::*;
use crate::resource::duration::to_proto;
use crate::resource::testing::{any, any_of_type, filter, router};
use crate::resource::{HttpFilterKind, RouteAction, RESOURCE_WRAPPER_TYPE_URL};
use envoy_types::pb::envoy::config::core::v3::{
    AggregatedConfigSource, ConfigSource, HttpProtocolOptions, SelfConfigSource,
    TypedExtensionConfig,
};
use envoy_types::pb::envoy::config::listener::v3::ApiListener;
use envoy_types::pb::envoy::config::route::v3::route::Action;
use envoy_types::pb::envoy::config::route::v3::route_action::ClusterSpecifier;
use envoy_types::pb::envoy::config::route::v3::route_match::PathSpecifier;
use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteAction as ProtoRouteAction, RouteConfiguration, RouteMatch, VirtualHost,
};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    Rds, ScopedRoutes,
};
use envoy_types::pb::envoy::service::discovery::v3::Resource;

fn ads() -> Option<ConfigSource> {
    Some(ConfigSource {
        config_source_specifier: Some(ConfigSourceSpecifier::Ads(AggregatedConfigSource {})),
        ..Default::default()
    })
}

fn rds(name: &str, config_source: Option<ConfigSource>) -> Option<RouteSpecifier> {
    Some(RouteSpecifier::Rds(Rds {
        config_source,
        route_config_name: name.into(),
    }))
}

fn hcm(route_specifier: Option<RouteSpecifier>) -> HttpConnectionManager {
    HttpConnectionManager {
        route_specifier,
        http_filters: vec![router()],
        ..Default::default()
    }
}

fn listener_with(api: Option<Any>) -> ProtoListener {
    ProtoListener {
        name: "l".into(),
        api_listener: Some(ApiListener { api_listener: api }),
        ..Default::default()
    }
}

fn listener(h: &HttpConnectionManager) -> ProtoListener {
    listener_with(Some(any(h)))
}

fn nack(h: &HttpConnectionManager) -> String {
    parse_listener(&listener(h)).expect_err("invalid").field
}

#[test]
fn an_rds_listener() {
    let mut h = hcm(rds("routes", ads()));
    h.common_http_protocol_options = Some(HttpProtocolOptions {
        max_stream_duration: Some(to_proto(Duration::from_secs(9))),
        ..Default::default()
    });
    let got = parse_listener(&listener(&h)).expect("valid");
    assert_eq!(got.name, "l");
    assert_eq!(
        got.route_source,
        RouteSource::Rds {
            name: "routes".into()
        }
    );
    assert_eq!(got.max_stream_duration, Some(Duration::from_secs(9)));
    assert_eq!(got.http_filters.len(), 1);
    assert_eq!(got.http_filters[0].kind, HttpFilterKind::Router);

    let self_source = Some(ConfigSource {
        config_source_specifier: Some(ConfigSourceSpecifier::Self_(SelfConfigSource::default())),
        ..Default::default()
    });
    assert!(parse_listener(&listener(&hcm(rds("routes", self_source)))).is_ok());
}

#[test]
fn the_default_stream_duration() {
    let with = |d: Option<Duration>| {
        let mut h = hcm(rds("r", ads()));
        h.common_http_protocol_options = Some(HttpProtocolOptions {
            max_stream_duration: d.map(to_proto),
            ..Default::default()
        });
        h
    };
    assert_eq!(
        parse_listener(&listener(&with(None)))
            .expect("valid")
            .max_stream_duration,
        None
    );
    assert_eq!(
        parse_listener(&listener(&with(Some(Duration::ZERO))))
            .expect("valid")
            .max_stream_duration,
        None,
        "0 is no limit"
    );
    let mut bad = with(None);
    if let Some(o) = &mut bad.common_http_protocol_options {
        o.max_stream_duration = Some(envoy_types::pb::google::protobuf::Duration {
            seconds: 0,
            nanos: -5,
        });
    }
    assert_eq!(
        nack(&bad),
        "api_listener.api_listener.common_http_protocol_options.max_stream_duration"
    );
}

#[test]
fn the_name_and_the_api_listener_are_required() {
    let mut l = listener(&hcm(rds("r", ads())));
    l.name.clear();
    assert_eq!(parse_listener(&l).expect_err("no name").field, "name");
    assert_eq!(
        parse_listener(&listener_with(None))
            .expect_err("no HCM")
            .field,
        "api_listener.api_listener"
    );
    let no_api = ProtoListener {
        name: "l".into(),
        ..Default::default()
    };
    assert_eq!(
        parse_listener(&no_api).expect_err("no api_listener").field,
        "api_listener.api_listener"
    );
    let other = listener_with(Some(any_of_type(
        "envoy.config.route.v3.RouteConfiguration",
    )));
    assert_eq!(
        parse_listener(&other).expect_err("not an HCM").field,
        "api_listener.api_listener"
    );
    let garbage = listener_with(Some(Any {
        type_url: format!("type.googleapis.com/{HCM_TYPE}"),
        value: vec![0xff],
    }));
    assert!(parse_listener(&garbage).is_err());
}

#[test]
fn rds_rules() {
    assert_eq!(
        nack(&hcm(rds("r", None))),
        "api_listener.api_listener.rds.config_source"
    );
    let api = Some(ConfigSource {
        config_source_specifier: Some(ConfigSourceSpecifier::ApiConfigSource(Default::default())),
        ..Default::default()
    });
    assert_eq!(
        nack(&hcm(rds("r", api))),
        "api_listener.api_listener.rds.config_source"
    );
    assert_eq!(
        nack(&hcm(rds("", ads()))),
        "api_listener.api_listener.rds.route_config_name"
    );
    assert_eq!(
        nack(&hcm(Some(RouteSpecifier::ScopedRoutes(
            ScopedRoutes::default()
        )))),
        "api_listener.api_listener.scoped_routes"
    );
    assert_eq!(nack(&hcm(None)), "api_listener.api_listener");
}

fn inline(domains: &[&str]) -> Option<RouteSpecifier> {
    Some(RouteSpecifier::RouteConfig(RouteConfiguration {
        virtual_hosts: vec![VirtualHost {
            domains: domains.iter().map(|d| d.to_string()).collect(),
            routes: vec![Route {
                r#match: Some(RouteMatch {
                    path_specifier: Some(PathSpecifier::Prefix(String::new())),
                    ..Default::default()
                }),
                action: Some(Action::Route(ProtoRouteAction {
                    cluster_specifier: Some(ClusterSpecifier::Cluster("c".into())),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }))
}

#[test]
fn an_inline_route_configuration() {
    let got = parse_listener(&listener(&hcm(inline(&["*"])))).expect("valid");
    let RouteSource::Inline(rc) = got.route_source else {
        panic!("inline expected");
    };
    assert_eq!(
        rc.virtual_hosts[0].routes[0].action,
        RouteAction::Cluster("c".into())
    );
    assert_eq!(
        nack(&hcm(inline(&[]))),
        "api_listener.api_listener.route_config.virtual_hosts[0].domains"
    );
}

#[test]
fn a41_restrictions() {
    let mut h = hcm(rds("r", ads()));
    h.xff_num_trusted_hops = 1;
    assert_eq!(nack(&h), "api_listener.api_listener.xff_num_trusted_hops");
    let mut h = hcm(rds("r", ads()));
    h.original_ip_detection_extensions
        .push(TypedExtensionConfig::default());
    assert_eq!(
        nack(&h),
        "api_listener.api_listener.original_ip_detection_extensions"
    );
}

#[test]
fn http_filters_are_checked() {
    let mut h = hcm(rds("r", ads()));
    h.http_filters.clear();
    assert_eq!(nack(&h), "api_listener.api_listener.http_filters");
    h.http_filters = vec![
        filter(
            "fault",
            any_of_type("envoy.extensions.filters.http.fault.v3.HTTPFault"),
            false,
        ),
        router(),
    ];
    assert_eq!(
        nack(&h),
        "api_listener.api_listener.http_filters[0].typed_config"
    );
    h.http_filters[0].is_optional = true;
    let got = parse_listener(&listener(&h)).expect("optional dropped");
    assert_eq!(got.http_filters.len(), 1);
    // A39: an optional telemetry filter appended after the router is dropped, and the Listener accepted.
    h.http_filters.reverse();
    let got = parse_listener(&listener(&h)).expect("[router, optional unknown] is accepted");
    assert_eq!(got.http_filters.len(), 1);
    assert_eq!(got.http_filters[0].kind, HttpFilterKind::Router);
}

#[test]
fn from_an_any_wrapped_or_not() {
    let l = listener(&hcm(rds("r", ads())));
    let plain = any(&l);
    let wrapped = Any {
        type_url: RESOURCE_WRAPPER_TYPE_URL.into(),
        value: Resource {
            name: "l".into(),
            resource: Some(plain.clone()),
            ..Default::default()
        }
        .encode_to_vec(),
    };
    for a in [plain, wrapped] {
        assert_eq!(parse_listener_any(&a).expect("valid").name, "l");
    }
    assert!(parse_listener_any(&any_of_type("envoy.config.cluster.v3.Cluster")).is_err());
}
