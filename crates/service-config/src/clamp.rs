//! The values a service config's parser changed instead of rejecting them (gRFC A6: a `maxAttempts` above the
//! client's cap is clamped, not an error; a `tokenRatio` keeps three decimals; outlier detection's `interval`
//! has a floor of 1 ms and its `maxEjectionTime` one of `baseEjectionTime`), kept on the parsed config as
//! [`Clamp`]s so that the channel can say so when it applies the config. The parser stays sans-IO: it logs
//! nothing itself.
//!
//! Not here: the rules themselves (each lives where its field is parsed: `method_config.rs`,
//! `service_config.rs`), and the tracing event (grpc-channel's control plane emits it).

use std::fmt;

/// The most clamps a parsed config keeps: a config with more (one per method config, at most two of them
/// per entry) keeps the first ones and counts the rest ([`crate::ServiceConfig::clamps_omitted`]). Each
/// clamp's `path` is made of the config's fixed field names and indices, so its length is bounded too.
pub const MAX_CLAMPS: usize = 16;

/// A value of the service config that the parser changed rather than rejected.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Clamp {
    /// The JSON path of the field, e.g. `$.methodConfig[0].retryPolicy.maxAttempts`.
    pub path: String,
    /// What was asked and what applies.
    pub kind: ClampKind,
}

impl Clamp {
    /// A clamp of the field at `path`.
    pub fn new(path: impl Into<String>, kind: ClampKind) -> Clamp {
        Clamp {
            path: path.into(),
            kind,
        }
    }
}

/// Which value was changed, from what to what.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ClampKind {
    /// `maxAttempts` of a retry or hedging policy above the client's cap (A6: 5 by default): the cap
    /// applies.
    MaxAttempts {
        /// The value in the config.
        requested: u64,
        /// The client's cap, which applies.
        applied: u32,
    },
    /// A duration that applies otherwise than written: an outlier detection `interval` below 1 ms (sweeps
    /// run at most once a millisecond), or a `maxEjectionTime` below `baseEjectionTime` (A50: an ejection
    /// may last up to the larger of the two).
    Duration {
        /// The value in the config.
        requested: std::time::Duration,
        /// The value that applies.
        applied: std::time::Duration,
    },
    /// `retryThrottling.tokenRatio` with more than three decimals: the channel keeps three (A6), truncated.
    TokenRatio {
        /// The value in the config.
        requested: f64,
        /// The ratio that applies, in thousandths of a token.
        applied_milli_tokens: u64,
    },
}

impl fmt::Display for Clamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ClampKind::MaxAttempts { requested, applied } => write!(
                f,
                "{}: maxAttempts {requested} is above the client's cap; {applied} attempts apply (gRFC A6)",
                self.path
            ),
            ClampKind::Duration { requested, applied } => write!(
                f,
                "{}: {requested:?} applies as {applied:?} (gRFC A50)",
                self.path
            ),
            ClampKind::TokenRatio {
                requested,
                applied_milli_tokens,
            } => write!(
                f,
                "{}: tokenRatio {requested} keeps three decimals; {}.{:03} applies (gRFC A6)",
                self.path,
                applied_milli_tokens / 1000,
                applied_milli_tokens % 1000
            ),
        }
    }
}

/// The clamps of one parse, bounded by [`MAX_CLAMPS`].
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Clamps {
    pub(crate) list: Vec<Clamp>,
    pub(crate) omitted: usize,
}

impl Clamps {
    /// Notes one clamp (counted only, past the bound).
    pub(crate) fn push(&mut self, clamp: Clamp) {
        if self.list.len() < MAX_CLAMPS {
            self.list.push(clamp);
        } else {
            self.omitted = self.omitted.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ParseOptions, ServiceConfig};

    fn parse(json: &str) -> ServiceConfig {
        ServiceConfig::parse(json, ParseOptions::default()).expect("a valid config")
    }

    fn method(i: usize, policy: &str) -> String {
        format!(r#"{{"name":[{{"service":"s{i}"}}],{policy}}}"#)
    }

    const RETRY10: &str = r#""retryPolicy":{"maxAttempts":10,"initialBackoff":"1s","maxBackoff":"2s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}"#;
    const HEDGE7: &str = r#""hedgingPolicy":{"maxAttempts":7}"#;
    const RETRY5: &str = r#""retryPolicy":{"maxAttempts":5,"initialBackoff":"1s","maxBackoff":"2s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}"#;

    #[test]
    fn max_attempts_above_the_cap_and_long_token_ratios_are_noted() {
        let config = parse(&format!(
            r#"{{"retryThrottling":{{"maxTokens":10,"tokenRatio":0.5466}},"methodConfig":[{},{},{}]}}"#,
            method(0, RETRY10),
            method(1, HEDGE7),
            method(2, RETRY5)
        ));
        let shown: Vec<String> = config.clamps().iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "$.retryThrottling.tokenRatio: tokenRatio 0.5466 keeps three decimals; 0.546 applies (gRFC A6)",
                "$.methodConfig[0].retryPolicy.maxAttempts: maxAttempts 10 is above the client's cap; 5 attempts apply (gRFC A6)",
                "$.methodConfig[1].hedgingPolicy.maxAttempts: maxAttempts 7 is above the client's cap; 5 attempts apply (gRFC A6)",
            ]
        );
        assert_eq!(config.clamps_omitted(), 0);
        // Nothing changed, nothing noted (three decimals, or trailing zeros, are kept as written).
        let plain = parse(&format!(
            r#"{{"retryThrottling":{{"maxTokens":10,"tokenRatio":0.1}},"methodConfig":[{}]}}"#,
            method(0, RETRY5)
        ));
        assert!(plain.clamps().is_empty(), "{:?}", plain.clamps());
    }

    #[test]
    fn outlier_detection_durations_applied_otherwise_are_noted() {
        let config = parse(
            r#"{"loadBalancingConfig":[{"outlier_detection_experimental":{
                "interval":"0s","baseEjectionTime":"30s","maxEjectionTime":"10s",
                "childPolicy":[{"round_robin":{}}]}}]}"#,
        );
        let shown: Vec<String> = config.clamps().iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "$.loadBalancingConfig[0].outlier_detection_experimental.interval: 0ns applies as 1ms (gRFC A50)",
                "$.loadBalancingConfig[0].outlier_detection_experimental.maxEjectionTime: 10s applies as 30s (gRFC A50)",
            ]
        );
    }

    #[test]
    fn clamps_are_bounded() {
        let entries: Vec<String> = (0..MAX_CLAMPS + 4).map(|i| method(i, RETRY10)).collect();
        let config = parse(&format!(r#"{{"methodConfig":[{}]}}"#, entries.join(",")));
        assert_eq!(config.clamps().len(), MAX_CLAMPS);
        assert_eq!(config.clamps_omitted(), 4);
        assert_eq!(
            config.clamps()[MAX_CLAMPS - 1].path,
            format!("$.methodConfig[{}].retryPolicy.maxAttempts", MAX_CLAMPS - 1)
        );
    }
}
