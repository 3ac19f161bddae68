//! A50's call counter, after Envoy's: two buckets of (successes, failures). Finished calls go into the
//! active bucket; each sweep empties the inactive bucket and swaps the two, so the inactive bucket then holds
//! exactly the calls of the interval that just ended, which is what the algorithms judge.

/// Calls counted in one bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Calls that ended with status OK.
    pub successes: u64,
    /// Calls that ended with any other status.
    pub failures: u64,
}

impl CallCounts {
    /// Every call counted: the request volume.
    pub fn total(&self) -> u64 {
        self.successes.saturating_add(self.failures)
    }

    /// The share of successful calls in 0.0..=1.0, or `None` without calls (a rate of 0/0 is not one).
    pub fn success_rate(&self) -> Option<f64> {
        match self.total() {
            0 => None,
            total => Some(self.successes as f64 / total as f64),
        }
    }
}

/// One address's two buckets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CallBuckets {
    /// Calls finished since the last sweep.
    active: CallCounts,
    /// Calls finished in the interval before the last sweep.
    inactive: CallCounts,
}

impl CallBuckets {
    /// Counts one finished call.
    pub(crate) fn record(&mut self, success: bool) {
        let count = if success {
            &mut self.active.successes
        } else {
            &mut self.active.failures
        };
        *count = count.saturating_add(1);
    }

    /// Counts several finished calls at once.
    pub(crate) fn add(&mut self, counts: CallCounts) {
        self.active.successes = self.active.successes.saturating_add(counts.successes);
        self.active.failures = self.active.failures.saturating_add(counts.failures);
    }

    /// The sweep: the inactive bucket is zeroed and the two are swapped.
    pub(crate) fn swap(&mut self) {
        self.inactive = std::mem::take(&mut self.active);
    }

    /// Both buckets emptied (a timer that starts afresh).
    pub(crate) fn reset(&mut self) {
        *self = CallBuckets::default();
    }

    /// Calls since the last sweep.
    pub(crate) fn current(&self) -> CallCounts {
        self.active
    }

    /// Calls of the last full interval.
    pub(crate) fn last_interval(&self) -> CallCounts {
        self.inactive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_moves_the_active_bucket_to_the_inactive_one() {
        let mut c = CallBuckets::default();
        c.record(true);
        c.record(true);
        c.record(false);
        assert_eq!(
            c.current(),
            CallCounts {
                successes: 2,
                failures: 1
            }
        );
        assert_eq!(c.last_interval().total(), 0);
        c.swap();
        assert_eq!(c.current().total(), 0);
        assert_eq!(c.last_interval().total(), 3);
        c.record(false);
        c.swap();
        assert_eq!(
            c.last_interval(),
            CallCounts {
                successes: 0,
                failures: 1
            },
            "the older interval is gone"
        );
        c.reset();
        assert_eq!(c, CallBuckets::default());
    }

    #[test]
    fn success_rate_needs_calls() {
        assert_eq!(CallCounts::default().success_rate(), None);
        let counts = CallCounts {
            successes: 7,
            failures: 3,
        };
        assert_eq!(counts.success_rate(), Some(0.7));
    }
}
