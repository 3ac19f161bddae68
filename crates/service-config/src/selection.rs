//! gRFC A21 error handling as a small state machine: which service config a channel uses after each
//! resolver update.
//!
//! * A valid config is used (and remembered).
//! * No config (no TXT record, no matching choice, TXT lookups off) means the application's default config,
//!   or the empty config `{}`.
//! * A failed TXT lookup (timeout, SERVFAIL) keeps the config in use, or starts with the default or `{}`.
//! * An invalid config keeps the last good one (the update's addresses are still applied). A channel that
//!   never had one uses the application's default if there is one; otherwise the resolution counts as
//!   failed and the channel stays in TRANSIENT_FAILURE until a valid result arrives.
//!
//! Feed it only the updates whose addresses resolved: when the name itself fails, its TXT answer (typically
//! "no records") is no news about the config, and the channel keeps what it has; feeding it would replace
//! the last good config with the default or `{}` behind the channel's back.

use std::sync::Arc;

use crate::error::ParseError;
use crate::service_config::ServiceConfig;

/// What the resolver found about the service config.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigResult {
    /// A valid config.
    Config(Arc<ServiceConfig>),
    /// No config.
    None,
    /// An invalid one.
    Invalid(ParseError),
    /// The TXT lookup itself failed (a timeout, SERVFAIL): nothing is known about the config.
    LookupFailed(String),
}

/// What the channel should do with an update.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Use this config (new, default or empty), and the update's addresses.
    Use(Arc<ServiceConfig>),
    /// The update's config was invalid: keep using this (the previous) config, with the update's addresses.
    KeepPrevious(Arc<ServiceConfig>, ParseError),
    /// The update's config was invalid and there is nothing to fall back to: the resolution failed.
    Fail(ParseError),
}

/// The A21 state of one channel.
#[derive(Clone, Debug, Default)]
pub struct ConfigSelector {
    default: Option<Arc<ServiceConfig>>,
    current: Option<Arc<ServiceConfig>>,
}

impl ConfigSelector {
    /// A selector with the application's default config, if any.
    pub fn new(default: Option<ServiceConfig>) -> ConfigSelector {
        ConfigSelector {
            default: default.map(Arc::new),
            current: None,
        }
    }

    /// The config in use, if any.
    pub fn current(&self) -> Option<&Arc<ServiceConfig>> {
        self.current.as_ref()
    }

    /// Applies a resolver update.
    pub fn update(&mut self, result: ConfigResult) -> Decision {
        match result {
            ConfigResult::Config(config) => {
                self.current = Some(config.clone());
                Decision::Use(config)
            }
            ConfigResult::None => {
                let config = self
                    .default
                    .clone()
                    .unwrap_or_else(|| Arc::new(ServiceConfig::empty()));
                self.current = Some(config.clone());
                Decision::Use(config)
            }
            ConfigResult::LookupFailed(reason) => {
                // Nothing new is known: keep what is in use; a new channel starts with the default or `{}`,
                // as if there were no record (C-core and grpc-go ignore TXT lookup errors).
                tracing::debug!(%reason, "service config lookup failed");
                let config = self
                    .current
                    .clone()
                    .or_else(|| self.default.clone())
                    .unwrap_or_else(|| Arc::new(ServiceConfig::empty()));
                self.current = Some(config.clone());
                Decision::Use(config)
            }
            ConfigResult::Invalid(error) => match (&self.current, &self.default) {
                (Some(previous), _) => Decision::KeepPrevious(previous.clone(), error),
                (None, Some(default)) => {
                    self.current = Some(default.clone());
                    Decision::Use(default.clone())
                }
                (None, None) => Decision::Fail(error),
            },
        }
    }
}
