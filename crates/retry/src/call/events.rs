//! Events from attempts: the pick's address, messages written, response headers (A6 commit point 1), an
//! attempt's end (transparent retry, or the policy's turn), and timers.

use std::time::Instant;

use grpc_base::{Address, FailurePlace};

use super::timers::HedgeTimer;
use super::{AttemptEnd, AttemptId, LocalReason, Mode, Outcome, RetryCall, UnprocessedRetry};
use crate::app_policy::AttemptDetails;

impl RetryCall {
    /// The attempt's pick chose `address`: later attempts are asked to avoid it.
    pub fn handle_picked(&mut self, attempt: AttemptId, address: Address) {
        if !self.is_live(attempt)
            || self.first_used.as_ref() == Some(&address)
            || self.more_used.contains(&address)
        {
            return;
        }
        match self.first_used {
            None => self.first_used = Some(address),
            Some(_) => self.more_used.push(address),
        }
    }

    /// The channel wrote message `index` on `attempt`.
    pub fn handle_message_sent(&mut self, attempt: AttemptId, index: usize) {
        let Some(a) = self.attempts.get_mut(attempt.0 as usize) else {
            return;
        };
        if !a.is_live() {
            return;
        }
        a.sent = a.sent.max(index + 1).min(a.queued);
        if self.phase.is_committed_to(attempt) {
            self.release_sent();
        }
    }

    /// The attempt received response headers: the call commits to it (A6 commit point 1).
    pub fn handle_headers(&mut self, attempt: AttemptId, now: Instant) {
        if !self.is_live(attempt) || !self.phase.is_open() {
            return;
        }
        self.commit(attempt, now);
    }

    /// The attempt ended.
    pub fn handle_end(&mut self, attempt: AttemptId, end: AttemptEnd, now: Instant) {
        self.handle_end_with(attempt, end, &AttemptDetails::NONE, now);
    }

    /// The attempt ended, with its status message and trailers for an application policy to read.
    pub fn handle_end_with(
        &mut self,
        attempt: AttemptId,
        end: AttemptEnd,
        details: &AttemptDetails<'_>,
        now: Instant,
    ) {
        if !self.is_live(attempt) {
            return;
        }
        self.attempt_over(attempt, now);
        self.rearm_attempt_timer();
        self.last_ended = Some(attempt);
        let processed = end.place == FailurePlace::Processed;
        let transparent = !self.phase.is_committed_to(attempt)
            && match end.place {
                FailurePlace::NotSent => true,
                FailurePlace::Unprocessed => self.unprocessed_retry == UnprocessedRetry::Available,
                _ => false,
            };
        if transparent {
            if end.place == FailurePlace::Unprocessed {
                self.unprocessed_retry = UnprocessedRetry::Used;
            }
            if self.stats.transparent_retries < self.max_transparent {
                // The replacement goes on with this attempt (same `grpc-previous-rpc-attempts`): if this was
                // a retry or hedge, it has not failed yet.
                return self.transparent_retry(attempt, now);
            }
            self.count_failed_retry(attempt, end.code);
            return self.finish(Outcome::Local(LocalReason::TooManyTransparentRetries), now);
        }
        self.count_failed_retry(attempt, end.code);
        if matches!(end.place, FailurePlace::Local | FailurePlace::Dropped) {
            // A local error is nobody's failure, and a drop never reached a backend: the call ends at once,
            // and the throttle neither gains nor loses.
            return self.finish(Outcome::Attempt(attempt), now);
        }
        if self.phase.is_committed_to(attempt) {
            // Too late for any retry, but the RPC still counts for the throttle, unless it never left the
            // client.
            if end.place != FailurePlace::NotSent {
                self.account(end);
            }
            return self.finish(Outcome::Attempt(attempt), now);
        }
        if processed {
            self.unprocessed_retry.forfeit();
        }
        if let Mode::App(policy) = &self.mode {
            // An application policy charges the throttle itself, once it has decided.
            let policy = policy.clone();
            return self.after_app_attempt(attempt, end, details, policy.as_ref(), now);
        }
        // The one place where an attempt's end is charged, before the policy reads the throttle.
        self.account(end);
        self.after_attempt(attempt, end, now);
    }

    /// The policy's decision about an uncommitted attempt that ended (or was cut by its receive timeout),
    /// after the throttle was charged.
    pub(super) fn after_attempt(&mut self, attempt: AttemptId, end: AttemptEnd, now: Instant) {
        match self.mode.clone() {
            Mode::None => self.finish(self.outcome_of(attempt), now),
            Mode::Retry(policy) => self.after_retry_policy_attempt(attempt, end, &policy, now),
            Mode::Hedging(policy) => self.after_hedge(attempt, end, &policy, now),
            Mode::App(policy) => {
                self.after_app_attempt(attempt, end, &AttemptDetails::NONE, policy.as_ref(), now)
            }
        }
    }

    /// A timer fired.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase.is_finished() {
            return;
        }
        if self.timers.deadline.is_some_and(|d| d <= now) {
            self.finish(Outcome::Local(LocalReason::DeadlineExceeded), now);
            return;
        }
        if self.timers.attempt.is_some_and(|t| t <= now) {
            self.recv_timeouts(now);
            if self.phase.is_finished() {
                return;
            }
        }
        if self.timers.retry.is_some_and(|t| t <= now) {
            self.timers.retry = None;
            self.start_policy_attempt(now);
        }
        if self.timers.hedge.at().is_some_and(|t| t <= now) {
            self.timers.hedge = HedgeTimer::Unarmed;
            self.hedge_tick(now);
        }
    }
}
