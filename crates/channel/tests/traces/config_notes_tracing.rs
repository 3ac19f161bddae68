//! What the channel says about a service config it applies (issue 35, "silent non-events"): one WARN for a
//! `healthCheckConfig` under pick_first (which never health checks, gRFC A17), once per config however
//! many calls and updates repeat it; a DEBUG event for a config without `loadBalancingConfig` (or no
//! config); a DEBUG event for each clamped value (`maxAttempts` above 5).
//!
//! Runs alone, as every test of this binary does (see `main.rs`).

use grpc_test_support as support;

use std::time::Duration;

use grpc_channel::resolver::{manual, Address, Endpoint};
use grpc_channel::{Channel, Request};
use interop_proto::{paths, Empty};
use support::guards::guarded;
use support::tracing_capture;

async fn call(ch: &Channel) {
    guarded(
        "empty call",
        ch.unary::<_, Empty>(paths::EMPTY_CALL, Request::new(Empty {})),
    )
    .await
    .expect("the call succeeds");
}

#[tokio::test(start_paused = true)]
async fn health_checking_under_pick_first_warns_once_per_config() {
    let (capture, _installed) = tracing_capture::install().await;
    let addr = support::interop_server().await;
    let (resolver, pushed) = manual("notes");
    pushed
        .set(vec![Endpoint::new(Address::Tcp(addr))])
        .expect("endpoints");
    let asks_health = r#"{"healthCheckConfig":{"serviceName":""}}"#;
    pushed
        .set_service_config(Some(asks_health.to_owned()))
        .expect("config");
    let ch = Channel::builder("notes:///fleet")
        .resolver(resolver)
        .build()
        .expect("channel");
    for _ in 0..5 {
        call(&ch).await;
    }
    // The same config again, twice (a resolver refreshing): nothing new to say.
    for _ in 0..2 {
        pushed
            .set_service_config(Some(asks_health.to_owned()))
            .expect("config");
        tokio::time::sleep(Duration::from_millis(10)).await;
        call(&ch).await;
    }
    let warnings = capture.lines_containing("does not run health checks");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    let warning = &warnings[0];
    assert!(warning.contains("policy=pick_first"), "{warning}");
    assert!(warning.contains("round_robin"), "{warning}");
    assert!(warning.contains("level=WARN"), "{warning}");
    let defaults = capture.lines_containing("pick_first by default");
    assert_eq!(defaults.len(), 1, "{defaults:#?}");
    assert!(defaults[0].contains("level=DEBUG"), "{}", defaults[0]);

    // A new config that asks again (with a clamp this time) is a new config: one more warning, and the
    // clamp. round_robin runs health checks: no warning for it.
    let clamped = r#"{"healthCheckConfig":{"serviceName":""},"methodConfig":[{"name":[{}],
        "retryPolicy":{"maxAttempts":10,"initialBackoff":"0.1s","maxBackoff":"1s",
        "backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#;
    pushed
        .set_service_config(Some(clamped.to_owned()))
        .expect("config");
    tokio::time::sleep(Duration::from_millis(10)).await;
    call(&ch).await;
    let round_robin =
        r#"{"healthCheckConfig":{"serviceName":""},"loadBalancingConfig":[{"round_robin":{}}]}"#;
    pushed
        .set_service_config(Some(round_robin.to_owned()))
        .expect("config");
    tokio::time::sleep(Duration::from_millis(10)).await;
    call(&ch).await;
    assert_eq!(
        capture.lines_containing("does not run health checks").len(),
        2
    );
    let clamps = capture.lines_containing("maxAttempts 10 is above the client's cap");
    assert_eq!(clamps.len(), 1, "{clamps:#?}");
    assert!(
        clamps[0].contains("path=$.methodConfig[0].retryPolicy.maxAttempts")
            && clamps[0].contains("5 attempts apply")
            && clamps[0].contains("level=DEBUG"),
        "{}",
        clamps[0]
    );
    assert_eq!(
        capture.lines_containing("pick_first by default").len(),
        2,
        "the clamped config has no loadBalancingConfig either; round_robin's has"
    );
}

#[tokio::test(start_paused = true)]
async fn no_service_config_says_pick_first_is_the_default() {
    let (capture, _installed) = tracing_capture::install().await;
    let addr = support::interop_server().await;
    let ch = support::channel(addr);
    call(&ch).await;
    call(&ch).await;
    let lines = capture.lines_containing("pick_first by default");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].contains("calls go to the first reachable address"),
        "{}",
        lines[0]
    );
    assert!(capture
        .lines_containing("does not run health checks")
        .is_empty());
}

/// A clamp note says that a value of the config "applies as" another (issue 35: a debug note when a
/// service config value is clamped). An `outlier_detection_experimental` nested in another's
/// `childPolicy` does not apply at all (the outer one decides: `control/policy_choice.rs`), so its
/// `interval: 0s` applies neither as written nor as 1 ms, and a note that says "0ns applies as 1ms" sends
/// the reader after a sweep interval that is not in force. Wrong: `grpc-service-config`'s
/// `lb_config.rs` (`parse_lb_config`) passes the same clamp list to the nested detector's parse, and
/// `control/config_notes.rs` emits every clamp of the config.
#[tokio::test(start_paused = true)]
async fn no_clamp_note_for_a_nested_outlier_detection_that_does_not_apply() {
    let (capture, _installed) = tracing_capture::install().await;
    let addr = support::interop_server().await;
    let config = r#"{"loadBalancingConfig":[{"outlier_detection_experimental":{
        "interval":"10s","failurePercentageEjection":{},
        "childPolicy":[{"outlier_detection_experimental":{
            "interval":"0s","childPolicy":[{"round_robin":{}}]}}]}}]}"#;
    let ch = support::channel_with_config(&support::ipv4_target(&[addr]), config);
    call(&ch).await;
    let notes = capture.lines_containing("service config value clamped");
    assert!(notes.is_empty(), "{notes:#?}");
}

/// A policy of the application's that health checks when its config says so (`{"health": true}`): a
/// wrapper that runs round_robin-like picking with or without health checking, as A61 allows a policy
/// under which pick_first-like children health check.
mod health_if {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    use grpc_channel::lb::{
        Address, BuildOptions, ConnectivityState, CustomPick, CustomPicker, LbConfigError,
        LoadBalancer, LoadBalancerBuilder, ParsedLbConfig, PickRequest, PickerSpec, PolicyUpdate,
        SubchannelId, SubchannelPicker, Subchannels,
    };

    #[derive(Clone, Copy, Debug)]
    struct Config {
        health: bool,
    }

    pub(super) struct Builder;

    impl LoadBalancerBuilder for Builder {
        fn name(&self) -> &str {
            "test_health_if"
        }

        fn parse_config(
            &self,
            config: &serde_json::Value,
        ) -> Result<ParsedLbConfig, LbConfigError> {
            let health = config.get("health").and_then(|v| v.as_bool()) == Some(true);
            Ok(ParsedLbConfig::new(Config { health }))
        }

        fn build(&self, options: BuildOptions) -> Box<dyn LoadBalancer> {
            Box::new(HealthIf {
                subs: options.into_subchannels(),
                order: Vec::new(),
                state: ConnectivityState::Idle,
                health: false,
            })
        }
    }

    struct HealthIf {
        subs: Subchannels,
        order: Vec<SubchannelId>,
        state: ConnectivityState,
        health: bool,
    }

    struct Rotate {
        ids: Vec<SubchannelId>,
        next: AtomicUsize,
    }

    impl SubchannelPicker for Rotate {
        fn pick(&self, _request: &PickRequest<'_>) -> CustomPick {
            let turn = self.next.fetch_add(1, Ordering::Relaxed);
            CustomPick::subchannel(self.ids[turn % self.ids.len()])
        }
    }

    impl HealthIf {
        fn publish(&mut self) {
            let ready: Vec<(SubchannelId, Address)> = self
                .order
                .iter()
                .filter(|id| self.subs.state(**id) == ConnectivityState::Ready)
                .filter_map(|id| self.subs.get(*id).map(|s| (*id, s.address().clone())))
                .collect();
            let (state, picker) = if ready.is_empty() {
                (ConnectivityState::Connecting, PickerSpec::Queue)
            } else {
                let picker = Rotate {
                    ids: ready.iter().map(|(id, _)| *id).collect(),
                    next: AtomicUsize::new(0),
                };
                (
                    ConnectivityState::Ready,
                    PickerSpec::Custom(CustomPicker::new(ready, Arc::new(picker))),
                )
            };
            self.state = state;
            self.subs.publish(state, picker);
        }
    }

    impl LoadBalancer for HealthIf {
        fn update(&mut self, update: PolicyUpdate<'_>, now: Instant) {
            if let Some(c) = update.config.downcast_ref::<Config>() {
                self.health = c.health;
            }
            self.order = self.subs.sync(&update.addresses());
            for id in self.order.clone() {
                self.subs.connect(id, now);
            }
            self.publish();
        }

        fn exit_idle(&mut self, _now: Instant) {}

        fn subchannel_ready(&mut self, id: SubchannelId, _now: Instant) {
            if self.subs.ready(id) {
                self.publish();
            }
        }

        fn subchannel_failed(&mut self, id: SubchannelId, error: String, now: Instant) {
            if self.subs.failed(id, error, now) {
                self.publish();
            }
        }

        fn subchannel_closed(&mut self, id: SubchannelId, now: Instant) {
            if self.subs.closed(id) {
                self.subs.connect(id, now);
                self.publish();
            }
        }

        fn ejection_changed(&mut self, _addr: &Address, _now: Instant) {
            self.publish();
        }

        fn health_changed(&mut self, _now: Instant) {
            self.publish();
        }

        fn uses_health(&self) -> bool {
            self.health
        }

        fn handle_timeout(&mut self, _now: Instant) {}

        fn state(&self) -> ConnectivityState {
            self.state
        }

        fn subchannels(&self) -> &Subchannels {
            &self.subs
        }

        fn subchannels_mut(&mut self) -> &mut Subchannels {
            &mut self.subs
        }
    }
}

/// The warning is for a policy "that does not run health checks" (`LoadBalancer::uses_health`), judged
/// for the config applied. A policy of the application's whose config turns health checking on
/// (`{"health": true}`) runs it, and no warning is due; given `{"health": false}` it does not, and one
/// is. The channel warns for the first and not for the second. Wrong: `control/event_loop.rs`
/// (`on_resolution_state`) reads `uses_health()` (and calls `set_health_checking`) before the policy's
/// `update` gives it the new config, so a new policy is judged before any config and a kept one by its
/// previous config.
#[tokio::test(start_paused = true)]
async fn the_health_warning_judges_a_custom_policy_by_the_config_it_applies() {
    let (capture, _installed) = tracing_capture::install().await;
    let addr = support::interop_server().await;
    let (resolver, pushed) = manual("health-if");
    pushed
        .set(vec![Endpoint::new(Address::Tcp(addr))])
        .expect("endpoints");
    let config = |health: bool| {
        format!(
            r#"{{"healthCheckConfig":{{"serviceName":""}},
                "loadBalancingConfig":[{{"test_health_if":{{"health":{health}}}}}]}}"#
        )
    };
    pushed
        .set_service_config(Some(config(true)))
        .expect("config");
    let ch = Channel::builder("health-if:///fleet")
        .resolver(resolver)
        .lb_policy(health_if::Builder)
        .build()
        .expect("channel");
    call(&ch).await;
    let first = capture.lines_containing("does not run health checks");
    pushed
        .set_service_config(Some(config(false)))
        .expect("config");
    tokio::time::sleep(Duration::from_millis(10)).await;
    call(&ch).await;
    let all = capture.lines_containing("does not run health checks");
    assert!(
        first.is_empty(),
        "{{\"health\": true}} runs health checks: {first:#?}"
    );
    assert_eq!(all.len(), 1, "{{\"health\": false}} does not: {all:#?}");
}

/// `"healthCheckConfig": {}` (no `serviceName`) asks for health checking of the server as a whole (`""`),
/// as grpc-go reads it (gRFC A17); C-core reads it as off, which left a config that asks for health
/// checking with none and not a word (issue 35's "silent non-event"). Under round_robin the channel health
/// checks (the per-address health shows); under pick_first, which never does, the warning names
/// `healthCheckConfig`.
#[tokio::test(start_paused = true)]
async fn an_empty_health_check_config_checks_the_server_as_a_whole() {
    let (capture, _installed) = tracing_capture::install().await;
    let addr = support::interop_server().await;
    let target = support::ipv4_target(&[addr]);
    let config = r#"{"healthCheckConfig":{},"loadBalancingConfig":[{"round_robin":{}}]}"#;
    let ch = support::channel_with_config(&target, config);
    call(&ch).await;
    let stats = ch.stats();
    assert!(
        stats
            .addresses
            .get(&addr.to_string())
            .is_some_and(|s| s.health.is_some()),
        "round_robin health checks the server as a whole: {:#?}",
        stats.addresses
    );
    assert!(capture
        .lines_containing("does not run health checks")
        .is_empty());
    let pf = support::channel_with_config(&target, r#"{"healthCheckConfig":{}}"#);
    call(&pf).await;
    let lines = capture.lines_containing("does not run health checks");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("healthCheckConfig"), "{}", lines[0]);
    assert!(lines[0].contains("policy=pick_first"), "{}", lines[0]);
}
