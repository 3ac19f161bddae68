//! The service config (`doc/service_config.md`, gRFC A6, A21): parsed once, strictly, into [`ServiceConfig`].
//! Unknown fields are ignored; a known field with a bad value rejects the whole config.
//!
//! `healthCheckConfig` (gRFC A17) is `{"serviceName": "<name>"}`: health checking on, watching `<name>`
//! (`""` = the server as a whole). Without `serviceName` (`{}`, or a null one) it is on too, watching
//! `""`, as in grpc-go (the config asks for health checking; the server as a whole is what it can watch).
//! Absent or null, health checking stays off. A wrong type rejects the config.

use std::collections::HashMap;
use std::sync::Arc;

use grpc_lb::PolicyRegistry;
use grpc_retry::{ThrottleConfig, DEFAULT_MAX_ATTEMPTS_CAP};
use serde_json::Value;

use crate::clamp::{Clamp, ClampKind, Clamps};
use crate::error::{ParseError, Rule};
use crate::json::{each, field, required, At, Path};
use crate::lb_config::{parse_lb_config, parse_lb_policy_name, LbConfig};
use crate::method_config::{parse_method_config, MethodConfig, Name};

/// Options of the parser.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ParseOptions {
    /// The client's cap on `maxAttempts` (A6; default 5): larger values are clamped to it.
    pub max_attempts_cap: u32,
    /// The load-balancing policies a `loadBalancingConfig` may name besides the built-ins: the channel's
    /// own, then the process-wide ones (`grpc_lb::register_policy`).
    pub policies: PolicyRegistry,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            max_attempts_cap: DEFAULT_MAX_ATTEMPTS_CAP,
            policies: PolicyRegistry::default(),
        }
    }
}

impl ParseOptions {
    /// These options with `policies` as the registry of load-balancing policies.
    pub fn with_policies(mut self, policies: PolicyRegistry) -> ParseOptions {
        self.policies = policies;
        self
    }
}

/// A validated service config.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceConfig {
    lb_policy: LbConfig,
    retry_throttling: Option<ThrottleConfig>,
    methods: HashMap<String, Arc<MethodConfig>>,
    services: HashMap<String, Arc<MethodConfig>>,
    default_method: Option<Arc<MethodConfig>>,
    health_check_service_name: Option<String>,
    /// The values the parser changed rather than rejected (bounded: [`crate::clamp::MAX_CLAMPS`]).
    clamps: Clamps,
}

impl ServiceConfig {
    /// The empty config `{}`.
    pub fn empty() -> ServiceConfig {
        ServiceConfig::default()
    }

    /// Parses a service config from JSON text.
    pub fn parse(json: &str, options: ParseOptions) -> Result<ServiceConfig, ParseError> {
        let value: Value = serde_json::from_str(json).map_err(|e| ParseError {
            path: "$".to_owned(),
            rule: Rule::NotJson(e.to_string()),
        })?;
        ServiceConfig::from_value(&value, options)
    }

    /// Parses a service config from a JSON value.
    pub fn from_value(value: &Value, options: ParseOptions) -> Result<ServiceConfig, ParseError> {
        let root_path = Path::Root;
        let at = At::root(value, &root_path);
        let obj = at.object()?;
        let policies = &options.policies;
        let mut clamps = Clamps::default();
        let lb_config = field(&at, obj, "loadBalancingConfig", |a| {
            parse_lb_config(a, policies, &mut clamps)
        })?;
        let lb_policy = match lb_config {
            Some(policy) => policy,
            None => field(&at, obj, "loadBalancingPolicy", |a| {
                parse_lb_policy_name(a, policies)
            })?
            .unwrap_or_default(),
        };
        let retry_throttling = field(&at, obj, "retryThrottling", |t| {
            parse_throttling(t, &mut clamps)
        })?;
        let health_check_service_name =
            field(&at, obj, "healthCheckConfig", parse_health_check)?.flatten();
        let mut config = ServiceConfig {
            lb_policy,
            retry_throttling,
            health_check_service_name,
            ..ServiceConfig::default()
        };
        let entries = field(&at, obj, "methodConfig", |list| {
            each(&list, |entry| {
                let (names, mc) =
                    parse_method_config(entry, options.max_attempts_cap, &mut clamps)?;
                Ok((entry.path(), names, mc))
            })
        })?
        .unwrap_or_default();
        for (path, names, mc) in entries {
            let mc = Arc::new(mc);
            for name in names {
                let duplicate = match &name {
                    Name::Method(m) => config.methods.insert(m.clone(), mc.clone()).is_some(),
                    Name::Service(s) => config.services.insert(s.clone(), mc.clone()).is_some(),
                    Name::Default => config.default_method.replace(mc.clone()).is_some(),
                };
                if duplicate {
                    let shown = match name {
                        Name::Method(m) => m,
                        Name::Service(s) => format!("{s}/"),
                        Name::Default => "(default)".to_owned(),
                    };
                    return Err(ParseError {
                        path: format!("{path}.name"),
                        rule: Rule::DuplicateName(shown),
                    });
                }
            }
        }
        config.clamps = clamps;
        Ok(config)
    }

    /// The values the parser changed rather than rejected (a `maxAttempts` above the client's cap, a
    /// `tokenRatio` with more than three decimals), in the order met; at most
    /// [`MAX_CLAMPS`](crate::MAX_CLAMPS), the rest counted by [`ServiceConfig::clamps_omitted`]. The channel
    /// logs them at debug level when it applies the config.
    pub fn clamps(&self) -> &[Clamp] {
        &self.clamps.list
    }

    /// How many clamps were left out of [`ServiceConfig::clamps`] (beyond its bound).
    pub fn clamps_omitted(&self) -> usize {
        self.clamps.omitted
    }

    /// The load-balancing policy.
    pub fn lb_policy(&self) -> &LbConfig {
        &self.lb_policy
    }

    /// `retryThrottling`, if set.
    pub fn retry_throttling(&self) -> Option<ThrottleConfig> {
        self.retry_throttling
    }

    /// `healthCheckConfig.serviceName` (gRFC A17): the service whose health the channel watches on each
    /// READY connection (`""` = the server as a whole), or `None` when health checking is off.
    pub fn health_check_service_name(&self) -> Option<&str> {
        self.health_check_service_name.as_deref()
    }

    /// The method config for a call to `path` (`/package.Service/Method`): the exact method, else its
    /// service's, else the default. Two hash lookups at most.
    pub fn method_config(&self, path: &str) -> Option<&Arc<MethodConfig>> {
        let name = path.strip_prefix('/').unwrap_or(path);
        if let Some(mc) = self.methods.get(name) {
            return Some(mc);
        }
        let service = name.split_once('/').map_or(name, |(s, _)| s);
        self.services.get(service).or(self.default_method.as_ref())
    }
}

/// `healthCheckConfig`: an object whose optional `serviceName` is a string (`""`, the server as a whole,
/// when absent or null, as grpc-go reads it).
fn parse_health_check(at: At<'_>) -> Result<Option<String>, ParseError> {
    let obj = at.object()?;
    let name = field(&at, obj, "serviceName", |name| {
        name.str().map(str::to_owned)
    })?;
    Ok(Some(name.unwrap_or_default()))
}

fn parse_throttling(at: At<'_>, clamps: &mut Clamps) -> Result<ThrottleConfig, ParseError> {
    let obj = at.object()?;
    let max_tokens = required(&at, obj, "maxTokens", |m| {
        let n = m.number()?;
        if n.fract() != 0.0 || n <= 0.0 || n > 1000.0 {
            return Err(m.error(Rule::OutOfRange(format!(
                "maxTokens must be an integer in (0, 1000], got {n}"
            ))));
        }
        Ok(n as u64)
    })?;
    let milli_ratio = required(&at, obj, "tokenRatio", |r| {
        let x = r.number()?;
        let milli = milli_tokens(x);
        if x <= 0.0 || milli == 0 {
            return Err(r.error(Rule::OutOfRange(format!(
                "tokenRatio must be greater than zero with three decimals kept, got {x}"
            ))));
        }
        // Digits past the third decimal of the shortest decimal form (what `milli_tokens` drops).
        let text = format!("{x}");
        let dropped = text
            .split_once('.')
            .is_some_and(|(_, frac)| frac.chars().skip(3).any(|c| c != '0'));
        if dropped {
            clamps.push(Clamp::new(
                r.path(),
                ClampKind::TokenRatio {
                    requested: x,
                    applied_milli_tokens: milli,
                },
            ));
        }
        Ok(milli)
    })?;
    ThrottleConfig::new(max_tokens, milli_ratio).map_err(|e| at.error(Rule::Policy(e)))
}

/// `x × 1000`, truncated, computed from the shortest decimal form of `x` so that no binary rounding
/// creeps in (0.57 → 570, not 569; 0.5466 → 546).
fn milli_tokens(x: f64) -> u64 {
    if !(x.is_finite() && x > 0.0) {
        return 0;
    }
    let text = format!("{x}");
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let int: u64 = int.parse().unwrap_or(u64::MAX / 1000);
    let frac3: String = frac.chars().chain(std::iter::repeat('0')).take(3).collect();
    int.saturating_mul(1000)
        .saturating_add(frac3.parse::<u64>().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::milli_tokens;

    #[test]
    fn token_ratio_keeps_three_decimals_exactly() {
        assert_eq!(milli_tokens(0.5466), 546);
        assert_eq!(milli_tokens(0.57), 570);
        assert_eq!(milli_tokens(0.1), 100);
        assert_eq!(milli_tokens(0.3), 300);
        assert_eq!(milli_tokens(1.0), 1000);
        assert_eq!(milli_tokens(2.9999), 2999);
        assert_eq!(milli_tokens(0.0009), 0);
        assert_eq!(milli_tokens(1e-7), 0);
    }
}
