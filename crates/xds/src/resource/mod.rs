//! xDS resources as the client uses them (gRFC A27 and the validation rules of A28, A31, A32, A37, A39,
//! A42, A44, A46, A63): each `envoy.config.*` message is decoded from its `Any`, validated, and turned into
//! a typed value holding only what a gRPC client acts on. An invalid resource is a [`ResourceError`], which
//! becomes the response's NACK `error_detail` while the resource's previous value (if any) stays in use
//! (A46). Fields the client does not act on are ignored on purpose.
//!
//! This module holds what every resource type shares: the four types and their URLs, and the decoding of
//! a response's `Any` (unwrapping `envoy.service.discovery.v3.Resource`), and [`decode`], which turns any
//! of them into a [`Resource`] ([`decode_response`] all those of a response, within the response's regex
//! budget; [`decode_response_with`] with the [`DecodeContext`] of the client's bootstrap, which a Cluster's
//! certificate provider instances are checked against). What a resource's regexes may cost is bounded per
//! resource and per response (`matcher`). Its submodules parse the resources: `listener` (LDS, with
//! `http_filter`), `route` (RDS, with `matcher` and `retry`), `cluster` (CDS, with A50's mapping in
//! `outlier_detection` and A29's `transport_socket` in `upstream_tls`) and `endpoint` (EDS). Not here: the cache, watchers and timers, and the ADS stream.

use envoy_types::pb::google::protobuf::Any;
use prost::Message;

mod any;
mod cluster;
mod context;
mod endpoint;
mod outlier_detection;
mod upstream_tls;

pub use any::{decode, decode_response, decode_response_with, decode_with, Decoded, Resource};
pub use cluster::{
    Cluster, ClusterKind, ClusterLb, LoadReporting, AGGREGATE_CLUSTER_TYPE_URL,
    DEFAULT_CHOICE_COUNT, DEFAULT_MAX_REQUESTS, DEFAULT_MIN_RING_SIZE, MAX_RING_SIZE,
};
pub use context::DecodeContext;
pub use endpoint::{
    DropOverload, Endpoint, EndpointHealth, Endpoints, LocalityEndpoints, LocalityId, Priority,
};
pub use outlier_detection::outlier_detection_config;
pub use upstream_tls::{
    MAX_SAN_MATCHERS, MAX_SNI_LENGTH, TLS_TRANSPORT_SOCKET_NAME, UPSTREAM_TLS_CONTEXT_TYPE_URL,
};

pub(crate) mod duration;
mod http_filter;
mod listener;
mod matcher;
mod retry;
mod route;
mod security;
#[cfg(test)]
pub(crate) mod testing;

pub use http_filter::{HttpFilter, HttpFilterKind};
pub use listener::{parse_listener, parse_listener_any, Listener, RouteSource};
pub use matcher::{HeaderMatch, HeaderMatcher, PathMatch, PathMatcher, SafeRegex, StringMatch};
pub use retry::RetryPolicy;
pub use route::{
    parse_route_config, parse_route_config_any, ClusterWeight, HashPolicy, HashPolicyKind,
    MaxStreamDuration, RegexRewrite, Route, RouteAction, RouteConfig, RouteMatcher, VirtualHost,
};
pub use security::{san_matches, ClusterSecurity, ProviderInstance, RootSource, SubjectAltName};

/// The four resource types of gRPC's xDS client, in the order a channel needs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceType {
    /// LDS: `envoy.config.listener.v3.Listener`.
    Listener,
    /// RDS: `envoy.config.route.v3.RouteConfiguration`.
    RouteConfiguration,
    /// CDS: `envoy.config.cluster.v3.Cluster`.
    Cluster,
    /// EDS: `envoy.config.endpoint.v3.ClusterLoadAssignment`.
    ClusterLoadAssignment,
}

impl ResourceType {
    /// Every type.
    pub const ALL: [ResourceType; 4] = [
        ResourceType::Listener,
        ResourceType::RouteConfiguration,
        ResourceType::Cluster,
        ResourceType::ClusterLoadAssignment,
    ];

    /// The type URL of the resource type (and of its `Any`s).
    pub fn type_url(self) -> &'static str {
        match self {
            ResourceType::Listener => "type.googleapis.com/envoy.config.listener.v3.Listener",
            ResourceType::RouteConfiguration => {
                "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
            }
            ResourceType::Cluster => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            ResourceType::ClusterLoadAssignment => {
                "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
            }
        }
    }

    /// The type with this URL, if it is one of the four.
    pub fn from_type_url(url: &str) -> Option<ResourceType> {
        ResourceType::ALL.into_iter().find(|t| t.type_url() == url)
    }

    /// Whether a resource missing from a response means it was deleted (state of the world: only
    /// Listener and Cluster responses list every subscribed resource).
    pub fn deletion_by_absence(self) -> bool {
        matches!(self, ResourceType::Listener | ResourceType::Cluster)
    }
}

/// Why a resource was rejected: the NACK's detail. `field` is the path to the offending field inside the
/// resource (`virtual_hosts[0].routes[2].match.safe_regex`), empty for the resource as a whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
pub struct ResourceError {
    /// The path to the field at fault.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ResourceError {
    /// An error at `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> ResourceError {
        ResourceError {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The same error seen from an enclosing field: `outer.field`.
    pub fn within(self, outer: &str) -> ResourceError {
        let field = match (outer.is_empty(), self.field.is_empty()) {
            (true, _) => self.field,
            (false, true) => outer.to_owned(),
            (false, false) if self.field.starts_with('[') => format!("{outer}{}", self.field),
            (false, false) => format!("{outer}.{}", self.field),
        };
        ResourceError {
            field,
            reason: self.reason,
        }
    }
}

/// The `Resource` wrapper's type URL (`envoy.service.discovery.v3.Resource`), which a server may put around
/// each resource of a response.
pub const RESOURCE_WRAPPER_TYPE_URL: &str =
    "type.googleapis.com/envoy.service.discovery.v3.Resource";

/// The message of type `T` in a response's `Any`, unwrapped from `envoy.service.discovery.v3.Resource` if
/// the server wrapped it. Fails when the `Any` holds another type or does not decode.
pub fn decode_any<T: Message + Default>(
    any: &Any,
    resource_type: ResourceType,
) -> Result<T, ResourceError> {
    let inner;
    let any = if any.type_url == RESOURCE_WRAPPER_TYPE_URL {
        let wrapper =
            envoy_types::pb::envoy::service::discovery::v3::Resource::decode(any.value.as_slice())
                .map_err(|e| {
                    ResourceError::new("", format!("cannot decode the Resource wrapper: {e}"))
                })?;
        inner = wrapper
            .resource
            .ok_or_else(|| ResourceError::new("resource", "the Resource wrapper is empty"))?;
        &inner
    } else {
        any
    };
    if any.type_url != resource_type.type_url() {
        return Err(ResourceError::new(
            "",
            format!(
                "a {} response holds a resource of type {:?}",
                resource_type.type_url(),
                any.type_url
            ),
        ));
    }
    T::decode(any.value.as_slice()).map_err(|e| {
        ResourceError::new(
            "",
            format!("cannot decode {}: {e}", resource_type.type_url()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::service::discovery::v3::Resource;

    fn any_of<T: Message>(url: &str, m: &T) -> Any {
        Any {
            type_url: url.to_owned(),
            value: m.encode_to_vec(),
        }
    }

    #[test]
    fn type_urls_round_trip() {
        for t in ResourceType::ALL {
            assert_eq!(ResourceType::from_type_url(t.type_url()), Some(t));
        }
        assert_eq!(ResourceType::from_type_url("type.googleapis.com/x"), None);
    }

    #[test]
    fn a_wrapped_resource_is_unwrapped() {
        let cluster = Cluster {
            name: "c".to_owned(),
            ..Default::default()
        };
        let plain = any_of(ResourceType::Cluster.type_url(), &cluster);
        let wrapped = any_of(
            RESOURCE_WRAPPER_TYPE_URL,
            &Resource {
                name: "c".to_owned(),
                resource: Some(plain.clone()),
                ..Default::default()
            },
        );
        for any in [plain, wrapped] {
            let got: Cluster = decode_any(&any, ResourceType::Cluster).expect("decodes");
            assert_eq!(got.name, "c");
        }
    }

    #[test]
    fn a_resource_of_another_type_is_an_error() {
        let any = any_of(ResourceType::Listener.type_url(), &Cluster::default());
        let err = decode_any::<Cluster>(&any, ResourceType::Cluster).expect_err("wrong type");
        assert!(
            err.reason.contains("envoy.config.listener.v3.Listener"),
            "{err}"
        );
        let garbage = Any {
            type_url: ResourceType::Cluster.type_url().to_owned(),
            value: vec![0xff, 0xff, 0xff],
        };
        assert!(decode_any::<Cluster>(&garbage, ResourceType::Cluster).is_err());
    }

    #[test]
    fn errors_name_their_field_path() {
        let e = ResourceError::new("safe_regex", "bad regex")
            .within("match")
            .within("routes[2]")
            .within("virtual_hosts[0]");
        assert_eq!(e.field, "virtual_hosts[0].routes[2].match.safe_regex");
        assert_eq!(
            e.to_string(),
            "virtual_hosts[0].routes[2].match.safe_regex: bad regex"
        );
        let e = ResourceError::new("", "empty")
            .within("endpoints")
            .within("[3]");
        assert_eq!(e.field, "[3].endpoints");
    }
}
