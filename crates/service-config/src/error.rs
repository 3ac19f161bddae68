//! `ParseError`: why a service config was refused, with the JSON path of the bad value.

use std::fmt;

/// The rule a value broke.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rule {
    /// The text is not JSON.
    #[error("not valid JSON: {0}")]
    NotJson(String),
    /// The value has the wrong JSON type.
    #[error("expected {0}")]
    WrongType(&'static str),
    /// A required field is absent.
    #[error("required field is missing")]
    Missing,
    /// Not a proto3 JSON duration (`"1.5s"`).
    #[error("invalid duration {0:?}: expected decimal seconds with an 's' suffix, e.g. \"0.25s\"")]
    BadDuration(String),
    /// A number is outside the field's range.
    #[error("{0}")]
    OutOfRange(String),
    /// A status code that is neither a known name nor a number in 0..=16.
    #[error("unknown status code {0}")]
    UnknownCode(String),
    /// The same method name appears twice.
    #[error("duplicate method name {0:?}")]
    DuplicateName(String),
    /// A name with a method but no service.
    #[error("a name with an empty service cannot name a method")]
    MethodWithoutService,
    /// Both `retryPolicy` and `hedgingPolicy` on one method config.
    #[error("retryPolicy and hedgingPolicy cannot both be set")]
    BothPolicies,
    /// No policy in `loadBalancingConfig` is supported.
    #[error("no supported load balancing policy in {0:?}")]
    NoSupportedLbPolicy(Vec<String>),
    /// An unknown `loadBalancingPolicy`.
    #[error("unknown loadBalancingPolicy {0:?}")]
    UnknownLbPolicy(String),
    /// A registered policy's builder rejected its config.
    #[error("{0}")]
    BadLbConfig(String),
    /// A `loadBalancingConfig` entry that is not an object with one key.
    #[error("each loadBalancingConfig entry must be an object with exactly one policy name")]
    BadLbEntry,
    /// A field not allowed in a TXT record's choice.
    #[error("unknown field {0:?} in a service config choice")]
    UnknownChoiceField(String),
    /// A retry or throttling value A6 forbids.
    #[error(transparent)]
    Policy(#[from] grpc_retry::PolicyError),
}

/// A service config (or TXT record) that cannot be used, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    /// The JSON path of the bad value, e.g. `$.methodConfig[0].retryPolicy.maxAttempts`.
    pub path: String,
    /// The rule it broke.
    pub rule: Rule,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid service config at {}: {}", self.path, self.rule)
    }
}

impl std::error::Error for ParseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.rule)
    }
}
