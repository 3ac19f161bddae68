//! The timer table (after quinn-proto's `connection/timer.rs`): at most one deadline per kind; the channel
//! re-arms one timer at the earliest.

use std::time::Instant;

/// The timer table: at most one deadline per kind.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Timers {
    pub(super) deadline: Option<Instant>,
    pub(super) retry: Option<Instant>,
    pub(super) hedge: Option<Instant>,
    /// The earliest per-attempt receive deadline of the live attempts (none once committed).
    pub(super) attempt: Option<Instant>,
}

impl Timers {
    pub(super) fn next(&self) -> Option<Instant> {
        [self.deadline, self.retry, self.hedge, self.attempt]
            .into_iter()
            .flatten()
            .min()
    }
}
