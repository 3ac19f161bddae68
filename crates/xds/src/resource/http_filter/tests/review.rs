//! Review attacks on A39's dropping of optional unknown filters.

use super::*;

#[test]
fn optional_unknown_filters_anywhere_are_dropped_before_the_terminal_checks() {
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
