//! The Listener resource (LDS) as a client uses it (gRFC A27, with A31's default stream duration, A39's
//! HTTP filters and A41's restrictions): an `envoy.config.listener.v3.Listener` whose `api_listener` holds
//! an HttpConnectionManager, validated and turned into a [`Listener`]: where its routes come from, the
//! default `max_stream_duration`, and the HTTP filters the client runs.
//!
//! Rules (each a NACK): the name is non-empty; `api_listener.api_listener` is an `Any` of
//! `envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager`; the manager has
//! either `rds` (its `config_source` is `ads` or `self`, its `route_config_name` non-empty) or an inline
//! `route_config` (validated as in `route`, its regexes within the Listener's budget), and not `scoped_routes` or nothing; `xff_num_trusted_hops` is 0
//! and `original_ip_detection_extensions` empty; `http_filters` as in `http_filter`.
//!
//! Not here: server-side listeners (filter chains, addresses), the rest of the manager's fields (ignored
//! on purpose), and fetching the RouteConfiguration an `rds` names.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
use envoy_types::pb::envoy::config::listener::v3::Listener as ProtoListener;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::RouteSpecifier;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

use super::http_filter::{parse_http_filters, type_name, HttpFilter};
use super::matcher::RegexBudget;
use super::route::{parse_route_config_within, RouteConfig};
use super::{decode_any, duration, ResourceError, ResourceType};

/// The HttpConnectionManager's message type (a type URL names it after its last `/`).
const HCM_TYPE: &str =
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

/// A validated Listener.
#[derive(Clone, Debug, PartialEq)]
pub struct Listener {
    /// The resource's name (non-empty).
    pub name: String,
    /// Where the routes come from.
    pub route_source: RouteSource,
    /// The default stream duration limit (A31), from the manager's
    /// `common_http_protocol_options.max_stream_duration`; `None` when unset or 0.
    pub max_stream_duration: Option<Duration>,
    /// The filters the client runs, in order; the last is the router.
    pub http_filters: Vec<HttpFilter>,
}

/// Where a Listener's routes come from.
#[derive(Clone, Debug, PartialEq)]
pub enum RouteSource {
    /// A RouteConfiguration resource of this (non-empty) name, from the same ADS stream.
    Rds {
        /// The RouteConfiguration's name.
        name: String,
    },
    /// A RouteConfiguration inside the Listener.
    Inline(RouteConfig),
}

/// Validates a Listener (the regexes of an inline route configuration within one resource's budget).
pub fn parse_listener(l: &ProtoListener) -> Result<Listener, ResourceError> {
    parse_listener_within(l, &mut RegexBudget::resource())
}

/// Validates a Listener whose regexes must fit in `budget`.
pub(crate) fn parse_listener_within(
    l: &ProtoListener,
    budget: &mut RegexBudget,
) -> Result<Listener, ResourceError> {
    if l.name.is_empty() {
        return Err(ResourceError::new("name", "must not be empty"));
    }
    let any = l
        .api_listener
        .as_ref()
        .and_then(|a| a.api_listener.as_ref())
        .ok_or_else(|| ResourceError::new("api_listener.api_listener", "required"))?;
    let (route_source, max_stream_duration, http_filters) =
        parse_hcm(any, budget).map_err(|e| e.within("api_listener.api_listener"))?;
    Ok(Listener {
        name: l.name.clone(),
        route_source,
        max_stream_duration,
        http_filters,
    })
}

/// Decodes (see [`decode_any`]) and validates a Listener from a response's `Any`.
pub fn parse_listener_any(any: &Any) -> Result<Listener, ResourceError> {
    parse_listener(&decode_any(any, ResourceType::Listener)?)
}

type Hcm = (RouteSource, Option<Duration>, Vec<HttpFilter>);

fn parse_hcm(any: &Any, budget: &mut RegexBudget) -> Result<Hcm, ResourceError> {
    if type_name(&any.type_url) != HCM_TYPE {
        return Err(ResourceError::new(
            "",
            format!("expected an HttpConnectionManager, got {:?}", any.type_url),
        ));
    }
    let hcm = HttpConnectionManager::decode(any.value.as_slice()).map_err(|e| {
        ResourceError::new("", format!("cannot decode the HttpConnectionManager: {e}"))
    })?;
    if hcm.xff_num_trusted_hops != 0 {
        return Err(ResourceError::new("xff_num_trusted_hops", "must be 0"));
    }
    if !hcm.original_ip_detection_extensions.is_empty() {
        return Err(ResourceError::new(
            "original_ip_detection_extensions",
            "must be empty",
        ));
    }
    let max_stream_duration = match hcm
        .common_http_protocol_options
        .as_ref()
        .and_then(|o| o.max_stream_duration.as_ref())
    {
        None => None,
        Some(d) => Some(duration::from_proto(d).map_err(|e| {
            ResourceError::new("common_http_protocol_options.max_stream_duration", e)
        })?)
        .filter(|d| !d.is_zero()),
    };
    let http_filters = parse_http_filters(&hcm.http_filters)?;
    let route_source = match &hcm.route_specifier {
        Some(RouteSpecifier::Rds(rds)) => {
            match rds
                .config_source
                .as_ref()
                .and_then(|c| c.config_source_specifier.as_ref())
            {
                Some(ConfigSourceSpecifier::Ads(_) | ConfigSourceSpecifier::Self_(_)) => {}
                _ => {
                    return Err(ResourceError::new(
                        "rds.config_source",
                        "must be ads or self",
                    ))
                }
            }
            if rds.route_config_name.is_empty() {
                return Err(ResourceError::new(
                    "rds.route_config_name",
                    "must not be empty",
                ));
            }
            RouteSource::Rds {
                name: rds.route_config_name.clone(),
            }
        }
        Some(RouteSpecifier::RouteConfig(rc)) => RouteSource::Inline(
            parse_route_config_within(rc, budget).map_err(|e| e.within("route_config"))?,
        ),
        Some(RouteSpecifier::ScopedRoutes(_)) => {
            return Err(ResourceError::new(
                "scoped_routes",
                "scoped routes are not supported",
            ))
        }
        None => {
            return Err(ResourceError::new(
                "",
                "neither rds nor route_config is set",
            ))
        }
    };
    Ok((route_source, max_stream_duration, http_filters))
}

#[cfg(test)]
mod tests;
