//! Why a sweep left an address with failures in service: what the channel logs so that "a backend
//! failing every call was never ejected" has an answer (issue 35). One [`NotEjected`] per address that
//! had at least one failure in the interval the sweep judged and is not ejected after it, with the reason
//! of each configured algorithm. Kept for the last sweep only (each sweep replaces the list), so they are
//! bounded by the address list.
//!
//! Not here: the algorithms (`algorithms.rs`) and the sweep that applies them (`outlier_detection.rs`).

use grpc_base::Address;

use super::counter::CallCounts;

/// An address with failures that a sweep did not eject, and why.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct NotEjected {
    /// The address.
    pub address: Address,
    /// Its calls in the interval the sweep judged.
    pub counts: CallCounts,
    /// Why the success-rate algorithm did not eject it (`None` if that algorithm is not configured).
    pub success_rate: Option<NotEjectedReason>,
    /// Why the failure-percentage algorithm did not eject it (`None` if it is not configured).
    pub failure_percentage: Option<NotEjectedReason>,
}

impl NotEjected {
    /// An address with `counts` that neither configured algorithm ejected.
    pub fn new(
        address: Address,
        counts: CallCounts,
        success_rate: Option<NotEjectedReason>,
        failure_percentage: Option<NotEjectedReason>,
    ) -> NotEjected {
        NotEjected {
            address,
            counts,
            success_rate,
            failure_percentage,
        }
    }
}

/// Why one algorithm did not eject an address that had failures.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum NotEjectedReason {
    /// The address carried fewer calls than `requestVolume` in the interval: `requestVolume` counts one
    /// address's calls in one `interval`, not the channel's.
    BelowRequestVolume {
        /// Its calls in the interval.
        calls: u64,
        /// The algorithm's `requestVolume`.
        request_volume: u32,
    },
    /// Fewer than `minimumHosts` addresses had `requestVolume` calls in the interval: the algorithm did
    /// not run.
    BelowMinimumHosts {
        /// The addresses with enough calls.
        hosts: usize,
        /// The algorithm's `minimumHosts`.
        minimum_hosts: u32,
    },
    /// It was an outlier, but `maxEjectionPercent` of the addresses were ejected already.
    MaxEjectionPercent {
        /// The addresses ejected when its turn came.
        ejected: usize,
        /// The addresses in the list.
        total: usize,
        /// The config's `maxEjectionPercent`.
        max_ejection_percent: u32,
    },
    /// It was an outlier, but the random draw against `enforcementPercentage` spared it.
    EnforcementDraw {
        /// The algorithm's `enforcementPercentage`.
        enforcement_percentage: u32,
    },
    /// Its success rate was not below the sweep's threshold (`None`: every candidate had the same rate,
    /// so there is no outlier).
    SuccessRateNotBelowThreshold {
        /// `mean − stdev × stdevFactor / 1000` of the candidates' success rates.
        threshold: Option<f64>,
    },
    /// Its failures were not more than `threshold` % of its calls.
    FailurePercentageNotAboveThreshold {
        /// The algorithm's `threshold`, in %.
        threshold: u32,
    },
}
