//! Which load-balancing policy a resolution result asks for: the service config's `loadBalancingConfig`
//! (with its outlier detection, gRFC A50, compared apart from the child policy), or the xDS cluster manager
//! for a resolver that routes calls to clusters. Every policy, built-in or registered, comes out the same
//! way: a builder and a parsed config ([`Choice`]).

use std::sync::Arc;

use grpc_lb::{
    LoadBalancerBuilder, OutlierDetectionConfig, ParsedLbConfig, PickFirstBuilder, PickFirstConfig,
    PolicyRegistry, RoundRobinBuilder, XdsClusterManagerBuilder,
};
use grpc_service_config::{LbConfig, ServiceConfig};

use crate::control::resolver_state::Routing;

/// A policy to run: its builder and the config its updates carry. A running policy of the same name is
/// kept (and given the config); another name replaces it.
pub(super) struct Choice {
    pub(super) builder: Arc<dyn LoadBalancerBuilder>,
    pub(super) config: ParsedLbConfig,
}

impl Choice {
    fn of(builder: impl LoadBalancerBuilder, config: ParsedLbConfig) -> Choice {
        Choice {
            builder: Arc::new(builder),
            config,
        }
    }

    /// The policy's name.
    pub(super) fn name(&self) -> &str {
        self.builder.name()
    }
}

/// The policy for a resolution: the xDS cluster manager with `routing`, else what `config` selects (the
/// default, pick_first, looked up in `policies`).
pub(super) fn policy_choice(
    config: &ServiceConfig,
    routing: Option<&Routing>,
    policies: &PolicyRegistry,
) -> (Choice, Option<OutlierDetectionConfig>) {
    match routing {
        // A resolver that routes calls to clusters (xDS) picks through the cluster manager; its clusters'
        // endpoints replace the address list.
        Some(r) => (
            Choice::of(
                XdsClusterManagerBuilder,
                ParsedLbConfig::new(r.clusters.clone()),
            ),
            None,
        ),
        None => policy_config(config.lb_policy(), policies),
    }
}

/// The policy a service config's `loadBalancingConfig` selects, and its outlier detection if it has one
/// (the two are compared apart, so that a change of one keeps the other). An outlier detection nested in
/// another's `childPolicy` adds nothing: the outer one decides.
fn policy_config(
    lb: &LbConfig,
    policies: &PolicyRegistry,
) -> (Choice, Option<OutlierDetectionConfig>) {
    match lb {
        LbConfig::RoundRobin => (Choice::of(RoundRobinBuilder, ParsedLbConfig::empty()), None),
        LbConfig::PickFirst {
            shuffle_address_list,
        } => (
            Choice::of(
                PickFirstBuilder,
                ParsedLbConfig::new(PickFirstConfig::new(*shuffle_address_list)),
            ),
            None,
        ),
        LbConfig::Registered(p) => (
            Choice {
                builder: p.builder().clone(),
                config: p.config().clone(),
            },
            None,
        ),
        LbConfig::OutlierDetection { config, child } => {
            (policy_config(child, policies).0, Some(config.clone()))
        }
        // No policy configured: pick_first, the registered one if there is one (with its default config;
        // the built-in if that panics).
        LbConfig::Default => {
            let registered = policies.registered(grpc_lb::PICK_FIRST).and_then(|builder| {
                let config = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    builder.default_config()
                }));
                match config {
                    Ok(config) => Some(Choice { builder, config }),
                    Err(panic) => {
                        // Its payload's drop could panic too: forget it.
                        std::mem::forget(panic);
                        tracing::warn!("the registered pick_first's default_config panicked: the built-in pick_first runs");
                        None
                    }
                }
            });
            let choice = registered.unwrap_or_else(|| {
                Choice::of(
                    PickFirstBuilder,
                    ParsedLbConfig::new(PickFirstConfig::default()),
                )
            });
            (choice, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grpc_service_config::ParseOptions;

    fn lb(json: &str) -> (Choice, Option<OutlierDetectionConfig>) {
        let config = ServiceConfig::parse(json, ParseOptions::default()).expect("a valid config");
        policy_config(config.lb_policy(), &PolicyRegistry::new())
    }

    fn outlier(interval: &str) -> String {
        format!(
            r#"{{"loadBalancingConfig":[{{"outlier_detection_experimental":{{"interval":"{interval}",
                "failurePercentageEjection":{{}},"childPolicy":[{{"round_robin":{{}}}}]}}}}]}}"#
        )
    }

    #[test]
    fn the_policy_and_its_outlier_detection_are_compared_apart() {
        let (policy_a, od_a) = lb(&outlier("1s"));
        let (policy_b, od_b) = lb(&outlier("2s"));
        assert_eq!(policy_a.name(), "round_robin");
        assert_eq!(
            policy_a.name(),
            policy_b.name(),
            "a new outlier config alone keeps the child policy"
        );
        assert_ne!(od_a, od_b);
        assert!(od_a.is_some_and(|c| c.is_enabled()));
        let (plain, none) = lb(r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#);
        assert_eq!((plain.name(), none), ("round_robin", None));
        let (default, none) = lb("{}");
        assert_eq!((default.name(), none), ("pick_first", None));
    }
}
