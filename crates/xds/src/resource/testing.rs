//! Helpers shared by the resource parsers' tests: `Any`s of messages and of `TypedStruct`s, HTTP filters,
//! and header matchers of one regex.

use envoy_types::pb::envoy::config::route::v3::header_matcher::HeaderMatchSpecifier;
use envoy_types::pb::envoy::config::route::v3::HeaderMatcher;
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_filter::ConfigType, HttpFilter,
};
use envoy_types::pb::envoy::r#type::matcher::v3::RegexMatcher;
use envoy_types::pb::google::protobuf::Any;
use prost::{Message, Name};

/// `m` in an `Any` with its own type URL.
pub(crate) fn any<T: Message + Name>(m: &T) -> Any {
    Any {
        type_url: T::type_url(),
        value: m.encode_to_vec(),
    }
}

/// An `Any` whose type URL names `type_name` (with no meaningful value).
pub(crate) fn any_of_type(type_name: &str) -> Any {
    Any {
        type_url: format!("type.googleapis.com/{type_name}"),
        value: Vec::new(),
    }
}

/// A `TypedStruct` of the given package (`udpa.type.v1` or `xds.type.v3`) standing for `type_name`.
pub(crate) fn typed_struct(package: &str, type_name: &str) -> Any {
    let url = format!("type.googleapis.com/{type_name}");
    // Field 1 (type_url), length-delimited.
    let mut value = vec![0x0a];
    prost::encoding::encode_varint(url.len() as u64, &mut value);
    value.extend_from_slice(url.as_bytes());
    Any {
        type_url: format!("type.googleapis.com/{package}.TypedStruct"),
        value,
    }
}

/// An HTTP filter with this config.
pub(crate) fn filter(name: &str, config: Any, optional: bool) -> HttpFilter {
    HttpFilter {
        name: name.to_owned(),
        config_type: Some(ConfigType::TypedConfig(config)),
        is_optional: optional,
        ..Default::default()
    }
}

/// The router filter, named `router`.
pub(crate) fn router() -> HttpFilter {
    filter("router", any(&Router::default()), false)
}

/// `count` header matchers (`h0`, `h1`, ...), each the `safe_regex_match` `pattern`.
#[allow(deprecated)]
pub(crate) fn header_regexes(count: usize, pattern: &str) -> Vec<HeaderMatcher> {
    (0..count)
        .map(|i| HeaderMatcher {
            name: format!("h{i}"),
            header_match_specifier: Some(HeaderMatchSpecifier::SafeRegexMatch(RegexMatcher {
                regex: pattern.into(),
                ..Default::default()
            })),
            ..Default::default()
        })
        .collect()
}
