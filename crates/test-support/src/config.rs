//! Service configs for the tests: one method config with a retry or a hedging policy, built field by field
//! from the defaults most tests use. `Display` renders the JSON, and `ChannelBuilder::default_service_config`
//! takes a [`ServiceConfig`] as it is.
//!
//! ```text
//! retry(4, &["UNAVAILABLE"])           retryPolicy for every method of fault.Faulty: backoff 0.1 s, ×2, ≤ 1 s
//! hedging(3, "0.2s")                   hedgingPolicy for fault.Faulty, non-fatal on UNAVAILABLE
//!   .service("t.S") .method("M")       another service, or one method of it
//!   .initial_backoff("1s") .max_backoff("10s") .backoff_multiplier(1) .non_fatal(&[])
//!   .per_attempt_recv_timeout("0.5s")  a field of the policy
//!   .throttling(10, "0.1")             retryThrottling (maxTokens, tokenRatio)
//!   .round_robin()                     loadBalancingConfig round_robin
//! ```

use std::fmt;

/// The service of the fault-injecting server's methods.
pub const FAULTY: &str = "fault.Faulty";

/// A service config with one method config; see the module docs.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    service: String,
    method: Option<String>,
    round_robin: bool,
    throttling: Option<(u32, String)>,
    policy: Policy,
    per_attempt_recv_timeout: Option<String>,
}

#[derive(Clone, Debug)]
enum Policy {
    Retry {
        max_attempts: u32,
        initial_backoff: String,
        max_backoff: String,
        multiplier: u32,
        codes: Vec<String>,
    },
    Hedging {
        max_attempts: u32,
        delay: String,
        non_fatal: Vec<String>,
    },
}

/// A `retryPolicy` for every method of `fault.Faulty` retrying `codes`: backoff 0.1 s, ×2, at most 1 s.
pub fn retry(max_attempts: u32, codes: &[&str]) -> ServiceConfig {
    ServiceConfig::new(Policy::Retry {
        max_attempts,
        initial_backoff: "0.1s".into(),
        max_backoff: "1s".into(),
        multiplier: 2,
        codes: strings(codes),
    })
}

/// A `hedgingPolicy` for every method of `fault.Faulty`, non-fatal on UNAVAILABLE.
pub fn hedging(max_attempts: u32, delay: &str) -> ServiceConfig {
    ServiceConfig::new(Policy::Hedging {
        max_attempts,
        delay: delay.into(),
        non_fatal: strings(&["UNAVAILABLE"]),
    })
}

/// [`retry`], rendered.
pub fn retry_config(max_attempts: u32, codes: &[&str]) -> String {
    retry(max_attempts, codes).to_string()
}

/// [`hedging`] over round_robin, rendered.
pub fn hedging_config(max_attempts: u32, delay: &str) -> String {
    hedging(max_attempts, delay).round_robin().to_string()
}

fn strings(codes: &[&str]) -> Vec<String> {
    codes.iter().map(|c| (*c).to_owned()).collect()
}

impl ServiceConfig {
    fn new(policy: Policy) -> ServiceConfig {
        ServiceConfig {
            service: FAULTY.into(),
            method: None,
            round_robin: false,
            throttling: None,
            policy,
            per_attempt_recv_timeout: None,
        }
    }

    /// For the methods of `service` instead of `fault.Faulty`.
    pub fn service(mut self, service: &str) -> ServiceConfig {
        self.service = service.into();
        self
    }

    /// For one method of the service only.
    pub fn method(mut self, method: &str) -> ServiceConfig {
        self.method = Some(method.into());
        self
    }

    /// `loadBalancingConfig` round_robin.
    pub fn round_robin(mut self) -> ServiceConfig {
        self.round_robin = true;
        self
    }

    /// `retryThrottling` with `maxTokens` and `tokenRatio` (as written in the JSON).
    pub fn throttling(mut self, max_tokens: u32, token_ratio: &str) -> ServiceConfig {
        self.throttling = Some((max_tokens, token_ratio.into()));
        self
    }

    /// The policy's `perAttemptRecvTimeout`.
    pub fn per_attempt_recv_timeout(mut self, timeout: &str) -> ServiceConfig {
        self.per_attempt_recv_timeout = Some(timeout.into());
        self
    }

    /// The retry policy's `initialBackoff`.
    pub fn initial_backoff(mut self, backoff: &str) -> ServiceConfig {
        match &mut self.policy {
            Policy::Retry {
                initial_backoff, ..
            } => *initial_backoff = backoff.into(),
            Policy::Hedging { .. } => panic!("initialBackoff on a hedging policy"),
        }
        self
    }

    /// The retry policy's `maxBackoff`.
    pub fn max_backoff(mut self, backoff: &str) -> ServiceConfig {
        match &mut self.policy {
            Policy::Retry { max_backoff, .. } => *max_backoff = backoff.into(),
            Policy::Hedging { .. } => panic!("maxBackoff on a hedging policy"),
        }
        self
    }

    /// The retry policy's `backoffMultiplier`.
    pub fn backoff_multiplier(mut self, factor: u32) -> ServiceConfig {
        match &mut self.policy {
            Policy::Retry { multiplier, .. } => *multiplier = factor,
            Policy::Hedging { .. } => panic!("backoffMultiplier on a hedging policy"),
        }
        self
    }

    /// The hedging policy's `nonFatalStatusCodes`.
    pub fn non_fatal(mut self, codes: &[&str]) -> ServiceConfig {
        match &mut self.policy {
            Policy::Hedging { non_fatal, .. } => *non_fatal = strings(codes),
            Policy::Retry { .. } => panic!("nonFatalStatusCodes on a retry policy"),
        }
        self
    }
}

impl From<ServiceConfig> for String {
    fn from(config: ServiceConfig) -> String {
        config.to_string()
    }
}

/// `["A","B"]`.
fn code_list(codes: &[String]) -> String {
    let quoted: Vec<String> = codes.iter().map(|c| format!("\"{c}\"")).collect();
    format!("[{}]", quoted.join(","))
}

impl fmt::Display for ServiceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        if self.round_robin {
            f.write_str(r#""loadBalancingConfig":[{"round_robin":{}}],"#)?;
        }
        if let Some((max_tokens, ratio)) = &self.throttling {
            write!(
                f,
                r#""retryThrottling":{{"maxTokens":{max_tokens},"tokenRatio":{ratio}}},"#
            )?;
        }
        write!(
            f,
            r#""methodConfig":[{{"name":[{{"service":"{}""#,
            self.service
        )?;
        if let Some(method) = &self.method {
            write!(f, r#","method":"{method}""#)?;
        }
        f.write_str("}],")?;
        match &self.policy {
            Policy::Retry {
                max_attempts,
                initial_backoff,
                max_backoff,
                multiplier,
                codes,
            } => write!(
                f,
                r#""retryPolicy":{{"maxAttempts":{max_attempts},"initialBackoff":"{initial_backoff}","maxBackoff":"{max_backoff}","backoffMultiplier":{multiplier},"retryableStatusCodes":{}"#,
                code_list(codes)
            )?,
            Policy::Hedging {
                max_attempts,
                delay,
                non_fatal,
            } => write!(
                f,
                r#""hedgingPolicy":{{"maxAttempts":{max_attempts},"hedgingDelay":"{delay}","nonFatalStatusCodes":{}"#,
                code_list(non_fatal)
            )?,
        }
        if let Some(timeout) = &self.per_attempt_recv_timeout {
            write!(f, r#","perAttemptRecvTimeout":"{timeout}""#)?;
        }
        f.write_str("}}]}")
    }
}
