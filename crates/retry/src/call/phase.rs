//! The call's life cycle as a type: [`Phase`], one variant per state of the crate docs' diagram, each
//! holding what exists in that state, so that a combination the machine never reaches (committed and
//! finished but with attempts in flight, a pending commit while attempts run, ...) cannot be written down.
//!
//! ```text
//!  phase          holds                       leaves for
//!  ─────────────  ──────────────────────────  ──────────────────────────────────────────────────────────
//!  ATTEMPTING     live ≥ 1 attempts           COMMITTED(k): k's response headers, or a buffer overflow
//!                                               (k = the live attempt that sent the most)
//!                                             BACKING OFF: the last live attempt ended or was cut
//!                                             FINISHED: an outcome (OK, fatal, no retry left, deadline, ...)
//!  BACKING OFF    since, next                 ATTEMPTING: a retry / hedge timer, or a transparent retry
//!  (none live)                                COMMITTED(k): the same, when next = Committed (an overflow
//!                                               while backing off)
//!                                             FINISHED: deadline, cancel, nothing left to wait for
//!  COMMITTED(k)   k, the one attempt in       FINISHED: k ended, deadline, cancel
//!                 flight
//!  FINISHED       the committed attempt, if   (nothing)
//!                 any
//! ```
//!
//! What stays outside the phase is orthogonal to it: which attempts are in flight (`Attempt::state`,
//! per attempt), whether the application half-closed, the replay buffer, the policy's counters and timers
//! (the hedge timer records that a "don't retry" pushback stopped hedging), and the one transparent retry
//! of an unprocessed failure the call may still spend (`UnprocessedRetry`).

use std::num::NonZeroUsize;
use std::time::Instant;

use super::AttemptId;

/// Where the call is in its life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// ATTEMPTING: `live` attempts in flight, none committed.
    Attempting {
        /// Attempts in flight.
        live: NonZeroUsize,
    },
    /// BACKING OFF: no attempt in flight and none committed, since `since`; the retry timer or the hedge
    /// timer starts the next attempt (or the call finishes). Inside [`super::RetryCall::new`] the call is
    /// here, for no time at all, before its first attempt.
    BackingOff {
        /// When the last attempt in flight ended (the start of A96's `retry_delay`).
        since: Instant,
        /// What the next attempt will be.
        next: NextAttempt,
    },
    /// COMMITTED: the call's response is `attempt`'s, the one attempt in flight; when it ends, the call
    /// finishes.
    Committed(AttemptId),
    /// FINISHED: the call emitted `Finish`; nothing is in flight and nothing more happens.
    Finished {
        /// The attempt the call had committed to, if it got that far.
        committed: Option<AttemptId>,
    },
}

/// What the next attempt of a call that is backing off will be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NextAttempt {
    /// An attempt like the others: it may be retried or hedged.
    Uncommitted,
    /// The replay buffer overflowed while no attempt was in flight: the next attempt is committed as it
    /// starts, and carries the messages the buffer could not hold.
    Committed,
}

impl Phase {
    /// A call about to start its first attempt.
    pub(super) fn new(now: Instant) -> Phase {
        Phase::BackingOff {
            since: now,
            next: NextAttempt::Uncommitted,
        }
    }

    /// Attempts in flight.
    pub(super) fn live(self) -> usize {
        match self {
            Phase::Attempting { live } => live.get(),
            Phase::Committed(_) => 1,
            Phase::BackingOff { .. } | Phase::Finished { .. } => 0,
        }
    }

    /// The attempt the call committed to, if any (also once finished).
    pub(super) fn committed(self) -> Option<AttemptId> {
        match self {
            Phase::Committed(attempt) => Some(attempt),
            Phase::Finished { committed } => committed,
            Phase::Attempting { .. } | Phase::BackingOff { .. } => None,
        }
    }

    /// Whether the call is committed to `attempt` and not finished.
    pub(super) fn is_committed_to(self, attempt: AttemptId) -> bool {
        self == Phase::Committed(attempt)
    }

    /// Neither committed nor finished: attempts may still be started, retried and hedged.
    pub(super) fn is_open(self) -> bool {
        matches!(self, Phase::Attempting { .. } | Phase::BackingOff { .. })
    }

    /// Whether the call has finished.
    pub(super) fn is_finished(self) -> bool {
        matches!(self, Phase::Finished { .. })
    }
}
