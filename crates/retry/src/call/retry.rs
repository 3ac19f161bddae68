//! A retry policy's turn (A6 `retryPolicy`): which failures are retried, and when.

use std::time::{Duration, Instant};

use grpc_code::Code;

use super::{AttemptEnd, AttemptId, Outcome, RetryCall};
use crate::policy::RetryPolicy;
use crate::pushback::Pushback;

impl RetryCall {
    pub(super) fn after_retry_policy_attempt(
        &mut self,
        attempt: AttemptId,
        end: AttemptEnd,
        policy: &RetryPolicy,
        now: Instant,
    ) {
        // The order grpc-go uses: a "don't retry" pushback ends the call; then the code must be retryable
        // (an attempt cut by perAttemptRecvTimeout is retried when CANCELLED or DEADLINE_EXCEEDED is
        // listed); then the throttle (already charged) is checked; then maxAttempts.
        let done = self.outcome_of(attempt);
        if end.code == Code::Ok || end.pushback == Pushback::DontRetry {
            return self.finish(done, now);
        }
        let codes = policy.retryable();
        let retryable = if self.attempts[attempt.0 as usize].timed_out() {
            codes.contains(Code::Cancelled) || codes.contains(Code::DeadlineExceeded)
        } else {
            codes.contains(end.code)
        };
        if !retryable {
            return self.finish(done, now);
        }
        if !self.throttle_allows() || self.policy_attempts >= policy.max_attempts().get() {
            return self.finish(done, now);
        }
        let delay = match end.pushback {
            Pushback::RetryAfter(d) => {
                self.backoff.reset();
                d
            }
            _ => self.backoff.next_delay(policy, self.rng.as_mut()),
        };
        self.schedule_retry(now, delay, done);
    }

    /// Arms the retry timer `delay` from now, or ends the call with `done` if the retry would start at or
    /// after the deadline.
    pub(super) fn schedule_retry(&mut self, now: Instant, delay: Duration, done: Outcome) {
        let at = now.checked_add(delay);
        match at {
            Some(at) if self.timers.deadline.is_none_or(|d| at < d) => {
                self.timers.retry = Some(at);
            }
            // Beyond A6: a retry that would start after the deadline could only end DEADLINE_EXCEEDED and
            // would hide the real failure. End now with it. (A delay too large for the clock: never.)
            _ => self.finish(done, now),
        }
    }
}
