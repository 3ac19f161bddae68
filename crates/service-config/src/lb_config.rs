//! The load-balancing policy a service config selects: `loadBalancingConfig` (first supported policy wins)
//! or, only when that is absent, the deprecated `loadBalancingPolicy`. pick_first is the default.

use crate::error::{ParseError, Rule};
use crate::json::{field, At};

/// A load-balancing policy this client supports, with its configuration: the service config's choice (the
/// running policy is `grpc_lb::LbPolicy`, which the channel builds from it).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum LbConfig {
    /// `pick_first`, the default.
    PickFirst {
        /// A62 `shuffleAddressList`.
        shuffle_address_list: bool,
    },
    /// `round_robin`.
    RoundRobin,
    /// No policy configured: pick_first with its defaults.
    #[default]
    Default,
}

impl LbConfig {
    /// The policy's name.
    pub fn name(&self) -> &'static str {
        match self {
            LbConfig::PickFirst { .. } | LbConfig::Default => "pick_first",
            LbConfig::RoundRobin => "round_robin",
        }
    }
}

pub(crate) fn parse_lb_config(at: At<'_>) -> Result<LbConfig, ParseError> {
    let mut names = Vec::new();
    let entries = crate::json::each(&at, |entry| {
        let obj = entry.object()?;
        if obj.len() != 1 {
            return Err(entry.error(Rule::BadLbEntry));
        }
        let (name, _) = obj
            .iter()
            .next()
            .ok_or_else(|| entry.error(Rule::BadLbEntry))?;
        let policy = match name.as_str() {
            "pick_first" => {
                let shuffle = field(&entry, obj, "pick_first", |cfg| {
                    let cfg_obj = cfg.object()?;
                    field(&cfg, cfg_obj, "shuffleAddressList", |s| s.bool())
                })?;
                Some(LbConfig::PickFirst {
                    shuffle_address_list: shuffle.flatten().unwrap_or(false),
                })
            }
            "round_robin" => {
                field(&entry, obj, "round_robin", |cfg| cfg.object().map(drop))?;
                Some(LbConfig::RoundRobin)
            }
            _ => None,
        };
        names.push(name.clone());
        Ok(policy)
    })?;
    entries
        .into_iter()
        .flatten()
        .next()
        .ok_or_else(|| at.error(Rule::NoSupportedLbPolicy(names)))
}

pub(crate) fn parse_lb_policy_name(at: At<'_>) -> Result<LbConfig, ParseError> {
    let name = at.str()?;
    match name.to_ascii_lowercase().as_str() {
        "round_robin" => Ok(LbConfig::RoundRobin),
        "pick_first" => Ok(LbConfig::PickFirst {
            shuffle_address_list: false,
        }),
        _ => Err(at.error(Rule::UnknownLbPolicy(name.to_owned()))),
    }
}
