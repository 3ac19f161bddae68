//! HTTP filters (gRFC A39): an HttpConnectionManager's `http_filters` list, and the
//! `typed_per_filter_config` overrides of virtual hosts, routes and weighted cluster entries.
//!
//! The client implements one filter, the router (`envoy.extensions.filters.http.router.v3.Router`), which
//! is terminal. A filter list must be non-empty, its names non-empty and unique; a filter of a type the
//! client does not implement is a NACK unless it is `is_optional`, in which case it is dropped; a
//! `TypedStruct` (`udpa.type.v1` or `xds.type.v3`) stands for the type it names. Of the filters that
//! remain once the optional unknown ones are dropped, the last must be the router and no terminal filter
//! may come earlier (so `[router, optional unknown filter]` is valid, as in grpc-go and C-core). An
//! override names a filter type the same way, possibly inside an `envoy.config.route.v3.FilterConfig`
//! carrying `is_optional`; an unknown type that is not optional is a NACK, and so is an override for the
//! router (which takes none).
//!
//! Not here: filters other than the router (fault injection, RBAC, stateful sessions), and filter
//! configuration discovery (`config_discovery`, treated as a config of unknown type).

use std::collections::{HashMap, HashSet};

use envoy_types::pb::envoy::config::route::v3::FilterConfig;
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_filter::ConfigType;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpFilter as ProtoHttpFilter;
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

use super::ResourceError;

/// The router filter's config type.
const ROUTER: &str = "envoy.extensions.filters.http.router.v3.Router";
/// The two `TypedStruct` types, which carry another type's name and a JSON-like value.
const TYPED_STRUCTS: [&str; 2] = ["udpa.type.v1.TypedStruct", "xds.type.v3.TypedStruct"];
/// The per-route wrapper that adds `is_optional` to an override.
const FILTER_CONFIG: &str = "envoy.config.route.v3.FilterConfig";

/// `udpa.type.v1.TypedStruct` and `xds.type.v3.TypedStruct` (same shape): only the type they name is
/// read; the value (a `google.protobuf.Struct`) is skipped.
#[derive(Clone, PartialEq, Message)]
struct TypedStruct {
    /// The type URL of the configuration the struct stands for.
    #[prost(string, tag = "1")]
    type_url: String,
}

/// One HTTP filter the client runs, in the listener's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpFilter {
    /// The filter's name in the listener (unique there).
    pub name: String,
    /// What it is.
    pub kind: HttpFilterKind,
}

/// The filters the client implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpFilterKind {
    /// The router: the terminal filter that sends the call on (always last).
    Router,
}

impl HttpFilterKind {
    /// Whether the filter ends the chain.
    pub fn is_terminal(self) -> bool {
        match self {
            HttpFilterKind::Router => true,
        }
    }
}

/// The message type a type URL names: the part after its last `/`.
pub(crate) fn type_name(type_url: &str) -> &str {
    type_url.rsplit('/').next().unwrap_or(type_url)
}

/// The type an `Any` configures, seen through a `TypedStruct`, and whether the `Any` held the message
/// itself (rather than a `TypedStruct` standing for it).
fn configured_type(any: &Any) -> Result<(String, bool), ResourceError> {
    let name = type_name(&any.type_url);
    if TYPED_STRUCTS.contains(&name) {
        let inner = TypedStruct::decode(any.value.as_slice())
            .map_err(|e| ResourceError::new("", format!("cannot decode {name}: {e}")))?;
        Ok((type_name(&inner.type_url).to_owned(), false))
    } else {
        Ok((name.to_owned(), true))
    }
}

/// The filter a config type names, if the client implements it. A router config given as itself must
/// decode.
fn known_filter(any: &Any) -> Result<Option<HttpFilterKind>, ResourceError> {
    let (name, direct) = configured_type(any)?;
    if name != ROUTER {
        return Ok(None);
    }
    if direct {
        Router::decode(any.value.as_slice())
            .map_err(|e| ResourceError::new("", format!("cannot decode {ROUTER}: {e}")))?;
    }
    Ok(Some(HttpFilterKind::Router))
}

/// An HttpConnectionManager's `http_filters`: the filters the client runs (optional unknown ones
/// dropped), ending with the router. Names are checked over every filter, the dropped ones too; the
/// terminal-filter rules over the filters that remain (as grpc-go and C-core do), so an optional unknown
/// filter after the router is simply dropped. Errors name `http_filters[i]`.
pub(crate) fn parse_http_filters(
    filters: &[ProtoHttpFilter],
) -> Result<Vec<HttpFilter>, ResourceError> {
    if filters.is_empty() {
        return Err(ResourceError::new(
            "http_filters",
            "at least one filter (the router) is required",
        ));
    }
    let at = |i: usize, e: ResourceError| e.within(&format!("http_filters[{i}]"));
    let mut names: HashSet<&str> = HashSet::with_capacity(filters.len());
    // The filters the client runs, each with its index in the list.
    let mut kept: Vec<(usize, HttpFilter)> = Vec::new();
    for (i, f) in filters.iter().enumerate() {
        if f.name.is_empty() {
            return Err(at(i, ResourceError::new("name", "must not be empty")));
        }
        if !names.insert(&f.name) {
            return Err(at(
                i,
                ResourceError::new("name", format!("duplicate filter name {:?}", f.name)),
            ));
        }
        let kind = match &f.config_type {
            Some(ConfigType::TypedConfig(any)) => {
                known_filter(any).map_err(|e| at(i, e.within("typed_config")))?
            }
            Some(ConfigType::ConfigDiscovery(_)) | None => None,
        };
        match kind {
            Some(kind) => kept.push((
                i,
                HttpFilter {
                    name: f.name.clone(),
                    kind,
                },
            )),
            None if f.is_optional => {}
            None => {
                return Err(at(
                    i,
                    ResourceError::new(
                        "typed_config",
                        "a filter type the client does not implement, and not optional",
                    ),
                ))
            }
        }
    }
    let earlier = match kept.split_last() {
        Some(((_, last), earlier)) if last.kind.is_terminal() => earlier,
        _ => {
            return Err(ResourceError::new(
                "http_filters",
                "the last filter must be the router",
            ))
        }
    };
    if let Some((i, _)) = earlier.iter().find(|(_, f)| f.kind.is_terminal()) {
        return Err(at(
            *i,
            ResourceError::new("", "a terminal filter must be the last filter"),
        ));
    }
    Ok(kept.into_iter().map(|(_, f)| f).collect())
}

/// Validates a `typed_per_filter_config` map (of a virtual host, route or weighted cluster entry). The
/// client keeps no override, since its only filter takes none. Errors name
/// `typed_per_filter_config["key"]`; keys are checked in sorted order so the NACK is deterministic.
pub(crate) fn validate_filter_overrides(
    overrides: &HashMap<String, Any>,
) -> Result<(), ResourceError> {
    let mut keys: Vec<&String> = overrides.keys().collect();
    keys.sort();
    for key in keys {
        let field = format!("typed_per_filter_config[{key:?}]");
        if key.is_empty() {
            return Err(ResourceError::new(
                field,
                "the filter name must not be empty",
            ));
        }
        let Some(any) = overrides.get(key) else {
            continue;
        };
        validate_override(any).map_err(|e| e.within(&field))?;
    }
    Ok(())
}

/// One override: unwrap `FilterConfig`, then the type must be known (or the override optional).
fn validate_override(any: &Any) -> Result<(), ResourceError> {
    let wrapper;
    let (config, optional) = if type_name(&any.type_url) == FILTER_CONFIG {
        wrapper = FilterConfig::decode(any.value.as_slice())
            .map_err(|e| ResourceError::new("", format!("cannot decode {FILTER_CONFIG}: {e}")))?;
        match &wrapper.config {
            Some(config) => (config, wrapper.is_optional),
            None if wrapper.is_optional => return Ok(()),
            None => return Err(ResourceError::new("config", "required")),
        }
    } else {
        (any, false)
    };
    let (name, _) = configured_type(config)?;
    match name.as_str() {
        ROUTER => Err(ResourceError::new(
            "",
            "the router filter takes no per-route override",
        )),
        _ if optional => Ok(()),
        _ => Err(ResourceError::new(
            "",
            format!("an override for a filter type the client does not implement: {name}"),
        )),
    }
}

#[cfg(test)]
mod tests;
