//! What the channel says about a service config when it applies it: the things the config asks for and
//! the channel does not do, or does differently, which would otherwise pass without a word.
//!
//! - a `healthCheckConfig` under a policy that does not run health checks (pick_first, the default: gRFC
//!   A17 and A61): one WARN;
//! - no `loadBalancingConfig` (or no service config at all): one DEBUG event saying the policy is
//!   pick_first, so every call goes to the first reachable address;
//! - each value the parser clamped (`grpc_service_config::Clamp`: `maxAttempts` above the client's cap of
//!   5, a `tokenRatio` past three decimals): one DEBUG event each.
//!
//! Once per config applied: [`ConfigNotes`] remembers the last config it explained, so a resolver that
//! publishes the same config again (every DNS refresh, a channel leaving IDLE) says nothing new, and no
//! call ever logs these. Not here: choosing the policy (`policy_choice.rs`) and health watches
//! (`health_watches.rs`).

use std::sync::Arc;

use grpc_service_config::{LbConfig, ServiceConfig};

/// The last config explained.
#[derive(Default)]
pub(super) struct ConfigNotes {
    last: Option<Arc<ServiceConfig>>,
}

impl ConfigNotes {
    /// Explains `config`, applied with a policy named `policy` (which runs health checks if
    /// `uses_health`), unless it is the config explained last. `health_service`: the health service the
    /// config asks to check, unless the application turned health checking off. `routed`: the resolver
    /// routes calls (xDS), so the service config's policy does not apply.
    pub(super) fn applied(
        &mut self,
        config: &Arc<ServiceConfig>,
        health_service: Option<&str>,
        policy: &str,
        uses_health: bool,
        routed: bool,
    ) {
        if self
            .last
            .as_ref()
            .is_some_and(|last| Arc::ptr_eq(last, config) || **last == **config)
        {
            return;
        }
        self.last = Some(config.clone());
        if !routed {
            if let Some(service) = health_service {
                if !uses_health {
                    tracing::warn!(
                        policy,
                        health_check_service = service,
                        "the service config asks for health checking (healthCheckConfig), but the \
                         load-balancing policy {policy} does not run health checks (gRFC A17: pick_first, \
                         the default, never does): no health check runs; for health checking, choose \
                         round_robin in loadBalancingConfig"
                    );
                }
            }
            if matches!(config.lb_policy(), LbConfig::Default) {
                tracing::debug!(
                    policy,
                    "no loadBalancingConfig in the service config (or no service config): the policy is \
                     pick_first by default, so calls go to the first reachable address; set \
                     loadBalancingConfig (e.g. round_robin) to spread them"
                );
            }
        }
        for clamp in config.clamps() {
            tracing::debug!(path = %clamp.path, "service config value clamped: {clamp}");
        }
        if config.clamps_omitted() > 0 {
            tracing::debug!(
                omitted = config.clamps_omitted(),
                "more service config values were clamped than are listed"
            );
        }
    }
}
