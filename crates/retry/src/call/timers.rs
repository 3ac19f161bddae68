//! The timer table (after quinn-proto's `connection/timer.rs`): at most one deadline per kind; the channel
//! re-arms one timer at the earliest.

use std::time::Instant;

/// The timer table: at most one deadline per kind.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Timers {
    pub(super) deadline: Option<Instant>,
    pub(super) retry: Option<Instant>,
    pub(super) hedge: HedgeTimer,
    /// The earliest per-attempt receive deadline of the live attempts (none once committed).
    pub(super) attempt: Option<Instant>,
}

impl Timers {
    pub(super) fn next(&self) -> Option<Instant> {
        [self.deadline, self.retry, self.hedge.at(), self.attempt]
            .into_iter()
            .flatten()
            .min()
    }
}

/// When the next hedge goes out; or never again, once a "don't retry" pushback stopped hedging (A6: the
/// remaining hedges are not sent; the attempts in flight go on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum HedgeTimer {
    /// No hedge is scheduled (none left, past the deadline, committed, or not hedging).
    #[default]
    Unarmed,
    /// The next hedge goes out at this time.
    At(Instant),
    /// Hedging stopped for good: no hedge will be scheduled or sent again.
    Stopped,
}

impl HedgeTimer {
    /// When it fires, if it is armed.
    pub(super) fn at(self) -> Option<Instant> {
        match self {
            HedgeTimer::At(at) => Some(at),
            HedgeTimer::Unarmed | HedgeTimer::Stopped => None,
        }
    }

    /// Whether a "don't retry" pushback stopped hedging.
    pub(super) fn is_stopped(self) -> bool {
        self == HedgeTimer::Stopped
    }

    /// Cancels the scheduled hedge; a stopped timer stays stopped.
    pub(super) fn disarm(&mut self) {
        if let HedgeTimer::At(_) = self {
            *self = HedgeTimer::Unarmed;
        }
    }
}
