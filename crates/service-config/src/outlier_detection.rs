//! The config of the `outlier_detection_experimental` LB policy (gRFC A50), without its `childPolicy`
//! (`lb_config.rs` parses that, with the rules of `loadBalancingConfig`): JSON → `grpc_lb`'s
//! [`OutlierDetectionConfig`], with A50's defaults and validation.
//!
//! Defaults: `interval` 10 s, `baseEjectionTime` 30 s, `maxEjectionTime` 300 s or `baseEjectionTime` if
//! larger, `maxEjectionPercent` 10; `successRateEjection` {`stdevFactor` 1900, `enforcementPercentage` 100,
//! `minimumHosts` 5, `requestVolume` 100}; `failurePercentageEjection` {`threshold` 85,
//! `enforcementPercentage` 100, `minimumHosts` 5, `requestVolume` 50}. An algorithm runs only if its object
//! is present (`{}` takes every default). `failurePercentageEjection.enforcementPercentage` defaults to 100
//! as A50, C-core and grpc-java have it; grpc-go's JSON default is 0.
//!
//! Validation (A50): the durations are proto3 JSON durations and not negative; `maxEjectionPercent`, both
//! `enforcementPercentage`s and `threshold` are at most 100; the counts fit a `uint32`. Any violation is a
//! [`ParseError`] at the field's path, and the whole service config is refused (A21 keeps the last good
//! one). Not here: the xDS mapping of Envoy's `OutlierDetection` message.

use grpc_lb::{
    FailurePercentageEjection, OutlierDetectionConfig, Percentage, SuccessRateEjection,
    MIN_SWEEP_INTERVAL,
};

use crate::clamp::{Clamp, ClampKind, Clamps};
use crate::error::{ParseError, Rule};
use crate::json::{field, At};

/// The policy's fields other than `childPolicy`.
///
/// Two values are kept as written but applied otherwise, and noted in `clamps`: an `interval` below
/// [`MIN_SWEEP_INTERVAL`] (sweeps run at most that often) and a `maxEjectionTime` below
/// `baseEjectionTime` (A50: ejections last up to `max(base, max)`).
pub(crate) fn parse_outlier_detection(
    at: &At<'_>,
    clamps: &mut Clamps,
) -> Result<OutlierDetectionConfig, ParseError> {
    let obj = at.object()?;
    let interval = field(at, obj, "interval", |d| {
        let interval = d.duration()?;
        if interval < MIN_SWEEP_INTERVAL {
            clamps.push(Clamp::new(
                d.path(),
                ClampKind::Duration {
                    requested: interval,
                    applied: MIN_SWEEP_INTERVAL,
                },
            ));
        }
        Ok(interval)
    })?
    .unwrap_or(OutlierDetectionConfig::DEFAULT_INTERVAL);
    let base_ejection_time = field(at, obj, "baseEjectionTime", |d| d.duration())?
        .unwrap_or(OutlierDetectionConfig::DEFAULT_BASE_EJECTION_TIME);
    let max_ejection_time = field(at, obj, "maxEjectionTime", |d| {
        let max = d.duration()?;
        if max < base_ejection_time {
            clamps.push(Clamp::new(
                d.path(),
                ClampKind::Duration {
                    requested: max,
                    applied: base_ejection_time,
                },
            ));
        }
        Ok(max)
    })?
    .unwrap_or_else(|| OutlierDetectionConfig::default_max_ejection_time(base_ejection_time));
    let max_ejection_percent = field(at, obj, "maxEjectionPercent", percentage)?
        .unwrap_or(OutlierDetectionConfig::DEFAULT_MAX_EJECTION_PERCENT);
    let success_rate = field(at, obj, "successRateEjection", parse_success_rate)?;
    let failure_percentage = field(
        at,
        obj,
        "failurePercentageEjection",
        parse_failure_percentage,
    )?;
    Ok(OutlierDetectionConfig {
        interval,
        base_ejection_time,
        max_ejection_time,
        max_ejection_percent,
        success_rate,
        failure_percentage,
    })
}

fn parse_success_rate(at: At<'_>) -> Result<SuccessRateEjection, ParseError> {
    let obj = at.object()?;
    let defaults = SuccessRateEjection::default();
    Ok(SuccessRateEjection {
        stdev_factor: field(&at, obj, "stdevFactor", uint32)?.unwrap_or(defaults.stdev_factor),
        enforcement_percentage: field(&at, obj, "enforcementPercentage", percentage)?
            .unwrap_or(defaults.enforcement_percentage),
        minimum_hosts: field(&at, obj, "minimumHosts", uint32)?.unwrap_or(defaults.minimum_hosts),
        request_volume: field(&at, obj, "requestVolume", uint32)?
            .unwrap_or(defaults.request_volume),
    })
}

fn parse_failure_percentage(at: At<'_>) -> Result<FailurePercentageEjection, ParseError> {
    let obj = at.object()?;
    let defaults = FailurePercentageEjection::default();
    Ok(FailurePercentageEjection {
        threshold: field(&at, obj, "threshold", percentage)?.unwrap_or(defaults.threshold),
        enforcement_percentage: field(&at, obj, "enforcementPercentage", percentage)?
            .unwrap_or(defaults.enforcement_percentage),
        minimum_hosts: field(&at, obj, "minimumHosts", uint32)?.unwrap_or(defaults.minimum_hosts),
        request_volume: field(&at, obj, "requestVolume", uint32)?
            .unwrap_or(defaults.request_volume),
    })
}

/// A `google.protobuf.UInt32Value`.
fn uint32(at: At<'_>) -> Result<u32, ParseError> {
    let n = at.uint()?;
    u32::try_from(n)
        .map_err(|_| at.error(Rule::OutOfRange(format!("{n} is larger than 4294967295"))))
}

/// A `UInt32Value` that A50 bounds by 100.
fn percentage(at: At<'_>) -> Result<Percentage, ParseError> {
    let n = at.uint()?;
    u32::try_from(n)
        .ok()
        .and_then(Percentage::new)
        .ok_or_else(|| {
            at.error(Rule::OutOfRange(format!(
                "{n} is not a percentage in 0..=100"
            )))
        })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use grpc_lb::{
        FailurePercentageEjection, OutlierDetectionConfig, Percentage, SuccessRateEjection,
    };

    use crate::{LbConfig, ParseOptions, ServiceConfig};

    fn parse(policy: &str) -> Result<LbConfig, String> {
        let json = format!(r#"{{"loadBalancingConfig":[{policy}]}}"#);
        ServiceConfig::parse(&json, ParseOptions::default())
            .map(|c| c.lb_policy().clone())
            .map_err(|e| format!("{}: {}", e.path, e.rule))
    }

    /// An `outlier_detection_experimental` entry with these fields and a round_robin child.
    fn od(fields: &str) -> Result<LbConfig, String> {
        let comma = if fields.is_empty() { "" } else { "," };
        parse(&format!(
            r#"{{"outlier_detection_experimental":{{{fields}{comma}"childPolicy":[{{"round_robin":{{}}}}]}}}}"#
        ))
    }

    fn config(fields: &str) -> OutlierDetectionConfig {
        match od(fields) {
            Ok(LbConfig::OutlierDetection { config, .. }) => config,
            other => panic!("{fields}: {other:?}"),
        }
    }

    #[track_caller]
    fn error(fields: &str, expected: &str) {
        assert_eq!(od(fields), Err(expected.to_owned()), "{fields}");
    }

    const AT: &str = "$.loadBalancingConfig[0].outlier_detection_experimental";

    fn pct(v: u32) -> Percentage {
        Percentage::new(v).expect("a percentage")
    }

    #[test]
    fn every_field_parses() {
        let got = config(
            r#""interval":"5s","baseEjectionTime":"1.5s","maxEjectionTime":"60s","maxEjectionPercent":50,
            "successRateEjection":{"stdevFactor":1000,"enforcementPercentage":90,"minimumHosts":3,"requestVolume":20},
            "failurePercentageEjection":{"threshold":70,"enforcementPercentage":40,"minimumHosts":2,"requestVolume":"10"}"#,
        );
        assert_eq!(
            got,
            OutlierDetectionConfig {
                interval: Duration::from_secs(5),
                base_ejection_time: Duration::from_millis(1500),
                max_ejection_time: Duration::from_secs(60),
                max_ejection_percent: pct(50),
                success_rate: Some(SuccessRateEjection {
                    stdev_factor: 1000,
                    enforcement_percentage: pct(90),
                    minimum_hosts: 3,
                    request_volume: 20,
                }),
                failure_percentage: Some(FailurePercentageEjection {
                    threshold: pct(70),
                    enforcement_percentage: pct(40),
                    minimum_hosts: 2,
                    request_volume: 10,
                }),
            }
        );
    }

    #[test]
    fn absent_fields_take_a50_defaults() {
        // No algorithm object: a config that ejects nothing.
        let none = config("");
        assert_eq!(none, OutlierDetectionConfig::default());
        assert!(!none.is_enabled());
        assert_eq!(none.interval, Duration::from_secs(10));
        assert_eq!(none.base_ejection_time, Duration::from_secs(30));
        assert_eq!(none.max_ejection_time, Duration::from_secs(300));
        assert_eq!(none.max_ejection_percent, pct(10));
        // `{}` turns an algorithm on with its defaults.
        let both = config(r#""successRateEjection":{},"failurePercentageEjection":{}"#);
        let sr = both.success_rate.expect("success rate on");
        assert_eq!(
            (
                sr.stdev_factor,
                sr.enforcement_percentage,
                sr.minimum_hosts,
                sr.request_volume
            ),
            (1900, pct(100), 5, 100)
        );
        let fp = both.failure_percentage.expect("failure percentage on");
        assert_eq!(
            (
                fp.threshold,
                fp.enforcement_percentage,
                fp.minimum_hosts,
                fp.request_volume
            ),
            (pct(85), pct(100), 5, 50)
        );
        // null is absent.
        assert!(!config(r#""successRateEjection":null"#).is_enabled());
    }

    #[test]
    fn max_ejection_time_defaults_to_300s_or_the_base_time() {
        let base = |b: &str| config(&format!(r#""baseEjectionTime":"{b}""#)).max_ejection_time;
        assert_eq!(base("30s"), Duration::from_secs(300));
        assert_eq!(base("400s"), Duration::from_secs(400));
        // Given explicitly, it is kept even below the base (the ejection formula takes the larger).
        let explicit = config(r#""baseEjectionTime":"400s","maxEjectionTime":"100s""#);
        assert_eq!(explicit.max_ejection_time, Duration::from_secs(100));
        assert_eq!(explicit.ejection_duration(1), Duration::from_secs(400));
    }

    #[test]
    fn zero_values_are_valid() {
        let zero = config(
            r#""interval":"0s","baseEjectionTime":"0s","maxEjectionTime":"0s","maxEjectionPercent":0,
            "failurePercentageEjection":{"threshold":0,"enforcementPercentage":0,"minimumHosts":0,"requestVolume":0}"#,
        );
        assert_eq!(zero.interval, Duration::ZERO);
        assert_eq!(zero.max_ejection_percent, Percentage::ZERO);
        assert_eq!(
            zero.failure_percentage.map(|f| f.threshold),
            Some(Percentage::ZERO)
        );
        let hundred = config(r#""maxEjectionPercent":100"#);
        assert_eq!(hundred.max_ejection_percent, Percentage::HUNDRED);
    }

    #[test]
    fn each_invalid_field_rejects_the_config() {
        for (fields, path, rule) in [
            (
                r#""interval":"-1s""#,
                ".interval",
                r#"duration "-1s" must not be negative"#,
            ),
            (
                r#""interval":"10""#,
                ".interval",
                r#"invalid duration "10": expected decimal seconds with an 's' suffix, e.g. "0.25s""#,
            ),
            (r#""interval":10"#, ".interval", "expected a string"),
            (
                r#""baseEjectionTime":"-0.5s""#,
                ".baseEjectionTime",
                r#"duration "-0.5s" must not be negative"#,
            ),
            (
                r#""maxEjectionTime":"1e3s""#,
                ".maxEjectionTime",
                r#"invalid duration "1e3s": expected decimal seconds with an 's' suffix, e.g. "0.25s""#,
            ),
            (
                r#""maxEjectionPercent":101"#,
                ".maxEjectionPercent",
                "101 is not a percentage in 0..=100",
            ),
            (
                r#""maxEjectionPercent":-1"#,
                ".maxEjectionPercent",
                "expected a non-negative integer",
            ),
            (
                r#""maxEjectionPercent":1.5"#,
                ".maxEjectionPercent",
                "expected a non-negative integer",
            ),
            (
                r#""successRateEjection":[]"#,
                ".successRateEjection",
                "expected an object",
            ),
            (
                r#""successRateEjection":{"stdevFactor":4294967296}"#,
                ".successRateEjection.stdevFactor",
                "4294967296 is larger than 4294967295",
            ),
            (
                r#""successRateEjection":{"enforcementPercentage":101}"#,
                ".successRateEjection.enforcementPercentage",
                "101 is not a percentage in 0..=100",
            ),
            (
                r#""successRateEjection":{"minimumHosts":"x"}"#,
                ".successRateEjection.minimumHosts",
                "expected a non-negative integer",
            ),
            (
                r#""successRateEjection":{"requestVolume":-5}"#,
                ".successRateEjection.requestVolume",
                "expected a non-negative integer",
            ),
            (
                r#""failurePercentageEjection":{"threshold":101}"#,
                ".failurePercentageEjection.threshold",
                "101 is not a percentage in 0..=100",
            ),
            (
                r#""failurePercentageEjection":{"enforcementPercentage":200}"#,
                ".failurePercentageEjection.enforcementPercentage",
                "200 is not a percentage in 0..=100",
            ),
            (
                r#""failurePercentageEjection":{"minimumHosts":true}"#,
                ".failurePercentageEjection.minimumHosts",
                "expected a non-negative integer",
            ),
            (
                r#""failurePercentageEjection":{"requestVolume":5000000000}"#,
                ".failurePercentageEjection.requestVolume",
                "5000000000 is larger than 4294967295",
            ),
        ] {
            error(fields, &format!("{AT}{path}: {rule}"));
        }
    }

    #[test]
    fn child_policy_is_required_and_parsed_like_load_balancing_config() {
        assert_eq!(
            parse(r#"{"outlier_detection_experimental":{}}"#),
            Err(format!("{AT}.childPolicy: required field is missing"))
        );
        assert_eq!(
            parse(r#"{"outlier_detection_experimental":null}"#),
            Err(format!("{AT}: required field is missing"))
        );
        assert_eq!(
            parse(r#"{"outlier_detection_experimental":[]}"#),
            Err(format!("{AT}: expected an object"))
        );
        // The first supported child wins.
        let got = parse(
            r#"{"outlier_detection_experimental":{"childPolicy":[{"grpclb":{}},{"pick_first":{"shuffleAddressList":true}},{"round_robin":{}}]}}"#,
        );
        assert_eq!(
            got,
            Ok(LbConfig::OutlierDetection {
                config: OutlierDetectionConfig::default(),
                child: Box::new(LbConfig::PickFirst {
                    shuffle_address_list: true
                }),
            })
        );
        assert_eq!(
            got.as_ref().map(|c| c.name()),
            Ok("outlier_detection_experimental")
        );
        // No supported child, or an invalid one: the config is invalid (no fall-through to the next entry).
        assert_eq!(
            parse(
                r#"{"outlier_detection_experimental":{"childPolicy":[{"weird":{}}]}},{"round_robin":{}}"#
            ),
            Err(format!(
                r#"{AT}.childPolicy: no supported load balancing policy in ["weird"]"#
            ))
        );
        assert_eq!(
            parse(
                r#"{"outlier_detection_experimental":{"childPolicy":[{"pick_first":{"shuffleAddressList":1}}]}}"#
            ),
            Err(format!(
                "{AT}.childPolicy[0].pick_first.shuffleAddressList: expected true or false"
            ))
        );
        assert_eq!(
            parse(r#"{"outlier_detection_experimental":{"childPolicy":{}}}"#),
            Err(format!("{AT}.childPolicy: expected an array"))
        );
        // Nested outlier detection parses with the same rules.
        let nested = parse(
            r#"{"outlier_detection_experimental":{"failurePercentageEjection":{},"childPolicy":[
                {"outlier_detection_experimental":{"interval":"1s","childPolicy":[{"round_robin":{}}]}}]}}"#,
        );
        let Ok(LbConfig::OutlierDetection { config, child }) = nested else {
            panic!("{nested:?}");
        };
        assert!(config.failure_percentage.is_some());
        assert_eq!(
            *child,
            LbConfig::OutlierDetection {
                config: OutlierDetectionConfig {
                    interval: Duration::from_secs(1),
                    ..OutlierDetectionConfig::default()
                },
                child: Box::new(LbConfig::RoundRobin),
            }
        );
    }

    #[test]
    fn an_unsupported_first_entry_falls_through_to_outlier_detection() {
        assert_eq!(
            parse(r#"{"xds_wrr_locality_experimental":{}},{"outlier_detection_experimental":{"childPolicy":[{"round_robin":{}}]}}"#)
                .map(|c| c.name().to_owned()),
            Ok("outlier_detection_experimental".to_owned())
        );
        // Unknown fields are ignored.
        assert!(od(r#""successRateEjection":{"unknown":1},"extra":true"#).is_ok());
    }
}
