//! The load-balancing policy a service config selects: `loadBalancingConfig` (first supported policy wins)
//! or, only when that is absent, the deprecated `loadBalancingPolicy`. pick_first is the default.
//!
//! Supported: `pick_first` (A62 `shuffleAddressList`), `round_robin`, and `outlier_detection_experimental`
//! (A50), whose required `childPolicy` is a list parsed with the same rules as `loadBalancingConfig` (the
//! first supported entry wins; an invalid one invalidates the whole config). Its other fields are parsed in
//! `outlier_detection.rs`.

use grpc_lb::OutlierDetectionConfig;

use crate::error::{ParseError, Rule};
use crate::json::{field, required, At};
use crate::outlier_detection::parse_outlier_detection;

/// A load-balancing policy this client supports, with its configuration: the service config's choice (the
/// running policy is `grpc_lb::LbPolicy`, which the channel builds from it).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum LbConfig {
    /// `outlier_detection_experimental` (gRFC A50): `child` balances, and the addresses the config's
    /// algorithms find to be outliers are ejected from it for a while (`grpc_lb::OutlierDetector`).
    OutlierDetection {
        /// The detection parameters; with neither algorithm set, nothing is counted or ejected.
        config: OutlierDetectionConfig,
        /// `childPolicy`: the first supported entry of its list.
        child: Box<LbConfig>,
    },
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
            LbConfig::OutlierDetection { .. } => "outlier_detection_experimental",
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
            "outlier_detection_experimental" => Some(required(
                &entry,
                obj,
                "outlier_detection_experimental",
                |cfg| {
                    let config = parse_outlier_detection(&cfg)?;
                    let child = required(&cfg, cfg.object()?, "childPolicy", parse_lb_config)?;
                    Ok(LbConfig::OutlierDetection {
                        config,
                        child: Box::new(child),
                    })
                },
            )?),
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
