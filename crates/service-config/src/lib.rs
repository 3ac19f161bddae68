//! The gRPC service config (gRFC A2, A6, A21; `doc/service_config.md`): typed, validated parsing; name
//! resolution with the service config delivered in DNS TXT records; and the A21 rules for bad configs.
//!
//! * [`ServiceConfig::parse`] turns JSON into a config whose values cannot be invalid: unknown fields are
//!   ignored, and a known field with a bad value rejects the whole config with a [`ParseError`] naming the
//!   JSON path and the rule. Method lookup is two hash lookups at most. `retryPolicy` and `hedgingPolicy`
//!   take gRFC A44's `perAttemptRecvTimeout` (a Duration > 0; with it, `retryableStatusCodes` may be empty).
//!   [`LbConfig`] is `pick_first`, `round_robin` or A50's `outlier_detection_experimental` (with its child
//!   policy), from `loadBalancingConfig` or the deprecated `loadBalancingPolicy`.
//!   [`ServiceConfig::health_check_service_name`] is A17's `healthCheckConfig.serviceName`.
//! * [`txt::select`] picks the config from `_grpc_config.<host>` TXT records (A2).
//! * [`ConfigSelector`] applies A21: keep the last good config, fall back to the application's default.
//! * [`DnsResolver`] and [`ResolverTask`] (on hickory-resolver) resolve addresses and TXT records together,
//!   re-resolve on request at most once per interval, and back off after failures ([`Schedule`]).
//!
//! Everything but the resolver is sans-IO. Not here: the LB policies themselves (`grpc-lb`, whose outlier
//! detection config types the parser builds), the retry state machine (`grpc-retry`, whose policy types
//! the parser builds), the health Watch itself (the channel runs it), SRV/grpclb lookups.

// Unit tests read the clock: they stand in for grpc-channel (clippy.toml bans it in the library).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod clamp;
mod duration;
mod error;
mod json;
mod lb_config;
mod method_config;
mod outlier_detection;
// The DNS resolver is this crate's I/O edge (hickory and tokio: resolv.conf, the host name, tokio's clock);
// the parsing core around it stays sans-IO, as clippy.toml checks.
#[allow(clippy::disallowed_methods)]
mod resolver;
mod schedule;
mod selection;
mod service_config;
pub mod target;
pub mod txt;

#[cfg(test)]
mod tests;

pub use clamp::{Clamp, ClampKind, MAX_CLAMPS};
pub use error::{ParseError, Rule};
pub use lb_config::{LbConfig, RegisteredPolicy};
pub use method_config::MethodConfig;
pub use resolver::{
    parse_default, system_hostname, Accept, DnsResolver, Resolution, ResolveError, ResolverHandle,
    ResolverOptions, ResolverTask,
};
pub use schedule::{Schedule, DEFAULT_MIN_INTERVAL};
pub use selection::{ConfigResult, ConfigSelector, Decision};
pub use service_config::{ParseOptions, ServiceConfig};
pub use target::{
    url_security, Target, TargetError, UrlSecurity, MAX_ABSTRACT_NAME, SUPPORTED_SCHEMES,
};
