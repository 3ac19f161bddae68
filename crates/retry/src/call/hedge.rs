//! A hedging policy's turn (A6 `hedgingPolicy`): the hedge timer, which failures end the call, and when the
//! last hedge is out.

use std::time::{Duration, Instant};

use grpc_code::Code;

use super::timers::HedgeTimer;
use super::{AttemptEnd, AttemptId, Mode, Outcome, Phase, RetryCall};
use crate::policy::HedgingPolicy;
use crate::pushback::Pushback;

impl RetryCall {
    pub(super) fn can_hedge(&self) -> bool {
        match &self.mode {
            Mode::Hedging(p) => {
                // A pending commit (overflow while no attempt was live) does not stop the next hedge: that
                // hedge is the one committed when it starts.
                !self.timers.hedge.is_stopped()
                    && self.phase.is_open()
                    && self.policy_attempts < p.max_attempts().get()
                    && self.throttle_allows()
            }
            _ => false,
        }
    }

    pub(super) fn more_hedges_remain(&self) -> bool {
        match &self.mode {
            Mode::Hedging(p) => {
                !self.timers.hedge.is_stopped()
                    && self.phase.is_open()
                    && self.policy_attempts < p.max_attempts().get()
            }
            _ => false,
        }
    }

    pub(super) fn arm_hedge(&mut self, at: Instant) {
        if self.more_hedges_remain() && self.timers.deadline.is_none_or(|d| at < d) {
            self.timers.hedge = HedgeTimer::At(at);
        } else {
            self.timers.hedge.disarm();
        }
    }

    pub(super) fn hedge_delay(&self) -> Duration {
        match &self.mode {
            Mode::Hedging(p) => p.hedging_delay(),
            _ => Duration::ZERO,
        }
    }

    pub(super) fn hedge_tick(&mut self, now: Instant) {
        if self.can_hedge() {
            self.start_policy_attempt(now);
        }
        // A throttled hedge is skipped, not postponed: the schedule goes on, and tokens may come back.
        self.arm_hedge(now + self.hedge_delay());
        self.finish_if_hedging_exhausted(now);
    }

    pub(super) fn after_hedge(
        &mut self,
        attempt: AttemptId,
        end: AttemptEnd,
        policy: &HedgingPolicy,
        now: Instant,
    ) {
        // A hedge cut by the receive timeout is a non-fatal failure: it ends that hedge only.
        let timed_out = self.attempts[attempt.0 as usize].timed_out();
        if end.code == Code::Ok || !(timed_out || policy.non_fatal().contains(end.code)) {
            // OK or a fatal code wins: every other attempt is cancelled. (`account` charged a fatal code
            // that came with a "don't retry" pushback.)
            return self.finish(Outcome::Attempt(attempt), now);
        }
        match end.pushback {
            Pushback::DontRetry => self.timers.hedge = HedgeTimer::Stopped,
            Pushback::RetryAfter(d) => {
                // The next hedge after the pushback; later ones resume at hedgingDelay from it.
                self.arm_hedge(now + d);
            }
            Pushback::None => {
                if self.can_hedge() {
                    self.start_policy_attempt(now);
                    self.arm_hedge(now + policy.hedging_delay());
                }
            }
        }
        self.finish_if_hedging_exhausted(now);
    }

    /// With no attempt in flight and no hedge that can still be sent, the last status is the call's.
    pub(super) fn finish_if_hedging_exhausted(&mut self, now: Instant) {
        let Phase::BackingOff { .. } = self.phase else {
            // Attempts in flight, or the call is over.
            return;
        };
        let waiting = self.timers.hedge.at().is_some() && self.throttle_allows();
        if !waiting {
            if let Some(last) = self.last_ended {
                self.finish(self.outcome_of(last), now);
            }
        }
    }
}
