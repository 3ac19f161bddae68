//! The outlier detection configuration (gRFC A50 `OutlierDetectionLoadBalancingConfig`, without its
//! `child_policy`, which is the service config's business): typed so that no value can be invalid. A
//! percentage is a [`Percentage`] (0..=100), durations are `Duration`s, counts are `u32`s as in the proto.
//! An algorithm runs only when its field is `Some`; with neither, outlier detection counts nothing and
//! ejects nothing.
//!
//! JSON is not known here: `grpc-service-config` parses `outlier_detection_experimental` into these types,
//! applying the A50 defaults that [`Default`] and the `DEFAULT_*` constants give.

use std::time::Duration;

/// A whole percentage in 0..=100.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Percentage(u8);

impl Percentage {
    /// 0 %.
    pub const ZERO: Percentage = Percentage(0);
    /// 100 %.
    pub const HUNDRED: Percentage = Percentage(100);

    /// `value` %, if `value` is at most 100.
    pub const fn new(value: u32) -> Option<Percentage> {
        if value <= 100 {
            Some(Percentage(value as u8))
        } else {
            None
        }
    }

    /// The percentage as a number in 0..=100.
    pub const fn get(self) -> u32 {
        self.0 as u32
    }
}

/// A50 configuration of outlier detection: when the detector runs, how long it ejects, how many addresses
/// it may eject, and which of the two algorithms run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutlierDetectionConfig {
    /// `interval`: the time between two ejection sweeps (default 10 s).
    pub interval: Duration,
    /// `baseEjectionTime`: an ejection lasts this times the address's ejection multiplier (default 30 s).
    pub base_ejection_time: Duration,
    /// `maxEjectionTime`: the longest an ejection lasts, though never less than `base_ejection_time`
    /// (default 300 s or `base_ejection_time`, whichever is larger:
    /// [`OutlierDetectionConfig::default_max_ejection_time`]).
    pub max_ejection_time: Duration,
    /// `maxEjectionPercent`: the share of addresses the sweeps may eject (default 10 %); see
    /// `algorithms.rs` for how the limit is read (the first ejection is always allowed unless it is 0).
    pub max_ejection_percent: Percentage,
    /// `successRateEjection`: runs the success-rate algorithm when set.
    pub success_rate: Option<SuccessRateEjection>,
    /// `failurePercentageEjection`: runs the failure-percentage algorithm when set.
    pub failure_percentage: Option<FailurePercentageEjection>,
}

impl OutlierDetectionConfig {
    /// A50's default `interval`: 10 s.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
    /// A50's default `baseEjectionTime`: 30 s.
    pub const DEFAULT_BASE_EJECTION_TIME: Duration = Duration::from_secs(30);
    /// A50's default `maxEjectionTime` when `baseEjectionTime` is not larger: 300 s.
    pub const DEFAULT_MAX_EJECTION_TIME: Duration = Duration::from_secs(300);
    /// A50's default `maxEjectionPercent`: 10 %.
    pub const DEFAULT_MAX_EJECTION_PERCENT: Percentage = Percentage(10);

    /// The `maxEjectionTime` of a config that leaves it out: 300 s, or `base_ejection_time` if that is
    /// larger (A50).
    pub fn default_max_ejection_time(base_ejection_time: Duration) -> Duration {
        base_ejection_time.max(Self::DEFAULT_MAX_EJECTION_TIME)
    }

    /// Whether any algorithm is configured: only then are calls counted and the sweep timer run.
    pub fn is_enabled(&self) -> bool {
        self.success_rate.is_some() || self.failure_percentage.is_some()
    }

    /// How long an address ejected for the `multiplier`-th time in a row stays out: `min(base ×
    /// multiplier, max(base, max))` (A50). A product too large for a `Duration` saturates.
    pub fn ejection_duration(&self, multiplier: u32) -> Duration {
        let cap = self.base_ejection_time.max(self.max_ejection_time);
        self.base_ejection_time
            .checked_mul(multiplier)
            .unwrap_or(Duration::MAX)
            .min(cap)
    }
}

impl Default for OutlierDetectionConfig {
    /// The A50 defaults with neither algorithm: a config that ejects nothing.
    fn default() -> Self {
        OutlierDetectionConfig {
            interval: Self::DEFAULT_INTERVAL,
            base_ejection_time: Self::DEFAULT_BASE_EJECTION_TIME,
            max_ejection_time: Self::DEFAULT_MAX_EJECTION_TIME,
            max_ejection_percent: Self::DEFAULT_MAX_EJECTION_PERCENT,
            success_rate: None,
            failure_percentage: None,
        }
    }
}

/// The success-rate algorithm's parameters (A50 `SuccessRateEjection`): eject the addresses whose success
/// rate over the last interval is below `mean − stdev × stdev_factor / 1000` of the addresses with enough
/// calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SuccessRateEjection {
    /// `stdevFactor`, in thousandths (default 1900, i.e. 1.9 standard deviations).
    pub stdev_factor: u32,
    /// `enforcementPercentage`: the chance that an outlier is ejected (default 100 %).
    pub enforcement_percentage: Percentage,
    /// `minimumHosts`: the algorithm runs only when at least this many addresses have enough calls
    /// (default 5).
    pub minimum_hosts: u32,
    /// `requestVolume`: the calls an address needs in the interval to be considered (default 100).
    pub request_volume: u32,
}

impl Default for SuccessRateEjection {
    /// The A50 defaults: 1900, 100 %, 5 hosts, 100 calls.
    fn default() -> Self {
        SuccessRateEjection {
            stdev_factor: 1900,
            enforcement_percentage: Percentage::HUNDRED,
            minimum_hosts: 5,
            request_volume: 100,
        }
    }
}

/// The failure-percentage algorithm's parameters (A50 `FailurePercentageEjection`): eject the addresses
/// whose share of failed calls over the last interval is above `threshold`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailurePercentageEjection {
    /// `threshold`: an address failing strictly more than this share of its calls is an outlier
    /// (default 85 %).
    pub threshold: Percentage,
    /// `enforcementPercentage`: the chance that an outlier is ejected (default 100 %, as A50 and C-core
    /// have it; grpc-go's JSON default is 0, which would make `"failurePercentageEjection": {}` a no-op).
    pub enforcement_percentage: Percentage,
    /// `minimumHosts`: the algorithm runs only when at least this many addresses have enough calls
    /// (default 5).
    pub minimum_hosts: u32,
    /// `requestVolume`: the calls an address needs in the interval to be considered (default 50).
    pub request_volume: u32,
}

impl Default for FailurePercentageEjection {
    /// The A50 defaults: 85 %, 100 %, 5 hosts, 50 calls.
    fn default() -> Self {
        FailurePercentageEjection {
            threshold: Percentage(85),
            enforcement_percentage: Percentage::HUNDRED,
            minimum_hosts: 5,
            request_volume: 50,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_are_0_to_100() {
        assert_eq!(Percentage::new(0), Some(Percentage::ZERO));
        assert_eq!(Percentage::new(100), Some(Percentage::HUNDRED));
        assert_eq!(Percentage::new(42).map(Percentage::get), Some(42));
        assert_eq!(Percentage::new(101), None);
        assert_eq!(Percentage::new(u32::MAX), None);
    }

    #[test]
    fn ejection_duration_is_base_times_multiplier_capped() {
        let secs = Duration::from_secs;
        let config = OutlierDetectionConfig {
            base_ejection_time: secs(30),
            max_ejection_time: secs(100),
            ..OutlierDetectionConfig::default()
        };
        assert_eq!(config.ejection_duration(0), secs(0));
        assert_eq!(config.ejection_duration(1), secs(30));
        assert_eq!(config.ejection_duration(3), secs(90));
        assert_eq!(config.ejection_duration(4), secs(100));
        assert_eq!(config.ejection_duration(u32::MAX), secs(100));
        // A max below base: the cap is base (A50's max(base, max)).
        let short_max = OutlierDetectionConfig {
            max_ejection_time: secs(10),
            ..config.clone()
        };
        assert_eq!(short_max.ejection_duration(2), secs(30));
        // A product beyond Duration saturates rather than panicking.
        let huge = OutlierDetectionConfig {
            base_ejection_time: Duration::MAX,
            max_ejection_time: Duration::MAX,
            ..config
        };
        assert_eq!(huge.ejection_duration(2), Duration::MAX);
    }

    #[test]
    fn default_max_ejection_time_is_300s_or_base() {
        let secs = Duration::from_secs;
        assert_eq!(
            OutlierDetectionConfig::default_max_ejection_time(secs(30)),
            secs(300)
        );
        assert_eq!(
            OutlierDetectionConfig::default_max_ejection_time(secs(400)),
            secs(400)
        );
    }
}
