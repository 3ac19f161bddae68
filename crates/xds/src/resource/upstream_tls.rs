//! gRFC A29's client half of CDS security: a Cluster's `transport_socket` validated into a
//! [`ClusterSecurity`] (with the `sni` of A101 and the system roots of A82), or a NACK naming the field
//! (`transport_socket.typed_config.common_tls_context.validation_context.crl`). The rules follow grpc-go's
//! `unmarshal_cds.go` and C-core's `xds_cluster_parser.cc`:
//!
//! * the socket is named `envoy.transport_sockets.tls` (grpc-go checks the name) and its `typed_config` is
//!   an `envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext` (the type name after the type
//!   URL's last `/`, any prefix, as in C-core) with a `common_tls_context`;
//! * the roots: `validation_context` with a `ca_certificate_provider_instance`, else `system_root_certs`
//!   (A82); or `combined_validation_context`, whose `default_validation_context`'s
//!   `ca_certificate_provider_instance` comes first, then the deprecated
//!   `validation_context_certificate_provider_instance`, and `system_root_certs` only when neither names
//!   an instance (as in C-core); or the deprecated `validation_context_certificate_provider_instance` in
//!   place of a validation context. No root source is a NACK, and so are the SDS and plugin-config forms
//!   in place of a validation context (`validation_context_sds_secret_config`,
//!   `validation_context_certificate_provider`); in a combined context they are ignored, as C-core and
//!   grpc-go read only its default context and its deprecated instance;
//! * the identity (optional): `tls_certificate_provider_instance`, else the deprecated
//!   `tls_certificate_certificate_provider_instance`; without either, `tls_certificates` or
//!   `tls_certificate_sds_secret_configs` is a NACK (an identity this client cannot load), and so is the
//!   deprecated `tls_certificate_certificate_provider`;
//! * every provider instance named must be one the bootstrap defines ([`DecodeContext`]);
//! * NACKed when set: `tls_params`, `custom_handshaker`, and in the validation context
//!   `verify_certificate_spki`, `verify_certificate_hash`, `require_signed_certificate_timestamp` (when
//!   true), `crl`, `custom_validator_config`, and `match_typed_subject_alt_names` (its SAN types are not
//!   kept, so a client honouring only part of it would accept certificates the control plane meant to
//!   refuse);
//! * `match_subject_alt_names`: at most [`MAX_SAN_MATCHERS`] `StringMatcher`s (`exact`, `prefix`,
//!   `suffix`, `contains`, `safe_regex`, as routes parse them, the regexes within the resource's regex
//!   budget); as in C-core, `ignore_case` with `safe_regex` is a NACK, and so are a matcher without a
//!   pattern and an empty `prefix`, `suffix`, `contains` or regex (Envoy's `min_len`); an empty `exact`
//!   is valid (as in C-core and grpc-go) and matches only an empty SAN, that is nothing;
//! * `sni`: at most [`MAX_SNI_LENGTH`] bytes; empty means none.
//!
//! Ignored: `alpn_protocols`, `key_log`, `allow_renegotiation`, `max_session_keys`,
//! `enforce_rsa_key_usage`, `auto_host_sni` and `auto_sni_san_validation` (A101, not supported yet), and
//! in the validation context `trusted_ca`, `watched_directory`, `allow_expired_certificate`,
//! `trust_chain_verification`, `only_verify_leaf_cert_crl`, `max_verify_depth`. The validation applies
//! whether or not the channel uses xDS credentials. Not here: the SAN check (`security`), the providers
//! and the handshake (grpc-channel).

use envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType;
use envoy_types::pb::envoy::config::core::v3::TransportSocket;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::common_tls_context::{
    CertificateProviderInstance, ValidationContextType,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateProviderPluginInstance, CertificateValidationContext, CommonTlsContext,
    UpstreamTlsContext,
};
use envoy_types::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use prost::Message;

use super::http_filter::type_name;
use super::matcher::{parse_string_matcher, RegexBudget};
use super::{
    ClusterSecurity, DecodeContext, ProviderInstance, ResourceError, RootSource, StringMatch,
};

/// The only transport socket name a Cluster may give (grpc-go checks it).
pub const TLS_TRANSPORT_SOCKET_NAME: &str = "envoy.transport_sockets.tls";

/// The type URL of the transport socket's `typed_config` (only its type name, after the last `/`, is
/// compared: another prefix is accepted, as in C-core).
pub const UPSTREAM_TLS_CONTEXT_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";

/// The most `match_subject_alt_names` a Cluster may list.
pub const MAX_SAN_MATCHERS: usize = 64;

/// The longest `sni` (A101: a DNS name's 255 bytes).
pub const MAX_SNI_LENGTH: usize = 255;

/// The cluster's `transport_socket` as a [`ClusterSecurity`] (field paths relative to the socket).
pub(crate) fn upstream_tls(
    socket: &TransportSocket,
    context: &DecodeContext,
    budget: &mut RegexBudget,
) -> Result<ClusterSecurity, ResourceError> {
    if socket.name != TLS_TRANSPORT_SOCKET_NAME {
        return Err(ResourceError::new(
            "name",
            format!(
                "{:?} is not supported (only {TLS_TRANSPORT_SOCKET_NAME:?})",
                socket.name
            ),
        ));
    }
    let Some(ConfigType::TypedConfig(any)) = &socket.config_type else {
        return Err(ResourceError::new("typed_config", "missing"));
    };
    if type_name(&any.type_url) != type_name(UPSTREAM_TLS_CONTEXT_TYPE_URL) {
        return Err(ResourceError::new(
            "typed_config",
            format!(
                "the type {:?} is not supported (only UpstreamTlsContext)",
                any.type_url
            ),
        ));
    }
    let tls = UpstreamTlsContext::decode(any.value.as_slice()).map_err(|e| {
        ResourceError::new(
            "typed_config",
            format!("cannot decode UpstreamTlsContext: {e}"),
        )
    })?;
    upstream_tls_context(&tls, context, budget).map_err(|e| e.within("typed_config"))
}

/// A decoded `UpstreamTlsContext`.
fn upstream_tls_context(
    tls: &UpstreamTlsContext,
    context: &DecodeContext,
    budget: &mut RegexBudget,
) -> Result<ClusterSecurity, ResourceError> {
    let common = tls
        .common_tls_context
        .as_ref()
        .ok_or_else(|| ResourceError::new("common_tls_context", "missing"))?;
    let (identity, roots, san_matchers) =
        common_tls_context(common, context, budget).map_err(|e| e.within("common_tls_context"))?;
    if tls.sni.len() > MAX_SNI_LENGTH {
        return Err(ResourceError::new(
            "sni",
            format!(
                "{} bytes, more than the {MAX_SNI_LENGTH} allowed",
                tls.sni.len()
            ),
        ));
    }
    Ok(ClusterSecurity {
        identity,
        roots,
        san_matchers,
        sni: (!tls.sni.is_empty()).then(|| tls.sni.clone()),
    })
}

/// What a `CommonTlsContext` yields: the identity, the roots, the SAN matchers.
type Common = (Option<ProviderInstance>, RootSource, Vec<StringMatch>);

#[allow(deprecated)] // The deprecated instance forms are still accepted (A29).
fn common_tls_context(
    common: &CommonTlsContext,
    context: &DecodeContext,
    budget: &mut RegexBudget,
) -> Result<Common, ResourceError> {
    if common.tls_params.is_some() {
        return Err(ResourceError::new("tls_params", "not supported"));
    }
    if common.custom_handshaker.is_some() {
        return Err(ResourceError::new("custom_handshaker", "not supported"));
    }
    // The identity.
    let identity = if let Some(instance) = &common.tls_certificate_provider_instance {
        Some(
            plugin_instance(instance, context)
                .map_err(|e| e.within("tls_certificate_provider_instance"))?,
        )
    } else if let Some(instance) = &common.tls_certificate_certificate_provider_instance {
        Some(
            deprecated_instance(instance, context)
                .map_err(|e| e.within("tls_certificate_certificate_provider_instance"))?,
        )
    } else if common.tls_certificate_certificate_provider.is_some() {
        return Err(ResourceError::new(
            "tls_certificate_certificate_provider",
            "not supported (name a bootstrap instance in tls_certificate_provider_instance)",
        ));
    } else if !common.tls_certificates.is_empty() {
        return Err(ResourceError::new(
            "tls_certificates",
            "not supported (name a bootstrap instance in tls_certificate_provider_instance)",
        ));
    } else if !common.tls_certificate_sds_secret_configs.is_empty() {
        return Err(ResourceError::new(
            "tls_certificate_sds_secret_configs",
            "SDS is not supported (name a bootstrap instance in tls_certificate_provider_instance)",
        ));
    } else {
        None
    };
    // The roots and the SAN matchers.
    let no_roots = || {
        ResourceError::new(
            "",
            "no root certificates: a validation context with ca_certificate_provider_instance or \
             system_root_certs is required",
        )
    };
    let (roots, san_matchers) = match &common.validation_context_type {
        None => return Err(no_roots()),
        Some(ValidationContextType::ValidationContext(vc)) => {
            let (roots, sans) = validation_context(vc, context, budget)
                .map_err(|e| e.within("validation_context"))?;
            (roots.ok_or_else(no_roots)?, sans)
        }
        Some(ValidationContextType::CombinedValidationContext(combined)) => {
            let field = "combined_validation_context";
            // As in C-core and grpc-go, only `default_validation_context` and the deprecated
            // `validation_context_certificate_provider_instance` are read: the SDS and plugin-config
            // forms are ignored (without roots from the two, the Cluster is NACKed below anyway).
            let (roots, sans) = match &combined.default_validation_context {
                Some(vc) => validation_context(vc, context, budget)
                    .map_err(|e| e.within(&format!("{field}.default_validation_context")))?,
                None => (None, Vec::new()),
            };
            // A provider instance in the default context, else the deprecated instance, else the
            // system roots (C-core: the deprecated instance whenever the default context names no
            // provider instance; system roots only without any provider instance).
            let roots = match (
                roots,
                &combined.validation_context_certificate_provider_instance,
            ) {
                (Some(RootSource::Provider(instance)), _) => RootSource::Provider(instance),
                (_, Some(instance)) => {
                    RootSource::Provider(deprecated_instance(instance, context).map_err(|e| {
                        e.within(&format!(
                            "{field}.validation_context_certificate_provider_instance"
                        ))
                    })?)
                }
                (Some(roots), None) => roots,
                (None, None) => return Err(no_roots().within(field)),
            };
            (roots, sans)
        }
        Some(ValidationContextType::ValidationContextCertificateProviderInstance(instance)) => (
            RootSource::Provider(
                deprecated_instance(instance, context)
                    .map_err(|e| e.within("validation_context_certificate_provider_instance"))?,
            ),
            Vec::new(),
        ),
        Some(ValidationContextType::ValidationContextSdsSecretConfig(_)) => {
            return Err(ResourceError::new(
                "validation_context_sds_secret_config",
                "SDS is not supported",
            ))
        }
        Some(ValidationContextType::ValidationContextCertificateProvider(_)) => {
            return Err(ResourceError::new(
                "validation_context_certificate_provider",
                "not supported (name a bootstrap instance in ca_certificate_provider_instance)",
            ))
        }
    };
    Ok((identity, roots, san_matchers))
}

/// A `CertificateValidationContext`: its roots if it names any, and its SAN matchers.
#[allow(deprecated)] // `match_subject_alt_names` is what A29 reads.
fn validation_context(
    vc: &CertificateValidationContext,
    context: &DecodeContext,
    budget: &mut RegexBudget,
) -> Result<(Option<RootSource>, Vec<StringMatch>), ResourceError> {
    if !vc.verify_certificate_spki.is_empty() {
        return Err(ResourceError::new(
            "verify_certificate_spki",
            "not supported",
        ));
    }
    if !vc.verify_certificate_hash.is_empty() {
        return Err(ResourceError::new(
            "verify_certificate_hash",
            "not supported",
        ));
    }
    if vc
        .require_signed_certificate_timestamp
        .as_ref()
        .is_some_and(|v| v.value)
    {
        return Err(ResourceError::new(
            "require_signed_certificate_timestamp",
            "not supported",
        ));
    }
    if vc.crl.is_some() {
        return Err(ResourceError::new("crl", "not supported"));
    }
    if vc.custom_validator_config.is_some() {
        return Err(ResourceError::new(
            "custom_validator_config",
            "not supported",
        ));
    }
    if !vc.match_typed_subject_alt_names.is_empty() {
        return Err(ResourceError::new(
            "match_typed_subject_alt_names",
            "not supported (use match_subject_alt_names)",
        ));
    }
    let roots = match (&vc.ca_certificate_provider_instance, &vc.system_root_certs) {
        (Some(instance), _) => Some(RootSource::Provider(
            plugin_instance(instance, context)
                .map_err(|e| e.within("ca_certificate_provider_instance"))?,
        )),
        (None, Some(_)) => Some(RootSource::System),
        (None, None) => None,
    };
    let field = "match_subject_alt_names";
    if vc.match_subject_alt_names.len() > MAX_SAN_MATCHERS {
        return Err(ResourceError::new(
            field,
            format!(
                "{} matchers, more than the {MAX_SAN_MATCHERS} allowed",
                vc.match_subject_alt_names.len()
            ),
        ));
    }
    let mut sans = Vec::with_capacity(vc.match_subject_alt_names.len());
    for (i, m) in vc.match_subject_alt_names.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let empty = match &m.match_pattern {
            Some(MatchPattern::SafeRegex(re)) => {
                if m.ignore_case {
                    return Err(ResourceError::new(
                        format!("{at}.ignore_case"),
                        "not supported with safe_regex",
                    ));
                }
                re.regex.is_empty()
            }
            // Envoy gives `prefix`, `suffix` and `contains` a `min_len` of 1; an empty `exact` is
            // valid (as in C-core and grpc-go) and matches only an empty SAN.
            Some(MatchPattern::Prefix(v) | MatchPattern::Suffix(v) | MatchPattern::Contains(v)) => {
                v.is_empty()
            }
            Some(MatchPattern::Exact(_) | MatchPattern::Custom(_)) | None => false,
        };
        if empty {
            return Err(ResourceError::new(at, "an empty pattern is not supported"));
        }
        sans.push(parse_string_matcher(m, budget).map_err(|e| e.within(&at))?);
    }
    Ok((roots, sans))
}

/// A current-form provider instance, which the bootstrap must define.
fn plugin_instance(
    instance: &CertificateProviderPluginInstance,
    context: &DecodeContext,
) -> Result<ProviderInstance, ResourceError> {
    known(&instance.instance_name, &instance.certificate_name, context)
}

/// A deprecated-form provider instance, which the bootstrap must define.
fn deprecated_instance(
    instance: &CertificateProviderInstance,
    context: &DecodeContext,
) -> Result<ProviderInstance, ResourceError> {
    known(&instance.instance_name, &instance.certificate_name, context)
}

fn known(
    instance_name: &str,
    certificate_name: &str,
    context: &DecodeContext,
) -> Result<ProviderInstance, ResourceError> {
    if !context.has_certificate_provider(instance_name) {
        return Err(ResourceError::new(
            "instance_name",
            format!("{instance_name:?} is not a certificate provider instance of the bootstrap"),
        ));
    }
    Ok(ProviderInstance {
        instance_name: instance_name.to_owned(),
        certificate_name: certificate_name.to_owned(),
    })
}

#[cfg(test)]
mod tests;
