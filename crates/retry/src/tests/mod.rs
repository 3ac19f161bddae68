//! Timeline tests of the retry state machine: a harness feeds events, moves `now` to the next timer, and
//! shows the actions as short strings, so each test reads as the timeline the spec describes.

mod app_policy;
mod buffering;
mod cancel_and_deadline;
mod hedging;
mod properties;
mod recv_timeout;
mod retry_policy;
mod stats;
mod throttle_accounting;
mod transparent;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use grpc_code::Code;

use crate::{
    Action, Address, AttemptEnd, AttemptId, BufferPool, CallConfig, CodeSet, FailurePlace,
    HedgingPolicy, MaxAttempts, Outcome, Policy, Pushback, RetryCall, RetryPolicy, SharedLimits,
    SplitMix64, Throttle, ThrottleConfig,
};

pub(crate) fn codes(list: &[Code]) -> CodeSet {
    list.iter().copied().collect()
}

pub(crate) fn retry_policy(
    max: u64,
    initial_ms: u64,
    max_ms: u64,
    mult: f64,
    retryable: &[Code],
) -> Policy {
    Policy::Retry(
        RetryPolicy::new(
            MaxAttempts::new(max, 5).expect("valid"),
            Duration::from_millis(initial_ms),
            Duration::from_millis(max_ms),
            mult,
            codes(retryable),
        )
        .expect("valid"),
    )
}

pub(crate) fn hedging_policy(max: u64, delay_ms: u64, non_fatal: &[Code]) -> Policy {
    Policy::Hedging(HedgingPolicy::new(
        MaxAttempts::new(max, 5).expect("valid"),
        Duration::from_millis(delay_ms),
        codes(non_fatal),
    ))
}

pub(crate) fn throttle(max_tokens: u64, milli_ratio: u64) -> Arc<Throttle> {
    Arc::new(Throttle::new(
        ThrottleConfig::new(max_tokens, milli_ratio).expect("valid"),
    ))
}

pub(crate) fn addr(n: u8) -> Address {
    Address::Tcp(SocketAddr::from(([10, 0, 0, n], 443)))
}

/// One call on a timeline.
pub(crate) struct Timeline {
    pub(crate) call: RetryCall,
    pub(crate) start: Instant,
    pub(crate) now: Instant,
}

impl Timeline {
    pub(crate) fn new(policy: Policy) -> Timeline {
        Timeline::with(
            CallConfig {
                policy,
                ..CallConfig::default()
            },
            SharedLimits::default(),
        )
    }

    pub(crate) fn with(config: CallConfig, shared: SharedLimits) -> Timeline {
        Timeline::starting_at(config, shared, Instant::now(), 1)
    }

    pub(crate) fn starting_at(
        config: CallConfig,
        shared: SharedLimits,
        start: Instant,
        seed: u64,
    ) -> Timeline {
        let call = RetryCall::new(config, shared, Box::new(SplitMix64::new(seed)), start);
        Timeline {
            call,
            start,
            now: start,
        }
    }

    /// Milliseconds since the start.
    pub(crate) fn ms(&self) -> u128 {
        (self.now - self.start).as_millis()
    }

    /// Drains the actions as short strings.
    pub(crate) fn actions(&mut self) -> Vec<String> {
        std::iter::from_fn(|| self.call.poll_action())
            .map(|a| show(&a))
            .collect()
    }

    /// Drains the actions as values.
    pub(crate) fn raw_actions(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.call.poll_action()).collect()
    }

    /// Moves to the next timer and fires it; returns the new time in ms, or `None` if no timer is armed.
    pub(crate) fn advance(&mut self) -> Option<u128> {
        let at = self.call.poll_timeout()?;
        self.now = at.max(self.now);
        self.call.handle_timeout(self.now);
        Some(self.ms())
    }

    /// Moves time forward without firing anything that is not due.
    pub(crate) fn sleep(&mut self, ms: u64) {
        let target = self.now + Duration::from_millis(ms);
        while let Some(at) = self.call.poll_timeout() {
            if at > target {
                break;
            }
            self.now = at;
            self.call.handle_timeout(at);
        }
        self.now = target;
    }

    pub(crate) fn status(&mut self, attempt: u32, code: Code) {
        self.end(attempt, AttemptEnd::status(code, Pushback::None));
    }

    pub(crate) fn pushback(&mut self, attempt: u32, code: Code, pushback: Pushback) {
        self.end(attempt, AttemptEnd::status(code, pushback));
    }

    pub(crate) fn fail(&mut self, attempt: u32, code: Code, place: FailurePlace) {
        self.end(attempt, AttemptEnd::failure(code, place));
    }

    pub(crate) fn end(&mut self, attempt: u32, end: AttemptEnd) {
        self.call.handle_end(AttemptId(attempt), end, self.now);
    }

    pub(crate) fn headers(&mut self, attempt: u32) {
        self.call.handle_headers(AttemptId(attempt), self.now);
    }

    pub(crate) fn send(&mut self, bytes: usize) {
        self.call
            .send_message(Bytes::from(vec![7u8; bytes]), self.now);
    }

    pub(crate) fn sent(&mut self, attempt: u32, index: usize) {
        self.call.handle_message_sent(AttemptId(attempt), index);
    }

    pub(crate) fn picked(&mut self, attempt: u32, n: u8) {
        self.call.handle_picked(AttemptId(attempt), addr(n));
    }
}

/// An action as a short string: `start 1 prev=1`, `start 2 prev=1 transparent avoid=[10.0.0.1:443]`,
/// `send 1#0`, `half 1`, `cancel 0`, `commit 1`, `finish 2`, `finish DeadlineExceeded`.
pub(crate) fn show(a: &Action) -> String {
    match a {
        Action::StartAttempt {
            attempt,
            previous_attempts,
            transparent,
            avoid,
        } => {
            let mut s = format!("start {} prev={}", attempt.0, previous_attempts);
            if *transparent {
                s.push_str(" transparent");
            }
            if !avoid.is_empty() {
                let list: Vec<String> = avoid.iter().map(ToString::to_string).collect();
                s.push_str(&format!(" avoid=[{}]", list.join(",")));
            }
            s
        }
        Action::SendMessage { attempt, index, .. } => format!("send {}#{}", attempt.0, index),
        Action::HalfClose { attempt } => format!("half {}", attempt.0),
        Action::CancelAttempt { attempt } => format!("cancel {}", attempt.0),
        Action::Commit { attempt } => format!("commit {}", attempt.0),
        Action::Finish(Outcome::Attempt(a)) => format!("finish {}", a.0),
        Action::Finish(Outcome::Local(r)) => format!("finish {r:?}"),
    }
}

pub(crate) fn pool(limit: usize) -> Arc<BufferPool> {
    Arc::new(BufferPool::new(limit))
}
