//! An application policy's turn in the state machine: A6's guard rails around [`AppRetryPolicy::decide`].

use std::time::Instant;

use grpc_code::Code;

use super::{AttemptEnd, AttemptId, LocalReason, RetryCall};
use crate::app_policy::{AppRetryPolicy, AttemptDetails, FailedAttempt, RetryDecision};
use crate::policy::DEFAULT_MAX_ATTEMPTS_CAP;
use crate::pushback::Pushback;

impl RetryCall {
    /// An application policy's turn (guard rails around [`AppRetryPolicy::decide`]): OK ends the call; a
    /// "don't retry" pushback ends it and costs a token; otherwise the policy decides, a failure it retries
    /// (or that the service config's codes list) costs a token, and the retry still needs the throttle's
    /// leave, an attempt left under the cap and a start before the deadline; a pushback delay replaces the
    /// policy's.
    pub(super) fn after_app_attempt(
        &mut self,
        attempt: AttemptId,
        end: AttemptEnd,
        details: &AttemptDetails<'_>,
        policy: &dyn AppRetryPolicy,
        now: Instant,
    ) {
        let done = self.outcome_of(attempt);
        let a = &self.attempts[attempt.0 as usize];
        let (number, timed_out) = (a.previous_attempts + 1, a.timed_out());
        let throttle = self.limits.throttle.clone();
        if end.code == Code::Ok {
            if let Some(t) = &throttle {
                t.record_success();
            }
            return self.finish(done, now);
        }
        if end.pushback == Pushback::DontRetry {
            self.charge_failure();
            return self.finish(done, now);
        }
        let info = FailedAttempt {
            attempt: number,
            code: end.code,
            message: if timed_out {
                LocalReason::PerAttemptRecvTimeout.message()
            } else {
                details.message
            },
            trailers: details.trailers,
            pushback: end.pushback,
            place: end.place,
            timed_out,
            elapsed: now.saturating_duration_since(self.started),
        };
        let decision = policy.decide(&info, self.rng.as_mut());
        if matches!(decision, RetryDecision::Retry { .. }) || self.qualifying.contains(end.code) {
            self.charge_failure();
        }
        let RetryDecision::Retry { after } = decision else {
            return self.finish(done, now);
        };
        let cap = policy.max_attempts().min(DEFAULT_MAX_ATTEMPTS_CAP);
        if !self.throttle_allows() || self.policy_attempts >= cap {
            return self.finish(done, now);
        }
        let delay = match end.pushback {
            Pushback::RetryAfter(d) => d,
            _ => after,
        };
        self.schedule_retry(now, delay, done);
    }
}
