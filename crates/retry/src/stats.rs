//! Retry statistics: per call ([`CallStats`]) and per method ([`MethodStats`]), with A6's per-method metrics
//! (retry attempts made, retry attempts which failed, the retry-count buckets) and the gRFC A96 instruments
//! (`grpc.client.call.retries`, `…transparent_retries`, `…hedges`, `…retry_delay`), recorded once when a call
//! ends. A96's count instruments record nothing for a zero count.
//!
//! A6 "Retry and Hedging Statistics" treats hedging like retrying: the first hedged request is the initial
//! RPC and later hedges are retry attempts, so A6's metrics count retries and hedges together.

use std::time::Duration;

/// What happened in one call. Counted by the state machine; more fields may come.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallStats {
    /// Attempts started, transparent ones included.
    pub attempts: u32,
    /// Retries under a retry policy (the original and transparent retries excluded).
    pub retries: u32,
    /// Hedges sent after the original (transparent retries excluded).
    pub hedges: u32,
    /// Transparent retries.
    pub transparent_retries: u32,
    /// Retry and hedge attempts (those sent with `grpc-previous-rpc-attempts` > 0) that ended, as reported by
    /// the channel, with a status other than OK (A6 "retry attempts which failed"). Attempts the state
    /// machine cancelled (hedges that lost, attempts cut by commit, the deadline or a cancel) are not
    /// counted, except those cut by the per-attempt receive timeout (they failed, as CANCELLED); a retry
    /// replaced by a transparent retry counts once, through its replacement.
    pub failed_retries: u32,
    /// Attempts cut by the policy's per-attempt receive timeout (`perAttemptRecvTimeout`).
    pub per_attempt_recv_timeouts: u32,
    /// Time with no attempt in flight (A45/A96 `retry_delay`).
    pub retry_delay: Duration,
    /// Whether the call committed because its outgoing messages overflowed the retry buffer.
    pub committed_by_buffer_overflow: bool,
}

/// One histogram instrument: a name, a unit and explicit bucket boundaries.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Instrument {
    /// The instrument name.
    pub name: &'static str,
    /// The unit.
    pub unit: &'static str,
    /// Upper bounds of the buckets (a last, unbounded bucket follows).
    pub boundaries: &'static [f64],
}

/// A66's latency buckets (seconds), used by `retry_delay`.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002, 0.003, 0.004, 0.005,
    0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.13, 0.16,
    0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0,
];

/// `grpc.client.call.retries` (A96).
pub const RETRIES: Instrument = Instrument {
    name: "grpc.client.call.retries",
    unit: "{retry}",
    boundaries: &[1.0, 2.0, 3.0, 4.0, 5.0],
};
/// `grpc.client.call.transparent_retries` (A96).
pub const TRANSPARENT_RETRIES: Instrument = Instrument {
    name: "grpc.client.call.transparent_retries",
    unit: "{transparent_retry}",
    boundaries: &[1.0, 2.0, 3.0, 4.0, 5.0, 10.0],
};
/// `grpc.client.call.hedges` (A96).
pub const HEDGES: Instrument = Instrument {
    name: "grpc.client.call.hedges",
    unit: "{hedge}",
    boundaries: &[1.0, 2.0, 3.0, 4.0, 5.0],
};
/// `grpc.client.call.retry_delay` (A96).
pub const RETRY_DELAY: Instrument = Instrument {
    name: "grpc.client.call.retry_delay",
    unit: "s",
    boundaries: LATENCY_BUCKETS,
};

/// A histogram over an instrument's buckets.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    instrument: Instrument,
    counts: Vec<u64>,
}

impl Histogram {
    /// An empty histogram.
    pub fn new(instrument: Instrument) -> Histogram {
        Histogram {
            instrument,
            counts: vec![0; instrument.boundaries.len() + 1],
        }
    }

    /// Records one value: it lands in the first bucket whose upper bound is ≥ it.
    pub fn record(&mut self, value: f64) {
        let i = self
            .instrument
            .boundaries
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(self.instrument.boundaries.len());
        self.counts[i] += 1;
    }

    /// The instrument.
    pub fn instrument(&self) -> Instrument {
        self.instrument
    }

    /// Counts per bucket (the last is the overflow bucket).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Values recorded.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// A6's retry-count buckets, `>=1`, `>=2`, `>=3`, `>=4`, `>=5`, `>=10`, `>=100`, `>=1000`: the k-th retry
/// attempt of a call (k = 1, 2, …; hedges included) adds one to the bucket of the largest threshold ≤ k, so
/// each retry attempt is counted in exactly one bucket.
pub const RETRY_COUNT_THRESHOLDS: [u32; 8] = [1, 2, 3, 4, 5, 10, 100, 1000];

/// Statistics of one method over many calls (start from `MethodStats::default()`); more fields may come.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct MethodStats {
    /// Calls recorded.
    pub calls: u64,
    /// Attempts, transparent ones included.
    pub attempts: u64,
    /// Retries.
    pub retries: u64,
    /// Hedges.
    pub hedges: u64,
    /// Transparent retries.
    pub transparent_retries: u64,
    /// A6 "total number of retry attempts which failed": the sum of [`CallStats::failed_retries`].
    pub failed_retries: u64,
    /// Total time without an attempt in flight.
    pub retry_delay: Duration,
    /// Calls committed because their messages overflowed the retry buffer.
    pub committed_by_buffer_overflow: u64,
    /// A6's histogram of retry attempts: for each of [`RETRY_COUNT_THRESHOLDS`], the retry and hedge
    /// attempts that were the k-th of their call for a k from that threshold up to (not including) the next.
    /// A call with 7 retries adds 1 to `>=1`, `>=2`, `>=3` and `>=4`, and 3 to `>=5`; the buckets sum to
    /// [`MethodStats::retries`] + [`MethodStats::hedges`].
    pub retry_count_buckets: [u64; 8],
    /// `grpc.client.call.retries`.
    pub retries_histogram: Histogram,
    /// `grpc.client.call.transparent_retries`.
    pub transparent_retries_histogram: Histogram,
    /// `grpc.client.call.hedges`.
    pub hedges_histogram: Histogram,
    /// `grpc.client.call.retry_delay`.
    pub retry_delay_histogram: Histogram,
}

impl Default for MethodStats {
    fn default() -> Self {
        MethodStats {
            calls: 0,
            attempts: 0,
            retries: 0,
            hedges: 0,
            transparent_retries: 0,
            failed_retries: 0,
            retry_delay: Duration::ZERO,
            committed_by_buffer_overflow: 0,
            retry_count_buckets: [0; 8],
            retries_histogram: Histogram::new(RETRIES),
            transparent_retries_histogram: Histogram::new(TRANSPARENT_RETRIES),
            hedges_histogram: Histogram::new(HEDGES),
            retry_delay_histogram: Histogram::new(RETRY_DELAY),
        }
    }
}

impl MethodStats {
    /// Adds one finished call.
    pub fn record(&mut self, call: &CallStats) {
        self.calls += 1;
        self.attempts += u64::from(call.attempts);
        self.retries += u64::from(call.retries);
        self.hedges += u64::from(call.hedges);
        self.transparent_retries += u64::from(call.transparent_retries);
        self.failed_retries += u64::from(call.failed_retries);
        self.retry_delay += call.retry_delay;
        self.committed_by_buffer_overflow += u64::from(call.committed_by_buffer_overflow);
        // Retry attempts k = 1..=n fall in bucket i when threshold[i] <= k < threshold[i + 1].
        let n = u64::from(call.retries) + u64::from(call.hedges);
        for (i, low) in RETRY_COUNT_THRESHOLDS
            .iter()
            .map(|t| u64::from(*t))
            .enumerate()
        {
            let high = RETRY_COUNT_THRESHOLDS
                .get(i + 1)
                .map_or(n, |next| n.min(u64::from(*next) - 1));
            if high >= low {
                self.retry_count_buckets[i] += high - low + 1;
            }
        }
        // A96: the count instruments report nothing when the count is zero.
        if call.retries > 0 {
            self.retries_histogram.record(f64::from(call.retries));
        }
        if call.transparent_retries > 0 {
            self.transparent_retries_histogram
                .record(f64::from(call.transparent_retries));
        }
        if call.hedges > 0 {
            self.hedges_histogram.record(f64::from(call.hedges));
        }
        self.retry_delay_histogram
            .record(call.retry_delay.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a96_instruments_skip_zero_counts_and_bucket_values() {
        let mut m = MethodStats::default();
        m.record(&CallStats {
            attempts: 1,
            ..Default::default()
        });
        m.record(&CallStats {
            attempts: 4,
            retries: 2,
            transparent_retries: 1,
            retry_delay: Duration::from_millis(150),
            ..Default::default()
        });
        m.record(&CallStats {
            attempts: 8,
            hedges: 7,
            failed_retries: 3,
            ..Default::default()
        });
        assert_eq!(m.calls, 3);
        assert_eq!(m.retries_histogram.total(), 1);
        assert_eq!(
            m.retries_histogram.counts()[1],
            1,
            "2 retries land in the ≤2 bucket"
        );
        assert_eq!(m.transparent_retries_histogram.total(), 1);
        assert_eq!(
            m.hedges_histogram.counts()[5],
            1,
            "7 hedges overflow the ≤5 bucket"
        );
        assert_eq!(
            m.retry_delay_histogram.total(),
            3,
            "retry_delay is recorded for every call"
        );
        // Each retry or hedge in exactly one bucket: 2 retries → >=1, >=2; 7 hedges → >=1..>=4, and 3 in >=5.
        assert_eq!(m.retry_count_buckets, [2, 2, 1, 1, 3, 0, 0, 0]);
        assert_eq!(
            m.retry_count_buckets.iter().sum::<u64>(),
            m.retries + m.hedges
        );
        assert_eq!(m.failed_retries, 3);
        assert_eq!(RETRIES.name, "grpc.client.call.retries");
        assert_eq!(
            TRANSPARENT_RETRIES.name,
            "grpc.client.call.transparent_retries"
        );
        assert_eq!(HEDGES.name, "grpc.client.call.hedges");
        assert_eq!(RETRY_DELAY.name, "grpc.client.call.retry_delay");
    }

    #[test]
    fn retry_count_buckets_count_each_retry_attempt_once() {
        let mut m = MethodStats::default();
        m.record(&CallStats {
            retries: 1000,
            ..Default::default()
        });
        // 1, 2, 3, 4, then 5..=9, 10..=99, 100..=999, and the 1000th.
        assert_eq!(m.retry_count_buckets, [1, 1, 1, 1, 5, 90, 900, 1]);
        m.record(&CallStats {
            retries: 2,
            hedges: 1,
            ..Default::default()
        });
        assert_eq!(m.retry_count_buckets, [2, 2, 2, 1, 5, 90, 900, 1]);
        assert_eq!(m.retry_count_buckets.iter().sum::<u64>(), 1003);
    }
}
