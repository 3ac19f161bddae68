//! Which grpc-lb policy a resolution result asks for: the service config's `loadBalancingConfig` (with
//! its outlier detection, gRFC A50, compared apart from the child policy), or the xDS cluster manager for a
//! resolver that routes calls to clusters.

use grpc_lb::{OutlierDetectionConfig, PolicyConfig};
use grpc_service_config::{LbConfig, ServiceConfig};

use crate::control::resolver_state::Routing;

/// The policy for a resolution: the xDS cluster manager with `routing`, else what `config` selects.
pub(super) fn policy_choice(
    config: &ServiceConfig,
    routing: Option<&Routing>,
) -> (PolicyConfig, Option<OutlierDetectionConfig>) {
    match routing {
        // A resolver that routes calls to clusters (xDS) picks through the cluster manager; its clusters'
        // endpoints replace the address list.
        Some(_) => (PolicyConfig::XdsClusterManager, None),
        None => policy_config(config.lb_policy()),
    }
}

/// The policy a service config's `loadBalancingConfig` selects, and its outlier detection if it has one
/// (the two are compared apart, so that a change of one keeps the other). An outlier detection nested in
/// another's `childPolicy` adds nothing: the outer one decides.
fn policy_config(lb: &LbConfig) -> (PolicyConfig, Option<OutlierDetectionConfig>) {
    match lb {
        LbConfig::RoundRobin => (PolicyConfig::RoundRobin, None),
        LbConfig::PickFirst {
            shuffle_address_list,
        } => (
            PolicyConfig::PickFirst {
                shuffle_address_list: *shuffle_address_list,
            },
            None,
        ),
        LbConfig::Default => (PolicyConfig::default(), None),
        LbConfig::OutlierDetection { config, child } => {
            (policy_config(child).0, Some(config.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grpc_service_config::ParseOptions;

    fn lb(json: &str) -> (PolicyConfig, Option<OutlierDetectionConfig>) {
        let config = ServiceConfig::parse(json, ParseOptions::default()).expect("a valid config");
        policy_config(config.lb_policy())
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
        assert_eq!(policy_a, PolicyConfig::RoundRobin);
        assert_eq!(
            policy_a, policy_b,
            "a new outlier config alone keeps the child policy"
        );
        assert_ne!(od_a, od_b);
        assert!(od_a.is_some_and(|c| c.is_enabled()));
        let (plain, none) = lb(r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#);
        assert_eq!((plain, none), (PolicyConfig::RoundRobin, None));
    }
}
