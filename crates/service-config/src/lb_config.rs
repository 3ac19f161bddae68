//! The load-balancing policy a service config selects: `loadBalancingConfig` (first supported policy wins)
//! or, only when that is absent, the deprecated `loadBalancingPolicy`. pick_first is the default.
//!
//! Supported: every policy of the parse's [`grpc_lb::PolicyRegistry`] (the channel's own policies, then
//! the process-wide ones, [`grpc_lb::register_policy`]), whose builder parses its JSON config; then the
//! built-ins `pick_first` (A62 `shuffleAddressList`), `round_robin`, and `outlier_detection_experimental`
//! (A50), whose required `childPolicy` is a list parsed with the same rules as `loadBalancingConfig` (the
//! first supported entry wins; unknown names before it are skipped; the chosen entry, if invalid (a
//! registered policy's config its builder rejects, or whose parser panics, included), invalidates the
//! whole config; the entries after it are not looked at, as in grpc-go, C-core and grpc-java, so a
//! policy's parser runs only on the entry chosen). A registered policy of a built-in's name replaces the
//! built-in. Outlier detection's other fields are parsed in `outlier_detection.rs`.

use std::fmt;
use std::sync::Arc;

use grpc_lb::{LoadBalancerBuilder, OutlierDetectionConfig, ParsedLbConfig, PolicyRegistry};
use serde_json::Value;

use crate::clamp::Clamps;
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
    /// A registered policy (the application's, or one registered under a built-in's name).
    Registered(RegisteredPolicy),
    /// No policy configured: pick_first with its defaults (the channel runs a registered `pick_first`, with
    /// its builder's default config, if there is one).
    #[default]
    Default,
}

impl LbConfig {
    /// The policy's name.
    pub fn name(&self) -> &str {
        match self {
            LbConfig::PickFirst { .. } | LbConfig::Default => "pick_first",
            LbConfig::RoundRobin => "round_robin",
            LbConfig::OutlierDetection { .. } => "outlier_detection_experimental",
            LbConfig::Registered(p) => p.name(),
        }
    }
}

/// A registered policy a `loadBalancingConfig` selected: its builder, its JSON config and what the builder
/// parsed from it. Two are equal when their names and JSON configs are (the channel then keeps the
/// running policy and gives it the config).
#[derive(Clone)]
pub struct RegisteredPolicy {
    name: String,
    json: Value,
    parsed: ParsedLbConfig,
    builder: Arc<dyn LoadBalancerBuilder>,
}

impl RegisteredPolicy {
    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its JSON config, as the service config had it.
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// Its config, as its builder parsed it.
    pub fn config(&self) -> &ParsedLbConfig {
        &self.parsed
    }

    /// Its builder.
    pub fn builder(&self) -> &Arc<dyn LoadBalancerBuilder> {
        &self.builder
    }
}

impl PartialEq for RegisteredPolicy {
    fn eq(&self, other: &RegisteredPolicy) -> bool {
        self.name == other.name && self.json == other.json
    }
}

impl Eq for RegisteredPolicy {}

impl fmt::Debug for RegisteredPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredPolicy")
            .field("name", &self.name)
            .field("json", &self.json)
            .finish_non_exhaustive()
    }
}

/// `builder`'s parse of `config`, the application's code: a panic in it is a config it rejects (A21: the
/// service config is invalid), never a panic in whoever parses (a resolver's task, the application's
/// `set_service_config`).
fn parse_caught(
    builder: &dyn LoadBalancerBuilder,
    config: &Value,
) -> Result<ParsedLbConfig, String> {
    caught(builder, || {
        builder.parse_config(config).map_err(|e| e.to_string())
    })
}

/// Runs `f`, the application's code of `builder`: a panic is an error.
fn caught<R>(
    builder: &dyn LoadBalancerBuilder,
    f: impl FnOnce() -> Result<R, String>,
) -> Result<R, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(panic) => {
            let message = if let Some(s) = panic.downcast_ref::<&str>() {
                (*s).to_owned()
            } else if let Some(s) = panic.downcast_ref::<String>() {
                s.clone()
            } else {
                "(no message)".to_owned()
            };
            // The payload's own drop could panic too: forget it.
            std::mem::forget(panic);
            Err(format!(
                "the {} config parser panicked: {message}",
                builder.name()
            ))
        }
    }
}

/// The entry `name` (at `entry`, with its object `obj`) for the registered policy of `builder`: parsed by
/// it (a `null` config counts as `{}`).
fn parse_registered(
    entry: &At<'_>,
    obj: &serde_json::Map<String, Value>,
    name: &str,
    builder: Arc<dyn LoadBalancerBuilder>,
) -> Result<LbConfig, ParseError> {
    let empty = Value::Object(serde_json::Map::new());
    let parse = |cfg: At<'_>| {
        parse_caught(builder.as_ref(), cfg.value)
            .map(|parsed| (cfg.value.clone(), parsed))
            .map_err(|e| cfg.error(Rule::BadLbConfig(e)))
    };
    let (json, parsed) = match field(entry, obj, name, parse)? {
        Some(found) => found,
        None => (
            empty.clone(),
            parse_caught(builder.as_ref(), &empty)
                .map_err(|e| entry.error(Rule::BadLbConfig(e)))?,
        ),
    };
    Ok(LbConfig::Registered(RegisteredPolicy {
        name: name.to_owned(),
        json,
        parsed,
        builder,
    }))
}

pub(crate) fn parse_lb_config(
    at: At<'_>,
    policies: &PolicyRegistry,
    clamps: &mut Clamps,
) -> Result<LbConfig, ParseError> {
    let mut names = Vec::new();
    // The first supported entry is the choice, and the entries after it are not looked at (neither
    // validated nor given to a policy's parser), as grpc-go, C-core and grpc-java do.
    let mut chosen = false;
    let entries = crate::json::each(&at, |entry| {
        if chosen {
            return Ok(None);
        }
        let obj = entry.object()?;
        if obj.len() != 1 {
            return Err(entry.error(Rule::BadLbEntry));
        }
        let (name, _) = obj
            .iter()
            .next()
            .ok_or_else(|| entry.error(Rule::BadLbEntry))?;
        if let Some(builder) = policies.registered(name) {
            names.push(name.clone());
            chosen = true;
            return parse_registered(&entry, obj, name, builder).map(Some);
        }
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
                    let config = parse_outlier_detection(&cfg, clamps)?;
                    // An outlier detection nested in the child does not apply (the outer one decides):
                    // its clamps are no note's, as nothing of it is in force.
                    let child = required(&cfg, cfg.object()?, "childPolicy", |child| {
                        parse_lb_config(child, policies, &mut Clamps::default())
                    })?;
                    Ok(LbConfig::OutlierDetection {
                        config,
                        child: Box::new(child),
                    })
                },
            )?),
            _ => None,
        };
        names.push(name.clone());
        chosen = policy.is_some();
        Ok(policy)
    })?;
    entries
        .into_iter()
        .flatten()
        .next()
        .ok_or_else(|| at.error(Rule::NoSupportedLbPolicy(names)))
}

pub(crate) fn parse_lb_policy_name(
    at: At<'_>,
    policies: &PolicyRegistry,
) -> Result<LbConfig, ParseError> {
    let name = at.str()?;
    let lower = name.to_ascii_lowercase();
    if let Some(builder) = policies.registered(&lower) {
        return Ok(LbConfig::Registered(RegisteredPolicy {
            name: lower,
            json: Value::Object(serde_json::Map::new()),
            parsed: caught(builder.as_ref(), || Ok(builder.default_config()))
                .map_err(|e| at.error(Rule::BadLbConfig(e)))?,
            builder,
        }));
    }
    match lower.as_str() {
        "round_robin" => Ok(LbConfig::RoundRobin),
        "pick_first" => Ok(LbConfig::PickFirst {
            shuffle_address_list: false,
        }),
        _ => Err(at.error(Rule::UnknownLbPolicy(name.to_owned()))),
    }
}

#[cfg(test)]
mod tests {
    use grpc_lb::{
        register_policy, BuildOptions, LbConfigError, LoadBalancer, LoadBalancerBuilder,
        ParsedLbConfig, PolicyRegistry, RoundRobinBuilder,
    };

    use crate::{LbConfig, ParseOptions, Rule, ServiceConfig};

    /// A policy whose config must be `{}` or `{"n": <number>}`; it is never built.
    struct Named(&'static str);

    impl LoadBalancerBuilder for Named {
        fn name(&self) -> &str {
            self.0
        }

        fn parse_config(
            &self,
            config: &serde_json::Value,
        ) -> Result<ParsedLbConfig, LbConfigError> {
            let obj = config
                .as_object()
                .ok_or_else(|| LbConfigError::invalid(self.0, "not an object"))?;
            match obj.get("n") {
                None => Ok(ParsedLbConfig::new(0u64)),
                Some(n) => n
                    .as_u64()
                    .map(ParsedLbConfig::new)
                    .ok_or_else(|| LbConfigError::invalid(self.0, "n is not a number")),
            }
        }

        fn build(&self, options: BuildOptions) -> Box<dyn LoadBalancer> {
            RoundRobinBuilder.build(options)
        }
    }

    fn parse(entries: &str, policies: &PolicyRegistry) -> Result<LbConfig, Rule> {
        let json = format!(r#"{{"loadBalancingConfig":[{entries}]}}"#);
        ServiceConfig::parse(
            &json,
            ParseOptions::default().with_policies(policies.clone()),
        )
        .map(|c| c.lb_policy().clone())
        .map_err(|e| e.rule)
    }

    fn name(config: &Result<LbConfig, Rule>) -> &str {
        config.as_ref().map_or("(invalid)", |c| c.name())
    }

    #[test]
    fn the_first_known_name_wins_and_unknown_names_are_skipped() {
        let channel = PolicyRegistry::new().with(Named("sc_tests_mine"));
        let got = parse(
            r#"{"sc_tests_unknown":{}},{"sc_tests_mine":{"n":3}},{"round_robin":{}}"#,
            &channel,
        );
        assert_eq!(name(&got), "sc_tests_mine");
        let Ok(LbConfig::Registered(p)) = &got else {
            panic!("{got:?}")
        };
        assert_eq!(p.config().downcast_ref::<u64>(), Some(&3));
        assert_eq!(p.json(), &serde_json::json!({"n": 3}));
        // Not in this parse's registry: skipped, the next known name is used.
        let got = parse(
            r#"{"sc_tests_mine":{"n":3}},{"round_robin":{}}"#,
            &PolicyRegistry::new(),
        );
        assert_eq!(got, Ok(LbConfig::RoundRobin));
        // A registered name before a built-in one wins; a null config is `{}`.
        let got = parse(r#"{"sc_tests_mine":null},{"pick_first":{}}"#, &channel);
        assert_eq!(name(&got), "sc_tests_mine");
        // No known name at all: the config is invalid.
        let got = parse(r#"{"sc_tests_unknown":{}}"#, &channel);
        assert_eq!(
            got,
            Err(Rule::NoSupportedLbPolicy(vec!["sc_tests_unknown".into()]))
        );
    }

    #[test]
    fn a_config_its_builder_rejects_invalidates_the_service_config() {
        let channel = PolicyRegistry::new().with(Named("sc_tests_strict"));
        let got = parse(
            r#"{"sc_tests_strict":{"n":"three"}},{"round_robin":{}}"#,
            &channel,
        );
        assert_eq!(
            got,
            Err(Rule::BadLbConfig(
                "invalid sc_tests_strict config: n is not a number".into()
            ))
        );
        // After the chosen entry nothing is looked at (grpc-go, C-core and grpc-java stop at the first
        // supported entry): an entry there its builder would reject, or that is not even an entry, is not
        // parsed.
        let got = parse(
            r#"{"round_robin":{}},{"sc_tests_strict":[]},"not an entry""#,
            &channel,
        );
        assert_eq!(got, Ok(LbConfig::RoundRobin));
    }

    /// A parser that panics.
    struct Explodes;

    impl LoadBalancerBuilder for Explodes {
        fn name(&self) -> &str {
            "sc_tests_explodes"
        }

        fn parse_config(&self, _: &serde_json::Value) -> Result<ParsedLbConfig, LbConfigError> {
            panic!("boom")
        }

        fn default_config(&self) -> ParsedLbConfig {
            panic!("boom by default")
        }

        fn build(&self, options: BuildOptions) -> Box<dyn LoadBalancer> {
            RoundRobinBuilder.build(options)
        }
    }

    #[test]
    fn a_parser_that_panics_makes_an_invalid_config() {
        let channel = PolicyRegistry::new().with(Explodes);
        let got = parse(r#"{"sc_tests_explodes":{}}"#, &channel);
        assert_eq!(
            got,
            Err(Rule::BadLbConfig(
                "the sc_tests_explodes config parser panicked: boom".into()
            ))
        );
        let json = r#"{"loadBalancingPolicy":"sc_tests_explodes"}"#;
        let got = ServiceConfig::parse(json, ParseOptions::default().with_policies(channel));
        assert!(
            matches!(&got, Err(e) if matches!(e.rule, Rule::BadLbConfig(_))),
            "{got:?}"
        );
        // Not chosen, not run.
        let channel = PolicyRegistry::new().with(Explodes);
        let got = parse(r#"{"pick_first":{}},{"sc_tests_explodes":{}}"#, &channel);
        assert!(matches!(got, Ok(LbConfig::PickFirst { .. })), "{got:?}");
    }

    #[test]
    fn process_wide_policies_channel_overrides_and_outlier_detection_children() {
        register_policy(Named("sc_tests_global"));
        let got = parse(r#"{"sc_tests_global":{}}"#, &PolicyRegistry::new());
        assert_eq!(name(&got), "sc_tests_global");
        // The channel's own policy of a built-in's name replaces the built-in.
        let channel = PolicyRegistry::new().with(Named("round_robin"));
        let got = parse(r#"{"round_robin":{}}"#, &channel);
        assert!(matches!(got, Ok(LbConfig::Registered(_))), "{got:?}");
        // A user's policy as outlier detection's child.
        let channel = PolicyRegistry::new().with(Named("sc_tests_child"));
        let got = parse(
            r#"{"outlier_detection_experimental":{"childPolicy":[{"sc_tests_child":{"n":1}}]}}"#,
            &channel,
        );
        let Ok(LbConfig::OutlierDetection { child, .. }) = &got else {
            panic!("{got:?}")
        };
        assert_eq!(child.name(), "sc_tests_child");
        // loadBalancingPolicy names a registered policy too, with its default config.
        let json = r#"{"loadBalancingPolicy":"SC_TESTS_CHILD"}"#;
        let got = ServiceConfig::parse(json, ParseOptions::default().with_policies(channel))
            .expect("valid");
        assert_eq!(got.lb_policy().name(), "sc_tests_child");
    }
}
