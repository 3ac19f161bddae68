//! A Cluster's `outlier_detection` (`envoy.config.cluster.v3.OutlierDetection`) read as gRFC A50's xDS
//! mapping: straight into `grpc_lb`'s [`OutlierDetectionConfig`], the type the `outlier_detection` policy
//! runs on, with the A50 defaults filled in.
//!
//! The mapping:
//! * `interval`, `base_ejection_time`, `max_ejection_time`, `max_ejection_percent` map directly (defaults
//!   10 s, 30 s, 300 s or `base_ejection_time` if larger, 10 %);
//! * success rate runs unless `enforcing_success_rate` is explicitly 0 (Envoy's default is 100), with
//!   `success_rate_stdev_factor` (thousandths, default 1900), `success_rate_minimum_hosts` (5) and
//!   `success_rate_request_volume` (100);
//! * failure percentage runs only when `enforcing_failure_percentage` is set and not 0 (Envoy's default
//!   is 0), with `failure_percentage_threshold` (85 %), `failure_percentage_minimum_hosts` (5) and
//!   `failure_percentage_request_volume` (50).
//!
//! Durations must be valid `google.protobuf.Duration`s and not negative; the four percentages must be at
//! most 100, checked whether or not their algorithm runs. Anything else is a NACK. The other detectors
//! (consecutive 5xx, gateway and local-origin failures, jitter, monitors) are ignored, as in gRPC.
//!
//! Not here: where the config goes (one per priority, above `xds_cluster_impl`, A50) and what an absent
//! `outlier_detection` means (a config with neither algorithm); the caller decides both.

use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::OutlierDetection;
use envoy_types::pb::google::protobuf::{Duration as ProtoDuration, UInt32Value};
use grpc_lb::{FailurePercentageEjection, OutlierDetectionConfig, Percentage, SuccessRateEjection};

use super::ResourceError;

/// The largest `google.protobuf.Duration` in seconds: 10,000 years.
const MAX_DURATION_SECONDS: i64 = 315_576_000_000;

/// A `google.protobuf.Duration` that is valid and not negative, as a `Duration`; `field` names it in the
/// error.
pub(crate) fn non_negative_duration(
    value: &ProtoDuration,
    field: &str,
) -> Result<Duration, ResourceError> {
    let ProtoDuration { seconds, nanos } = *value;
    if !(0..=MAX_DURATION_SECONDS).contains(&seconds) || !(0..=999_999_999).contains(&nanos) {
        return Err(ResourceError::new(
            field,
            format!("invalid or negative duration ({seconds} s, {nanos} ns)"),
        ));
    }
    // Both are in range and not negative, so the conversions cannot fail.
    Ok(Duration::new(
        u64::try_from(seconds).unwrap_or(0),
        u32::try_from(nanos).unwrap_or(0),
    ))
}

/// A percentage field: its value if set, else `default`; more than 100 is an error at `field`.
fn percentage(
    value: Option<&UInt32Value>,
    default: Percentage,
    field: &str,
) -> Result<Percentage, ResourceError> {
    match value {
        None => Ok(default),
        Some(v) => Percentage::new(v.value).ok_or_else(|| {
            ResourceError::new(field, format!("{} is more than 100 (percent)", v.value))
        }),
    }
}

/// A duration field: its value if set, else `None`.
fn optional_duration(
    value: Option<&ProtoDuration>,
    field: &str,
) -> Result<Option<Duration>, ResourceError> {
    value.map(|d| non_negative_duration(d, field)).transpose()
}

/// The [`OutlierDetectionConfig`] of a Cluster's `outlier_detection`, by A50's xDS mapping. Errors name the
/// field inside `outlier_detection`.
pub fn outlier_detection_config(
    proto: &OutlierDetection,
) -> Result<OutlierDetectionConfig, ResourceError> {
    let interval = optional_duration(proto.interval.as_ref(), "interval")?
        .unwrap_or(OutlierDetectionConfig::DEFAULT_INTERVAL);
    let base_ejection_time =
        optional_duration(proto.base_ejection_time.as_ref(), "base_ejection_time")?
            .unwrap_or(OutlierDetectionConfig::DEFAULT_BASE_EJECTION_TIME);
    let max_ejection_time =
        optional_duration(proto.max_ejection_time.as_ref(), "max_ejection_time")?.unwrap_or_else(
            || OutlierDetectionConfig::default_max_ejection_time(base_ejection_time),
        );
    let max_ejection_percent = percentage(
        proto.max_ejection_percent.as_ref(),
        OutlierDetectionConfig::DEFAULT_MAX_EJECTION_PERCENT,
        "max_ejection_percent",
    )?;

    let success_defaults = SuccessRateEjection::default();
    let enforcing_success_rate = percentage(
        proto.enforcing_success_rate.as_ref(),
        success_defaults.enforcement_percentage,
        "enforcing_success_rate",
    )?;
    let success_rate = (enforcing_success_rate != Percentage::ZERO).then(|| SuccessRateEjection {
        stdev_factor: value_or(
            proto.success_rate_stdev_factor.as_ref(),
            success_defaults.stdev_factor,
        ),
        enforcement_percentage: enforcing_success_rate,
        minimum_hosts: value_or(
            proto.success_rate_minimum_hosts.as_ref(),
            success_defaults.minimum_hosts,
        ),
        request_volume: value_or(
            proto.success_rate_request_volume.as_ref(),
            success_defaults.request_volume,
        ),
    });

    let failure_defaults = FailurePercentageEjection::default();
    let threshold = percentage(
        proto.failure_percentage_threshold.as_ref(),
        failure_defaults.threshold,
        "failure_percentage_threshold",
    )?;
    // Unset means 0 here (Envoy's default), unlike `enforcing_success_rate`.
    let enforcing_failure_percentage = percentage(
        proto.enforcing_failure_percentage.as_ref(),
        Percentage::ZERO,
        "enforcing_failure_percentage",
    )?;
    let failure_percentage =
        (enforcing_failure_percentage != Percentage::ZERO).then(|| FailurePercentageEjection {
            threshold,
            enforcement_percentage: enforcing_failure_percentage,
            minimum_hosts: value_or(
                proto.failure_percentage_minimum_hosts.as_ref(),
                failure_defaults.minimum_hosts,
            ),
            request_volume: value_or(
                proto.failure_percentage_request_volume.as_ref(),
                failure_defaults.request_volume,
            ),
        });

    Ok(OutlierDetectionConfig {
        interval,
        base_ejection_time,
        max_ejection_time,
        max_ejection_percent,
        success_rate,
        failure_percentage,
    })
}

/// A `UInt32Value`'s value, or `default` when unset.
fn value_or(value: Option<&UInt32Value>, default: u32) -> u32 {
    value.map_or(default, |v| v.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32v(value: u32) -> Option<UInt32Value> {
        Some(UInt32Value { value })
    }

    fn dur(seconds: i64, nanos: i32) -> Option<ProtoDuration> {
        Some(ProtoDuration { seconds, nanos })
    }

    #[test]
    fn an_empty_message_is_the_a50_defaults_with_success_rate_only() {
        let config = outlier_detection_config(&OutlierDetection::default()).expect("valid");
        assert_eq!(config.interval, Duration::from_secs(10));
        assert_eq!(config.base_ejection_time, Duration::from_secs(30));
        assert_eq!(config.max_ejection_time, Duration::from_secs(300));
        assert_eq!(config.max_ejection_percent.get(), 10);
        // enforcing_success_rate unset: enabled at 100 %.
        assert_eq!(config.success_rate, Some(SuccessRateEjection::default()));
        // enforcing_failure_percentage unset: disabled.
        assert_eq!(config.failure_percentage, None);
    }

    #[test]
    fn fields_map_directly() {
        let proto = OutlierDetection {
            interval: dur(1, 500_000_000),
            base_ejection_time: dur(2, 0),
            max_ejection_time: dur(3, 0),
            max_ejection_percent: u32v(50),
            enforcing_success_rate: u32v(70),
            success_rate_stdev_factor: u32v(1000),
            success_rate_minimum_hosts: u32v(2),
            success_rate_request_volume: u32v(20),
            failure_percentage_threshold: u32v(60),
            enforcing_failure_percentage: u32v(80),
            failure_percentage_minimum_hosts: u32v(3),
            failure_percentage_request_volume: u32v(30),
            ..Default::default()
        };
        let config = outlier_detection_config(&proto).expect("valid");
        assert_eq!(
            config,
            OutlierDetectionConfig {
                interval: Duration::from_millis(1500),
                base_ejection_time: Duration::from_secs(2),
                max_ejection_time: Duration::from_secs(3),
                max_ejection_percent: Percentage::new(50).expect("<= 100"),
                success_rate: Some(SuccessRateEjection {
                    stdev_factor: 1000,
                    enforcement_percentage: Percentage::new(70).expect("<= 100"),
                    minimum_hosts: 2,
                    request_volume: 20,
                }),
                failure_percentage: Some(FailurePercentageEjection {
                    threshold: Percentage::new(60).expect("<= 100"),
                    enforcement_percentage: Percentage::new(80).expect("<= 100"),
                    minimum_hosts: 3,
                    request_volume: 30,
                }),
            }
        );
    }

    #[test]
    fn enforcing_success_rate_zero_disables_success_rate() {
        let proto = OutlierDetection {
            enforcing_success_rate: u32v(0),
            ..Default::default()
        };
        let config = outlier_detection_config(&proto).expect("valid");
        assert_eq!(config.success_rate, None);
        assert!(!config.is_enabled());
    }

    #[test]
    fn failure_percentage_runs_only_when_enforced() {
        let zero = OutlierDetection {
            enforcing_failure_percentage: u32v(0),
            ..Default::default()
        };
        assert_eq!(
            outlier_detection_config(&zero)
                .expect("valid")
                .failure_percentage,
            None
        );
        let on = OutlierDetection {
            enforcing_failure_percentage: u32v(100),
            ..Default::default()
        };
        assert_eq!(
            outlier_detection_config(&on)
                .expect("valid")
                .failure_percentage,
            Some(FailurePercentageEjection::default())
        );
    }

    #[test]
    fn max_ejection_time_defaults_to_base_when_base_is_larger() {
        let proto = OutlierDetection {
            base_ejection_time: dur(400, 0),
            ..Default::default()
        };
        let config = outlier_detection_config(&proto).expect("valid");
        assert_eq!(config.max_ejection_time, Duration::from_secs(400));
    }

    #[test]
    fn percentages_over_100_are_rejected_even_for_disabled_algorithms() {
        type Edit = fn(&mut OutlierDetection);
        let cases: [(&str, Edit); 4] = [
            ("max_ejection_percent", |p| {
                p.max_ejection_percent = u32v(101)
            }),
            ("enforcing_success_rate", |p| {
                p.enforcing_success_rate = u32v(101)
            }),
            ("enforcing_failure_percentage", |p| {
                p.enforcing_failure_percentage = u32v(101)
            }),
            ("failure_percentage_threshold", |p| {
                p.failure_percentage_threshold = u32v(101)
            }),
        ];
        for (field, set) in cases {
            let mut proto = OutlierDetection::default();
            set(&mut proto);
            let err = outlier_detection_config(&proto).expect_err(field);
            assert_eq!(err.field, field);
        }
        // 100 itself is fine.
        let proto = OutlierDetection {
            max_ejection_percent: u32v(100),
            failure_percentage_threshold: u32v(100),
            ..Default::default()
        };
        assert!(outlier_detection_config(&proto).is_ok());
    }

    #[test]
    fn negative_or_invalid_durations_are_rejected() {
        let bad = [
            dur(-1, 0),
            dur(0, -1),
            dur(0, 1_000_000_000),
            dur(315_576_000_001, 0),
        ];
        for d in bad {
            for field in ["interval", "base_ejection_time", "max_ejection_time"] {
                let mut proto = OutlierDetection::default();
                match field {
                    "interval" => proto.interval = d,
                    "base_ejection_time" => proto.base_ejection_time = d,
                    _ => proto.max_ejection_time = d,
                }
                let err = outlier_detection_config(&proto).expect_err(field);
                assert_eq!(err.field, field);
            }
        }
        let zero = OutlierDetection {
            interval: dur(0, 0),
            ..Default::default()
        };
        assert_eq!(
            outlier_detection_config(&zero).expect("valid").interval,
            Duration::ZERO
        );
    }
}
