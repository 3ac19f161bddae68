//! The per-call state machine: [`RetryCall`].
//!
//! The call order, after quinn-proto's `Connection`: feed events with the `handle_*` methods and application
//! commands ([`RetryCall::send_message`], [`RetryCall::half_close`], [`RetryCall::cancel`]), then drain
//! [`RetryCall::poll_action`] until it returns `None`, then re-arm one timer at [`RetryCall::poll_timeout`] and
//! call [`RetryCall::handle_timeout`] when it fires. Every method takes `now`; nothing here reads a clock.
//!
//! This file holds the machine itself: its state, its construction, its outputs and getters, and the steps
//! every path shares (start, commit, cancel, finish). The rest is split by concept:
//!
//! - `phase.rs`: the call's life cycle, an enum with one variant per state of the crate docs' diagram;
//! - `attempt.rs`: an attempt's id, failure place and end, and what is kept per attempt;
//! - `action.rs`: the actions the channel performs and the call's outcome;
//! - `config.rs`: the per-call settings and the limits shared between calls;
//! - `timers.rs`: the timer table;
//! - `events.rs`: events from attempts (`handle_*`), transparent retries included;
//! - `commands.rs`: the application's commands, and when the replay buffer (`buffer.rs`) keeps and releases;
//! - `throttling.rs`: throttle accounting;
//! - `retry.rs`, `hedge.rs`, `app.rs`: the turn of a retry policy, a hedging policy, an application policy;
//! - `recv_timeout.rs`: `perAttemptRecvTimeout`.

use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use grpc_base::{Address, Rng};
use grpc_code::Code;

use crate::app_policy::AppRetryPolicy;
use crate::backoff::Backoff;
use crate::buffer::ReplayBuffer;
use crate::policy::{CodeSet, HedgingPolicy, Policy, RetryPolicy};
use crate::precedence::{self, PolicySource};
use crate::stats::CallStats;

mod action;
mod app;
mod attempt;
mod commands;
mod config;
mod events;
mod hedge;
mod phase;
mod recv_timeout;
mod retry;
mod throttling;
mod timers;

pub use action::{Action, LocalReason, Outcome};
pub use attempt::{AttemptEnd, AttemptId};
pub use config::{CallConfig, SharedLimits, DEFAULT_MAX_TRANSPARENT_RETRIES};

use attempt::{Attempt, AttemptState};
use phase::{NextAttempt, Phase};
use timers::Timers;

/// Which policy is in force, after `retries_enabled` and the precedence rules.
#[derive(Clone, Debug)]
enum Mode {
    None,
    Retry(RetryPolicy),
    Hedging(HedgingPolicy),
    App(Arc<dyn AppRetryPolicy>),
}

/// The gRFC A6 state machine of one call. See the crate docs for the diagram.
pub struct RetryCall {
    mode: Mode,
    source: PolicySource,
    /// The policy's per-attempt receive timeout.
    recv_timeout: Option<Duration>,
    /// When the call started (for [`FailedAttempt::elapsed`]).
    started: Instant,
    /// The configured policy's retryable / non-fatal codes, kept for throttle accounting even when retries
    /// are disabled (the failure still qualifies for the target; the policy is just not acted on).
    qualifying: CodeSet,
    max_transparent: u32,
    limits: SharedLimits,
    rng: Box<dyn Rng>,
    /// Every attempt started, by id.
    attempts: Vec<Attempt>,
    /// Where the call is in its life cycle.
    phase: Phase,
    /// Every message of the call while it may still be replayed (released as the committed attempt sends).
    replay: ReplayBuffer,
    next_index: usize,
    /// The application half-closed: every attempt, replays included, half-closes after its messages. A
    /// plain field: the request stream's end is independent of the attempts' life cycle.
    half_closed: bool,
    /// Whether an `Unprocessed` failure may still be retried transparently. Not part of the phase: it is
    /// spent by attempts whatever the phase they end in, and read only when one ends.
    unprocessed_retry: UnprocessedRetry,
    /// Attempts the policy started (the original, retries, hedges; transparent retries excluded).
    policy_attempts: u32,
    backoff: Backoff,
    timers: Timers,
    /// The addresses the call's attempts were sent to, for the next attempt to avoid: the first inline (a
    /// call with one attempt, the usual case, allocates nothing for it), the others after it.
    first_used: Option<Address>,
    more_used: Vec<Address>,
    last_ended: Option<AttemptId>,
    actions: VecDeque<Action>,
    stats: CallStats,
}

impl std::fmt::Debug for RetryCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryCall")
            .field("mode", &self.mode)
            .field("phase", &self.phase)
            .field("timers", &self.timers)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl RetryCall {
    /// A new call; its first action is starting the original attempt (and, for a zero hedging delay, every
    /// hedge).
    pub fn new(
        config: CallConfig,
        limits: SharedLimits,
        rng: Box<dyn Rng>,
        now: Instant,
    ) -> RetryCall {
        let qualifying = match &config.policy {
            Policy::None => CodeSet::empty(),
            Policy::Retry(p) => p.retryable(),
            Policy::Hedging(p) => p.non_fatal(),
        };
        let source = precedence::select(
            config.retries_enabled,
            config.policy != Policy::None,
            config.app_policy.is_some(),
            config.precedence,
        );
        let mode = match (source, config.policy, config.app_policy) {
            (PolicySource::Application, _, Some(p)) => Mode::App(p),
            (PolicySource::ServiceConfig, Policy::Retry(p), _) => Mode::Retry(p),
            (PolicySource::ServiceConfig, Policy::Hedging(p), _) => Mode::Hedging(p),
            _ => Mode::None,
        };
        let recv_timeout = match &mode {
            Mode::None => None,
            Mode::Retry(p) => p.per_attempt_recv_timeout(),
            Mode::Hedging(p) => p.per_attempt_recv_timeout(),
            Mode::App(p) => p.per_attempt_recv_timeout().filter(|t| !t.is_zero()),
        };
        let mut call = RetryCall {
            mode,
            source,
            recv_timeout,
            started: now,
            qualifying,
            max_transparent: config.max_transparent_retries,
            replay: ReplayBuffer::new(config.per_call_buffer_limit, limits.pool.clone()),
            limits,
            rng,
            attempts: Vec::new(),
            phase: Phase::new(now),
            next_index: 0,
            half_closed: false,
            unprocessed_retry: UnprocessedRetry::Available,
            policy_attempts: 0,
            backoff: Backoff::default(),
            timers: Timers {
                deadline: config.deadline,
                ..Timers::default()
            },
            first_used: None,
            more_used: Vec::new(),
            last_ended: None,
            // A call's first turn queues at most three (start the attempt, send the request, half-close)
            // unless it hedges at once: room for exactly those, kept while the call lives.
            actions: VecDeque::with_capacity(3),
            stats: CallStats::default(),
        };
        if config.deadline.is_some_and(|d| d <= now) {
            call.finish(Outcome::Local(LocalReason::DeadlineExceeded), now);
            return call;
        }
        call.start_policy_attempt(now);
        if let Mode::Hedging(p) = &call.mode {
            let delay = p.hedging_delay();
            if delay.is_zero() {
                while call.can_hedge() {
                    call.start_policy_attempt(now);
                }
            } else {
                call.arm_hedge(now + delay);
            }
        }
        call
    }

    // ---- outputs ---------------------------------------------------------------------------------------

    /// The next action, until `None`.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When to call [`RetryCall::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase.is_finished() {
            None
        } else {
            self.timers.next()
        }
    }

    // ---- getters ---------------------------------------------------------------------------------------

    /// The attempt the call is committed to, if any.
    pub fn committed(&self) -> Option<AttemptId> {
        self.phase.committed()
    }

    /// Whether the call has finished.
    pub fn is_finished(&self) -> bool {
        self.phase.is_finished()
    }

    /// Attempts in flight.
    pub fn live_attempts(&self) -> usize {
        self.phase.live()
    }

    /// Whether `attempt` was cut by `perAttemptRecvTimeout` (it ended as CANCELLED; the
    /// [`Action::CancelAttempt`] that cut it says no more): what a caller counting attempts per address
    /// (outlier detection) tells apart from an attempt cancelled because the call committed elsewhere, or
    /// was cancelled itself.
    pub fn timed_out(&self, attempt: AttemptId) -> bool {
        self.attempts
            .get(attempt.0 as usize)
            .is_some_and(Attempt::timed_out)
    }

    /// Bytes currently counted against the buffer limits.
    pub fn buffered_bytes(&self) -> usize {
        self.replay.bytes()
    }

    /// How many more bytes of messages the replay buffer takes before an overflow commits the call (A6
    /// commit point 2), under the per-call and the shared limit; `usize::MAX` once nothing is buffered
    /// any more (committed or finished). A caller handing over several messages at once stops before this
    /// room is used up, so that an overflow happens on a message of its own, after the attempts have
    /// reported what they sent, and the most advanced attempt wins it.
    pub fn buffer_room(&self) -> usize {
        match self.phase {
            Phase::Committed(_) | Phase::Finished { .. } => usize::MAX,
            Phase::BackingOff {
                next: NextAttempt::Committed,
                ..
            } => usize::MAX,
            _ => self.replay.room(),
        }
    }

    /// The call's statistics so far (final once finished).
    pub fn stats(&self) -> &CallStats {
        &self.stats
    }

    /// Where the policy the call runs came from: the service config, the application, or none.
    pub fn policy_source(&self) -> PolicySource {
        self.source
    }

    // ---- internals -------------------------------------------------------------------------------------

    fn is_live(&self, attempt: AttemptId) -> bool {
        !self.phase.is_finished()
            && self
                .attempts
                .get(attempt.0 as usize)
                .is_some_and(Attempt::is_live)
    }

    /// The attempt at `index` if it is live. Loops that change attempts walk `0..self.attempts.len()` with
    /// this (no loop body adds an attempt) rather than collect the live ids: no allocation per message.
    fn live_at(&self, index: usize) -> Option<AttemptId> {
        self.attempts
            .get(index)
            .filter(|a| a.is_live())
            .map(|_| AttemptId(index as u32))
    }

    fn most_advanced_live_attempt(&self) -> Option<AttemptId> {
        // Most messages sent; the earliest attempt among equals.
        (0..self.attempts.len())
            .filter_map(|i| self.live_at(i))
            .max_by_key(|id| (self.attempts[id.0 as usize].sent, std::cmp::Reverse(id.0)))
    }

    fn queue_send(&mut self, attempt: AttemptId, index: usize, message: Bytes) {
        self.attempts[attempt.0 as usize].queued = index + 1;
        self.actions.push_back(Action::SendMessage {
            attempt,
            index,
            message,
        });
    }

    fn start_policy_attempt(&mut self, now: Instant) {
        let previous = self.policy_attempts;
        self.policy_attempts += 1;
        if previous > 0 {
            match self.mode {
                Mode::Hedging(_) => self.stats.hedges += 1,
                _ => self.stats.retries += 1,
            }
        }
        self.start_attempt(previous, false, now);
    }

    /// Replaces `replaced` by a transparent retry (the caller checked the safety cap).
    fn transparent_retry(&mut self, replaced: AttemptId, now: Instant) {
        self.stats.transparent_retries += 1;
        let previous = self.attempts[replaced.0 as usize].previous_attempts;
        self.start_attempt(previous, true, now);
    }

    /// A6 "retry attempts which failed": a retry or hedge (sent with `grpc-previous-rpc-attempts` > 0) whose
    /// end, reported by the channel, is not OK.
    fn count_failed_retry(&mut self, attempt: AttemptId, code: Code) {
        if code != Code::Ok && self.attempts[attempt.0 as usize].previous_attempts > 0 {
            self.stats.failed_retries += 1;
        }
    }

    fn start_attempt(&mut self, previous_attempts: u32, transparent: bool, now: Instant) {
        let commit = match self.phase {
            Phase::Attempting { live } => {
                self.phase = Phase::Attempting {
                    live: live.saturating_add(1),
                };
                false
            }
            Phase::BackingOff { since, next } => {
                self.stats.retry_delay += now.saturating_duration_since(since);
                self.phase = Phase::Attempting {
                    live: NonZeroUsize::MIN,
                };
                next == NextAttempt::Committed
            }
            // Never: commit and finish disarm the retry and hedge timers, and only an uncommitted attempt is
            // retried transparently.
            Phase::Committed(_) | Phase::Finished { .. } => return,
        };
        let id = AttemptId(self.attempts.len() as u32);
        let recv_deadline = self.recv_timeout.and_then(|t| now.checked_add(t));
        // Exactly the attempts started (one for most calls), not the four a doubling growth keeps: the
        // machine lives as long as the call.
        self.attempts.reserve_exact(1);
        self.attempts
            .push(Attempt::new(previous_attempts, recv_deadline));
        self.stats.attempts += 1;
        self.actions.push_back(Action::StartAttempt {
            attempt: id,
            previous_attempts,
            transparent,
            avoid: self
                .first_used
                .iter()
                .chain(&self.more_used)
                .cloned()
                .collect(),
        });
        // A replay: every message so far, from the first.
        for (index, message) in self.replay.replay() {
            self.actions.push_back(Action::SendMessage {
                attempt: id,
                index,
                message: message.clone(),
            });
        }
        let replayed = self.replay.len();
        if replayed > 0 {
            self.attempts[id.0 as usize].queued = replayed;
        }
        if self.half_closed {
            self.actions.push_back(Action::HalfClose { attempt: id });
        }
        if commit {
            self.commit(id, now);
        }
        self.rearm_attempt_timer();
    }

    /// Commits the call to `attempt`, which is live, and cancels the others.
    fn commit(&mut self, attempt: AttemptId, now: Instant) {
        self.phase = Phase::Committed(attempt);
        self.timers.retry = None;
        self.timers.hedge.disarm();
        for i in 0..self.attempts.len() {
            match self.live_at(i) {
                Some(id) if id != attempt => self.cancel_attempt(id, now),
                _ => {}
            }
        }
        self.actions.push_back(Action::Commit { attempt });
        self.release_sent();
        self.rearm_attempt_timer();
    }

    /// Marks live attempt `id` no longer in flight. While the call is uncommitted it leaves the count of
    /// attempts in flight; the last one out starts BACKING OFF at `now`.
    fn attempt_over(&mut self, id: AttemptId, now: Instant) {
        self.attempts[id.0 as usize].state = AttemptState::Over;
        if let Phase::Attempting { live } = self.phase {
            self.phase = match NonZeroUsize::new(live.get() - 1) {
                Some(live) => Phase::Attempting { live },
                None => Phase::BackingOff {
                    since: now,
                    next: NextAttempt::Uncommitted,
                },
            };
        }
    }

    fn cancel_attempt(&mut self, id: AttemptId, now: Instant) {
        self.attempt_over(id, now);
        self.actions
            .push_back(Action::CancelAttempt { attempt: id });
        self.rearm_attempt_timer();
    }

    /// The call's outcome if it ends with `attempt`'s status: a local CANCELLED for an attempt the
    /// receive timeout cut (the channel holds no status for a cancelled attempt).
    fn outcome_of(&self, attempt: AttemptId) -> Outcome {
        match self.attempts.get(attempt.0 as usize) {
            Some(a) if a.timed_out() => Outcome::Local(LocalReason::PerAttemptRecvTimeout),
            _ => Outcome::Attempt(attempt),
        }
    }

    fn finish(&mut self, outcome: Outcome, now: Instant) {
        if let Phase::BackingOff { since, .. } = self.phase {
            self.stats.retry_delay += now.saturating_duration_since(since);
        }
        self.phase = Phase::Finished {
            committed: self.phase.committed(),
        };
        for i in 0..self.attempts.len() {
            if let Some(id) = self.live_at(i) {
                self.cancel_attempt(id, now);
            }
        }
        self.timers = Timers::default();
        self.release_all();
        self.actions.push_back(Action::Finish(outcome));
    }
}

/// A6's one transparent retry of an `Unprocessed` failure per call, and none once an attempt may have
/// reached the server's application: after that, an unprocessed failure goes to the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UnprocessedRetry {
    /// The next `Unprocessed` failure of an uncommitted attempt is retried transparently.
    Available,
    /// Spent on an `Unprocessed` failure.
    Used,
    /// An attempt was processed (or cut by its receive timeout, so may have been) before it was used.
    Forfeited,
}

impl UnprocessedRetry {
    /// An attempt may have reached the server's application.
    fn forfeit(&mut self) {
        if *self == UnprocessedRetry::Available {
            *self = UnprocessedRetry::Forfeited;
        }
    }
}
