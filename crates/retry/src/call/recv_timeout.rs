//! `perAttemptRecvTimeout` in the state machine (semantics in the crate docs): one timer, at the earliest
//! receive deadline of the live attempts until the call commits; an attempt that runs out is cancelled and
//! handed to the policy as CANCELLED.

use std::time::Instant;

use grpc_base::FailurePlace;
use grpc_code::Code;

use super::attempt::AttemptState;
use super::{AttemptEnd, AttemptId, Mode, RetryCall};

impl RetryCall {
    /// Re-arms the per-attempt receive timer at the earliest deadline of the live attempts; none once the
    /// call is committed (the timer covers an attempt until its response headers, see the crate docs).
    pub(super) fn rearm_attempt_timer(&mut self) {
        if self.recv_timeout.is_none() {
            return;
        }
        self.timers.attempt = if !self.phase.is_open() {
            None
        } else {
            self.attempts
                .iter()
                .filter(|a| a.is_live())
                .filter_map(|a| a.recv_deadline)
                .min()
        };
    }

    /// Cuts every live attempt whose receive deadline passed: each is cancelled and handed to the policy
    /// as CANCELLED.
    pub(super) fn recv_timeouts(&mut self, now: Instant) {
        for i in 0..self.attempts.len() {
            if !self.phase.is_open() {
                break;
            }
            let due = self.attempts[i].is_live()
                && self.attempts[i].recv_deadline.is_some_and(|d| d <= now);
            if due {
                self.attempt_timed_out(AttemptId(i as u32), now);
            }
        }
        self.rearm_attempt_timer();
    }

    fn attempt_timed_out(&mut self, attempt: AttemptId, now: Instant) {
        self.stats.per_attempt_recv_timeouts += 1;
        self.cancel_attempt(attempt, now);
        self.attempts[attempt.0 as usize].state = AttemptState::TimedOut;
        self.last_ended = Some(attempt);
        // The request may have reached the server's application.
        self.unprocessed_retry.forfeit();
        self.count_failed_retry(attempt, Code::Cancelled);
        let end = AttemptEnd::failure(Code::Cancelled, FailurePlace::Processed);
        if !matches!(self.mode, Mode::App(_)) {
            // A timed-out attempt is a qualifying failure (C-core counts it whatever the codes say); an
            // application policy charges it once it has decided.
            self.charge_failure();
        }
        self.after_attempt(attempt, end, now);
    }
}
