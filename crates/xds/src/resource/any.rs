//! Any resource of a response, decoded by its type: [`Resource`] and [`decode`], which reads the name even
//! of an invalid resource where it can, so the client can tell its watchers (A46); [`decode_response`]
//! decodes all the resources of a response within one regex budget for the response (see `matcher`),
//! each resource also within its own; the `_with` forms take the [`DecodeContext`] of the client's
//! bootstrap (the plain ones the empty context: no certificate provider instances).

use envoy_types::pb::envoy::config::cluster::v3 as cds;
use envoy_types::pb::envoy::config::endpoint::v3 as eds;
use envoy_types::pb::envoy::config::listener::v3 as lds;
use envoy_types::pb::envoy::config::route::v3 as rds;
use envoy_types::pb::google::protobuf::Any;

use super::listener::parse_listener_within;
use super::matcher::RegexBudget;
use super::route::parse_route_config_within;
use super::{decode_any, Cluster, DecodeContext, Endpoints, Listener, ResourceType, RouteConfig};

/// One resource in a response, as the caller decoded it.
#[derive(Clone, Debug, PartialEq)]
pub enum Decoded<R> {
    /// A valid resource.
    Valid {
        /// Its name.
        name: String,
        /// Its value.
        value: R,
    },
    /// An invalid one: its name when it could be read, and why it is invalid.
    Invalid {
        /// Its name, if known.
        name: Option<String>,
        /// Why it was rejected.
        reason: String,
    },
}

/// A valid resource of any of the four types.
// A Cluster with its TLS settings is the largest; resources live behind an `Arc` in the client's cache
// and are made once per response, so boxing it would cost an allocation for no saving.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Resource {
    /// A Listener (LDS).
    Listener(Listener),
    /// A RouteConfiguration (RDS).
    RouteConfiguration(RouteConfig),
    /// A Cluster (CDS).
    Cluster(Cluster),
    /// A ClusterLoadAssignment (EDS).
    Endpoints(Endpoints),
}

/// Decodes and validates one resource of a `resource_type` response (its regexes within one resource's
/// budget).
pub fn decode(resource_type: ResourceType, any: &Any) -> Decoded<Resource> {
    decode_with(resource_type, any, &DecodeContext::default())
}

/// [`decode`] for a client whose bootstrap gives `context`.
pub fn decode_with(
    resource_type: ResourceType,
    any: &Any,
    context: &DecodeContext,
) -> Decoded<Resource> {
    decode_within(resource_type, any, context, &mut RegexBudget::resource())
}

/// Decodes and validates every resource of a `resource_type` response, in order. The regexes of each
/// resource must fit in its own budget and those of all of them in the response's: once that is spent,
/// every later resource with a regex is invalid, its error naming the first regex that did not fit, so a
/// response costs a bounded time and memory however many resources it holds.
pub fn decode_response(resource_type: ResourceType, resources: &[Any]) -> Vec<Decoded<Resource>> {
    decode_response_with(resource_type, resources, &DecodeContext::default())
}

/// [`decode_response`] for a client whose bootstrap gives `context` (a Cluster naming a certificate
/// provider instance the context lacks is invalid).
pub fn decode_response_with(
    resource_type: ResourceType,
    resources: &[Any],
    context: &DecodeContext,
) -> Vec<Decoded<Resource>> {
    decode_response_within(
        resource_type,
        resources,
        context,
        &mut RegexBudget::response(),
    )
}

/// [`decode_response_with`] within `budget` (the response's).
fn decode_response_within(
    resource_type: ResourceType,
    resources: &[Any],
    context: &DecodeContext,
    budget: &mut RegexBudget,
) -> Vec<Decoded<Resource>> {
    resources
        .iter()
        .map(|any| {
            let mut own = budget.for_resource();
            let decoded = decode_within(resource_type, any, context, &mut own);
            budget.charge(&own);
            decoded
        })
        .collect()
}

/// [`decode`] within `budget`.
pub(crate) fn decode_within(
    resource_type: ResourceType,
    any: &Any,
    context: &DecodeContext,
    budget: &mut RegexBudget,
) -> Decoded<Resource> {
    fn invalid(name: Option<String>, e: impl std::fmt::Display) -> Decoded<Resource> {
        Decoded::Invalid {
            name: name.filter(|n| !n.is_empty()),
            reason: e.to_string(),
        }
    }
    match resource_type {
        ResourceType::Cluster => match decode_any::<cds::Cluster>(any, resource_type) {
            Err(e) => invalid(None, e),
            Ok(proto) => match Cluster::from_proto_within(&proto, context, budget) {
                Ok(c) => Decoded::Valid {
                    name: c.name.clone(),
                    value: Resource::Cluster(c),
                },
                Err(e) => invalid(Some(proto.name), e),
            },
        },
        ResourceType::ClusterLoadAssignment => {
            match decode_any::<eds::ClusterLoadAssignment>(any, resource_type) {
                Err(e) => invalid(None, e),
                Ok(proto) => match Endpoints::from_proto(&proto) {
                    Ok(e) => Decoded::Valid {
                        name: e.cluster_name.clone(),
                        value: Resource::Endpoints(e),
                    },
                    Err(e) => invalid(Some(proto.cluster_name), e),
                },
            }
        }
        ResourceType::Listener => match decode_any::<lds::Listener>(any, resource_type) {
            Err(e) => invalid(None, e),
            Ok(proto) => match parse_listener_within(&proto, budget) {
                Ok(l) => Decoded::Valid {
                    name: l.name.clone(),
                    value: Resource::Listener(l),
                },
                Err(e) => invalid(Some(proto.name), e),
            },
        },
        ResourceType::RouteConfiguration => {
            match decode_any::<rds::RouteConfiguration>(any, resource_type) {
                Err(e) => invalid(None, e),
                Ok(proto) => match parse_route_config_within(&proto, budget) {
                    Ok(r) => Decoded::Valid {
                        name: r.name.clone(),
                        value: Resource::RouteConfiguration(r),
                    },
                    Err(e) => invalid(Some(proto.name), e),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests;
