//! The two A50 ejection algorithms and the rules every ejection passes: which addresses are outliers
//! (success rate, failure percentage), whether the `maxEjectionPercent` limit allows one more ejection,
//! and the `enforcementPercentage` draw. Pure functions over one sweep's samples; the sweep itself, which
//! applies them in A50's order and ejects, is in `outlier_detection.rs`.
//!
//! Where the gRFC's text and the implementations differ, the choice and its reason are written at the
//! function that makes it:
//!
//! * who is a candidate and how `minimumHosts` counts: [`success_rate_outliers`],
//!   [`failure_percentage_outliers`];
//! * "greater than" the failure threshold: [`failure_percentage_outliers`];
//! * the `maxEjectionPercent` check: [`may_eject`];
//! * the random draw: [`enforced`].

use grpc_base::Rng;

use super::config::{FailurePercentageEjection, Percentage, SuccessRateEjection};
use super::counter::CallCounts;
use super::spared::NotEjectedReason;

/// One address as a sweep sees it, in the order of the address list.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sample {
    /// Its calls in the interval that just ended.
    pub(super) counts: CallCounts,
    /// Whether it is ejected now (before this sweep, or by an earlier algorithm of it).
    pub(super) ejected: bool,
}

/// Why an address was ejected: the algorithm, and what it saw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EjectionCause {
    /// Its success rate was below the sweep's threshold.
    SuccessRate {
        /// The address's calls in the interval.
        counts: CallCounts,
        /// `mean − stdev × stdevFactor / 1000` of the candidates' success rates (0.0..=1.0).
        threshold: f64,
    },
    /// It failed more than `threshold` % of its calls.
    FailurePercentage {
        /// The address's calls in the interval.
        counts: CallCounts,
    },
}

/// An address an algorithm found, by its index in the samples.
#[derive(Clone, Copy, Debug)]
pub(super) struct Outlier {
    pub(super) index: usize,
    pub(super) cause: EjectionCause,
}

/// The candidates of an algorithm: addresses with at least `request_volume` calls in the interval, and at
/// least one (an address without calls has no rate, even with `requestVolume: 0`: C-core skips it too).
/// `None` when there are fewer than `minimum_hosts` of them, or none at all: the algorithm does not run.
///
/// `minimumHosts` counts candidates for both algorithms, as C-core and grpc-go do. A50's
/// failure-percentage text says "the number of addresses"; counting addresses that carried no traffic
/// would let a few busy addresses be judged among idle ones, which the success-rate rule already refuses.
fn candidates(
    samples: &[Sample],
    request_volume: u32,
    minimum_hosts: u32,
) -> Option<Vec<(usize, CallCounts, f64)>> {
    let list: Vec<(usize, CallCounts, f64)> = samples
        .iter()
        .enumerate()
        .filter(|(_, s)| s.counts.total() >= u64::from(request_volume))
        .filter_map(|(i, s)| s.counts.success_rate().map(|rate| (i, s.counts, rate)))
        .collect();
    if list.is_empty() || (list.len() as u64) < u64::from(minimum_hosts) {
        return None;
    }
    Some(list)
}

/// The success-rate outliers, in address order: candidates whose success rate is strictly below `mean −
/// stdev × stdev_factor / 1000` (population standard deviation over the candidates, ejected ones included
/// in the statistics). Addresses already ejected are not outliers again: re-ejecting would restart their
/// ejection and raise their multiplier on the strength of the few calls that finished after they were
/// ejected (C-core re-ejects them; its failure-percentage loop skips them, as both loops do here).
pub(super) fn success_rate_outliers(
    config: &SuccessRateEjection,
    samples: &[Sample],
) -> Vec<Outlier> {
    let Some(list) = candidates(samples, config.request_volume, config.minimum_hosts) else {
        return Vec::new();
    };
    let Some(threshold) = threshold_of(config, &list) else {
        return Vec::new();
    };
    list.into_iter()
        .filter(|&(i, _, rate)| !samples[i].ejected && rate < threshold)
        .map(|(index, counts, _)| Outlier {
            index,
            cause: EjectionCause::SuccessRate { counts, threshold },
        })
        .collect()
}

/// The success-rate threshold of a sweep over `samples`: `None` when the algorithm does not run (too few
/// candidates) or every candidate has the same rate (no outlier).
pub(super) fn success_rate_threshold(
    config: &SuccessRateEjection,
    samples: &[Sample],
) -> Option<f64> {
    let list = candidates(samples, config.request_volume, config.minimum_hosts)?;
    threshold_of(config, &list)
}

/// `mean − stdev × stdevFactor / 1000` over the candidates' rates, or `None` if they are all equal.
fn threshold_of(config: &SuccessRateEjection, list: &[(usize, CallCounts, f64)]) -> Option<f64> {
    // Equal rates have no outlier. Said outright because in floating point their mean can round above
    // them (three rates of 0.1 average 0.10000000000000002), and with a `stdevFactor` below 1000 that
    // would eject every address.
    let first = list.first()?.2;
    if list.iter().all(|&(_, _, rate)| rate == first) {
        return None;
    }
    let n = list.len() as f64;
    let mean = list.iter().map(|(_, _, rate)| rate).sum::<f64>() / n;
    let variance = list
        .iter()
        .map(|(_, _, rate)| (rate - mean) * (rate - mean))
        .sum::<f64>()
        / n;
    Some(mean - variance.sqrt() * (f64::from(config.stdev_factor) / 1000.0))
}

/// The addresses with at least `request_volume` calls (and one) in the interval: what `minimumHosts`
/// counts. Computed once per algorithm and sweep.
pub(super) fn hosts_with_volume(samples: &[Sample], request_volume: u32) -> usize {
    samples
        .iter()
        .filter(|s| s.counts.total() >= u64::from(request_volume) && s.counts.total() > 0)
        .count()
}

/// Why an algorithm with `request_volume` and `minimum_hosts` did not find an address with `calls` in
/// the interval an outlier, `hosts` addresses having had enough calls ([`hosts_with_volume`]): too few
/// calls of its own, too few addresses with enough calls, or else `otherwise` (its rate was not an
/// outlier's). O(1), so a sweep's reasons cost O(n) in all.
pub(super) fn not_outlier_reason(
    calls: u64,
    hosts: usize,
    request_volume: u32,
    minimum_hosts: u32,
    otherwise: NotEjectedReason,
) -> NotEjectedReason {
    if calls < u64::from(request_volume) {
        return NotEjectedReason::BelowRequestVolume {
            calls,
            request_volume,
        };
    }
    if (hosts as u64) < u64::from(minimum_hosts) {
        return NotEjectedReason::BelowMinimumHosts {
            hosts,
            minimum_hosts,
        };
    }
    otherwise
}

/// The failure-percentage outliers, in address order: candidates not already ejected whose failures are
/// strictly more than `threshold` % of their calls, compared in integers (`failures × 100 > threshold ×
/// total`), so 85 % exactly is not above 85.
///
/// Strictly greater: A50's algorithm, C-core and grpc-go say "greater than"; the proto comment copied from
/// Envoy says "greater than or equal to". With "≥", `threshold: 0` would eject addresses with no failures.
pub(super) fn failure_percentage_outliers(
    config: &FailurePercentageEjection,
    samples: &[Sample],
) -> Vec<Outlier> {
    let Some(list) = candidates(samples, config.request_volume, config.minimum_hosts) else {
        return Vec::new();
    };
    let threshold = u128::from(config.threshold.get());
    list.into_iter()
        .filter(|&(i, counts, _)| {
            !samples[i].ejected
                && u128::from(counts.failures) * 100 > threshold * u128::from(counts.total())
        })
        .map(|(index, counts, _)| Outlier {
            index,
            cause: EjectionCause::FailurePercentage { counts },
        })
        .collect()
}

/// Whether `maxEjectionPercent` allows another ejection when `ejected` of `total` addresses are ejected:
/// only while the ejected share is below the limit (`ejected / total < max`, exactly, in integers).
///
/// The stacks disagree here. A50's text stops when the share is "greater than" the limit, which lets
/// ejections continue at the limit itself (4 addresses, 50 %: a third ejection at 50 %). grpc-go and
/// grpc-java stop at "greater than or equal"; C-core does too but always allows an ejection when none is
/// in force, so that its `maxEjectionPercent: 0` still ejects one address. This follows grpc-go and
/// grpc-java, which agree with C-core for every limit above 0:
///
/// * the check comes before each ejection, so the first ejection always passes (0 % is below any limit
///   above 0: with 3 addresses and the default 10 %, one address can be ejected, as the proto comment's
///   "will eject at least one address regardless of the value" wants), and the last one allowed may take
///   the share past the limit (3 addresses at 50 %: the second ejection starts at 33 % and ends at 67 %);
/// * `maxEjectionPercent: 0` ejects nothing: a limit of zero is read as written, not as "one".
pub(super) fn may_eject(ejected: usize, total: usize, max: Percentage) -> bool {
    (ejected as u128) * 100 < u128::from(max.get()) * (total as u128)
}

/// The `enforcementPercentage` draw: an integer in [0, 100) from the injected generator, and the outlier is
/// ejected when it is below `percentage`; so 100 always ejects and 0 never does. A50 and grpc-go draw from
/// [0, 100); C-core draws from [1, 100), which makes `enforcementPercentage: 1` never eject. The draw is
/// `next_u64() % 100` (a bias of 16 in 2⁶⁴, nothing measurable); one draw is taken per outlier that passed
/// [`may_eject`], whatever the percentage.
pub(super) fn enforced(percentage: Percentage, rng: &mut dyn Rng) -> bool {
    rng.next_u64() % 100 < u64::from(percentage.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(successes: u64, failures: u64) -> Sample {
        Sample {
            counts: CallCounts {
                successes,
                failures,
            },
            ejected: false,
        }
    }

    fn indices(outliers: &[Outlier]) -> Vec<usize> {
        outliers.iter().map(|o| o.index).collect()
    }

    #[test]
    fn max_ejection_check_allows_the_first_and_stops_at_the_limit() {
        let pct = |v| Percentage::new(v).expect("valid");
        assert!(may_eject(0, 3, pct(10)), "the first ejection passes 10 %");
        assert!(!may_eject(1, 3, pct(10)));
        assert!(may_eject(1, 3, pct(50)), "33 % < 50 %");
        assert!(!may_eject(2, 3, pct(50)));
        assert!(may_eject(1, 4, pct(50)));
        assert!(!may_eject(2, 4, pct(50)), "50 % is the limit: stop");
        assert!(!may_eject(0, 3, Percentage::ZERO), "0 % ejects nothing");
        assert!(may_eject(2, 3, Percentage::HUNDRED));
        assert!(!may_eject(3, 3, Percentage::HUNDRED));
        assert!(!may_eject(0, 0, Percentage::HUNDRED));
    }

    #[test]
    fn failure_threshold_is_strictly_greater() {
        let config = FailurePercentageEjection {
            minimum_hosts: 1,
            request_volume: 1,
            ..FailurePercentageEjection::default()
        };
        // 17/20 = 85 % is not above 85; 18/20 = 90 % is.
        let samples = [sample(3, 17), sample(2, 18), sample(20, 0)];
        assert_eq!(
            indices(&failure_percentage_outliers(&config, &samples)),
            [1]
        );
        let zero = FailurePercentageEjection {
            threshold: Percentage::ZERO,
            ..config
        };
        assert_eq!(
            indices(&failure_percentage_outliers(&zero, &samples)),
            [0, 1],
            "threshold 0 ejects any failure, but not a perfect address"
        );
    }

    #[test]
    fn candidates_need_volume_calls_and_enough_hosts() {
        let config = FailurePercentageEjection {
            minimum_hosts: 2,
            request_volume: 0,
            ..FailurePercentageEjection::default()
        };
        // requestVolume 0: an address without calls is still no candidate, so one host is too few.
        let samples = [sample(0, 10), sample(0, 0)];
        assert!(failure_percentage_outliers(&config, &samples).is_empty());
        let samples = [sample(0, 10), sample(1, 0)];
        assert_eq!(
            indices(&failure_percentage_outliers(&config, &samples)),
            [0]
        );
    }

    #[test]
    fn success_rate_threshold_is_mean_minus_factor_stdevs() {
        let config = SuccessRateEjection {
            minimum_hosts: 5,
            request_volume: 100,
            ..SuccessRateEjection::default()
        };
        // Rates 1, 1, 1, 1, 0.7: mean 0.94, stdev 0.12, threshold 0.94 − 1.9 × 0.12 = 0.712.
        let samples = [
            sample(100, 0),
            sample(100, 0),
            sample(70, 30),
            sample(100, 0),
            sample(100, 0),
        ];
        let outliers = success_rate_outliers(&config, &samples);
        assert_eq!(indices(&outliers), [2]);
        let EjectionCause::SuccessRate { threshold, .. } = outliers[0].cause else {
            panic!("{:?}", outliers[0].cause);
        };
        assert!((threshold - 0.712).abs() < 1e-9, "{threshold}");
        // Equal rates have no outlier, whatever the factor (0.1 three times averages above 0.1).
        let flat = [sample(10, 90); 3];
        let none = SuccessRateEjection {
            stdev_factor: 0,
            minimum_hosts: 3,
            ..config
        };
        assert!(success_rate_outliers(&none, &flat).is_empty());
        // An ejected address counts in the statistics but is not ejected again.
        let mut again = samples;
        again[2].ejected = true;
        assert!(success_rate_outliers(&config, &again).is_empty());
    }

    struct Draws(Vec<u64>);

    impl Rng for Draws {
        fn next_u64(&mut self) -> u64 {
            self.0.remove(0)
        }
    }

    #[test]
    fn enforcement_draws_an_integer_below_100() {
        let pct = |v| Percentage::new(v).expect("valid");
        let mut rng = Draws(vec![49, 50, 0, 99, 199]);
        assert!(enforced(pct(50), &mut rng));
        assert!(!enforced(pct(50), &mut rng));
        assert!(!enforced(Percentage::ZERO, &mut rng), "0 never ejects");
        assert!(enforced(Percentage::HUNDRED, &mut rng), "100 always does");
        assert!(enforced(Percentage::HUNDRED, &mut rng), "199 % 100 = 99");
    }
}
