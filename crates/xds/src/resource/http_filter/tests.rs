use super::*;
use crate::resource::testing::{any, any_of_type, filter, router, typed_struct};

const FAULT: &str = "envoy.extensions.filters.http.fault.v3.HTTPFault";

fn names(filters: &[HttpFilter]) -> Vec<&str> {
    filters.iter().map(|f| f.name.as_str()).collect()
}

#[test]
fn the_router_alone_is_a_valid_chain() {
    let got = parse_http_filters(&[router()]).expect("valid");
    assert_eq!(
        got,
        vec![HttpFilter {
            name: "router".into(),
            kind: HttpFilterKind::Router
        }]
    );
}

#[test]
fn an_empty_list_is_nacked() {
    let err = parse_http_filters(&[]).expect_err("empty");
    assert_eq!(err.field, "http_filters");
}

#[test]
fn names_must_be_non_empty_and_unique() {
    let err = parse_http_filters(&[filter("", any_of_type(FAULT), true), router()])
        .expect_err("empty name");
    assert_eq!(err.field, "http_filters[0].name");
    let err = parse_http_filters(&[filter("router", any_of_type(FAULT), true), router()])
        .expect_err("duplicate, even of a dropped filter");
    assert_eq!(err.field, "http_filters[1].name");
}

#[test]
fn unknown_types_are_nacked_unless_optional() {
    let err = parse_http_filters(&[filter("fault", any_of_type(FAULT), false), router()])
        .expect_err("unknown");
    assert_eq!(err.field, "http_filters[0].typed_config");
    let got = parse_http_filters(&[filter("fault", any_of_type(FAULT), true), router()])
        .expect("optional");
    assert_eq!(
        names(&got),
        ["router"],
        "the optional unknown filter is dropped"
    );
    let mut no_config = router();
    no_config.name = "none".into();
    no_config.config_type = None;
    assert!(parse_http_filters(&[no_config.clone(), router()]).is_err());
    no_config.is_optional = true;
    assert!(parse_http_filters(&[no_config, router()]).is_ok());
}

#[test]
fn typed_structs_stand_for_the_type_they_name() {
    for package in ["udpa.type.v1", "xds.type.v3"] {
        let got = parse_http_filters(&[filter("r", typed_struct(package, ROUTER), false)])
            .expect("router");
        assert_eq!(got[0].kind, HttpFilterKind::Router, "{package}");
        let err = parse_http_filters(&[filter("f", typed_struct(package, FAULT), false), router()])
            .expect_err("unknown inside the struct");
        assert_eq!(err.field, "http_filters[0].typed_config");
    }
    let broken = Any {
        type_url: "type.googleapis.com/xds.type.v3.TypedStruct".into(),
        value: vec![0xff],
    };
    assert!(
        parse_http_filters(&[filter("r", broken, true)]).is_err(),
        "undecodable struct"
    );
}

#[test]
fn an_optional_unknown_filter_after_the_router_is_dropped_before_the_chain_is_checked() {
    // A39 as grpc-go and C-core apply it: the router must end the filters the client runs, and an optional
    // filter the client does not know is not one of them.
    let got = parse_http_filters(&[router(), filter("telemetry", any_of_type(FAULT), true)])
        .expect("the router ends the chain the client runs");
    assert_eq!(names(&got), ["router"]);
    let err = parse_http_filters(&[router(), filter("fault", any_of_type(FAULT), false)])
        .expect_err("an unknown filter that is not optional");
    assert_eq!(err.field, "http_filters[1].typed_config");
}

#[test]
fn the_router_must_be_last() {
    let mut second = router();
    second.name = "router2".into();
    let err = parse_http_filters(&[router(), second]).expect_err("two terminal filters");
    assert_eq!(err.field, "http_filters[0]");
    let err =
        parse_http_filters(&[filter("fault", any_of_type(FAULT), true)]).expect_err("no router");
    assert_eq!(err.field, "http_filters");
    let bad_router = Any {
        type_url: format!("type.googleapis.com/{ROUTER}"),
        value: vec![0xff],
    };
    assert!(parse_http_filters(&[filter("r", bad_router, false)]).is_err());
}

fn overrides(entries: &[(&str, Any)]) -> HashMap<String, Any> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn wrapped(config: Option<Any>, is_optional: bool) -> Any {
    any(&FilterConfig {
        config,
        is_optional,
        disabled: false,
    })
}

#[test]
fn per_filter_overrides() {
    assert_eq!(validate_filter_overrides(&HashMap::new()), Ok(()));
    let err = validate_filter_overrides(&overrides(&[("fault", any_of_type(FAULT))]))
        .expect_err("unknown");
    assert_eq!(err.field, "typed_per_filter_config[\"fault\"]");
    assert_eq!(
        validate_filter_overrides(&overrides(&[(
            "fault",
            wrapped(Some(any_of_type(FAULT)), true)
        )])),
        Ok(()),
        "an optional unknown override is ignored"
    );
    assert!(validate_filter_overrides(&overrides(&[(
        "fault",
        wrapped(Some(any_of_type(FAULT)), false)
    )]))
    .is_err());
    assert!(
        validate_filter_overrides(&overrides(&[("f", typed_struct("xds.type.v3", FAULT))]))
            .is_err()
    );
    assert!(validate_filter_overrides(&overrides(&[(
        "",
        wrapped(Some(any_of_type(FAULT)), true)
    )]))
    .is_err());
    assert!(validate_filter_overrides(&overrides(&[("router", any(&Router::default()))])).is_err());
    assert!(validate_filter_overrides(&overrides(&[("f", wrapped(None, false))])).is_err());
    assert_eq!(
        validate_filter_overrides(&overrides(&[("f", wrapped(None, true))])),
        Ok(())
    );
    let err = validate_filter_overrides(&overrides(&[
        ("b", any_of_type(FAULT)),
        ("a", any_of_type(FAULT)),
    ]))
    .expect_err("unknown");
    assert_eq!(
        err.field, "typed_per_filter_config[\"a\"]",
        "keys in sorted order"
    );
}

#[test]
fn optional_unknown_filters_anywhere_are_dropped_before_the_terminal_checks() {
    // A39: optional unknown filters are dropped wherever they are, before the router-last checks.
    let opt = |name: &str| filter(name, any_of_type(FAULT), true);
    let got = parse_http_filters(&[opt("a"), router(), opt("b"), opt("c")]).expect("valid");
    assert_eq!(names(&got), ["router"]);
    let got = parse_http_filters(&[
        opt("a"),
        filter("r", typed_struct("udpa.type.v1", ROUTER), false),
    ])
    .expect("a router given as a TypedStruct");
    assert_eq!(names(&got), ["r"]);
    // Nothing but optional unknown filters: no router remains.
    let err = parse_http_filters(&[opt("a"), opt("b")]).expect_err("no router");
    assert_eq!(err.field, "http_filters");
    // Two routers with an optional filter between them: the first is terminal but not last.
    let second = filter("router2", any(&Router::default()), false);
    let err = parse_http_filters(&[router(), opt("a"), second]).expect_err("router twice");
    assert_eq!(err.field, "http_filters[0]");
    // A duplicate name among dropped filters is still a NACK (grpc-go checks names first).
    let err = parse_http_filters(&[opt("a"), opt("a"), router()]).expect_err("duplicate");
    assert_eq!(err.field, "http_filters[1].name");
}
