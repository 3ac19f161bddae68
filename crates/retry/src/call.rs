//! The per-call state machine: [`RetryCall`].
//!
//! The call order, after quinn-proto's `Connection`: feed events with the `handle_*` methods and application
//! commands ([`RetryCall::send_message`], [`RetryCall::half_close`], [`RetryCall::cancel`]), then drain
//! [`RetryCall::poll_action`] until it returns `None`, then re-arm one timer at [`RetryCall::poll_timeout`] and
//! call [`RetryCall::handle_timeout`] when it fires. Every method takes `now`; nothing here reads a clock.
//!
//! Throttle accounting (A6: "every outgoing RPC regardless of method") covers every call, whatever its
//! policy and whether retries are enabled. Each attempt's end is charged at most once: an OK gives back
//! `tokenRatio`; a qualifying failure costs one token, where qualifying means a code in the *configured*
//! policy's `retryableStatusCodes` / `nonFatalStatusCodes` (still so when retries are disabled) or a "don't
//! retry" pushback, fatal code or not; the committed attempt's end counts too. Transparent retries
//! ([`FailurePlace::NotSent`], a transparently retried [`FailurePlace::Unprocessed`]),
//! [`FailurePlace::Dropped`] and [`FailurePlace::Local`] never touch the throttle, and a call without a
//! policy only pays for "don't retry" pushbacks.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use grpc_base::{Address, Rng};
use grpc_code::Code;

use crate::app_policy::{AppRetryPolicy, AttemptDetails};
use crate::backoff::Backoff;
use crate::buffer::{BufferPool, DEFAULT_PER_CALL_LIMIT};
use crate::policy::{CodeSet, HedgingPolicy, Policy, RetryPolicy};
use crate::precedence::{self, PolicySource, Precedence};
use crate::pushback::Pushback;
use crate::stats::CallStats;
use crate::throttle::Throttle;

mod app;
mod recv_timeout;

/// The safety cap on transparent retries of one call (grpc-java's number): past it the call fails INTERNAL.
pub const DEFAULT_MAX_TRANSPARENT_RETRIES: u32 = 1000;

/// Identifies one attempt of a call: 0 is the original, then in the order they were started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttemptId(pub u32);

/// Where an attempt failed (gRFC A6 "Transparent Retries": the four places an RPC can fail).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailurePlace {
    /// The load balancer dropped the call: it fails at once, with no retry of any kind, and the throttle is
    /// not touched (no backend saw it).
    Dropped,
    /// The pick failed (e.g. TRANSIENT_FAILURE for a fail-fast call): the configured policy applies.
    PickFailed,
    /// The pick succeeded but nothing left the client: transparent retry, without limit until the deadline.
    NotSent,
    /// The server's HTTP/2 stack refused it before its application saw it (REFUSED_STREAM, GOAWAY above the
    /// stream): one transparent retry per call, never after an attempt was processed.
    Unprocessed,
    /// The server's application may have seen it (trailers, or a failure after the request went out): the
    /// configured policy applies.
    Processed,
    /// A local error that is nobody's failure, e.g. a request the HTTP/2 library refuses to send (malformed
    /// metadata): the call ends at once with this attempt's status; never retried, transparently or by policy,
    /// and never counted by the throttle.
    Local,
}

/// How an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptEnd {
    /// The status code (OK for success).
    pub code: Code,
    /// Where it failed.
    pub place: FailurePlace,
    /// What the trailers said about retrying.
    pub pushback: Pushback,
}

impl AttemptEnd {
    /// The attempt ended with trailers carrying `code` (the server's application answered).
    pub fn status(code: Code, pushback: Pushback) -> AttemptEnd {
        AttemptEnd {
            code,
            place: FailurePlace::Processed,
            pushback,
        }
    }

    /// The attempt failed at `place` with `code`, and no pushback.
    pub fn failure(code: Code, place: FailurePlace) -> AttemptEnd {
        AttemptEnd {
            code,
            place,
            pushback: Pushback::None,
        }
    }
}

/// Why the state machine itself ended a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalReason {
    /// The call's deadline passed: DEADLINE_EXCEEDED.
    DeadlineExceeded,
    /// The application cancelled: CANCELLED.
    Cancelled,
    /// Over the safety cap of transparent retries: INTERNAL.
    TooManyTransparentRetries,
    /// The last attempt was cut by the policy's per-attempt receive timeout (`perAttemptRecvTimeout`) and
    /// not retried: CANCELLED.
    PerAttemptRecvTimeout,
}

impl LocalReason {
    /// The status code.
    pub fn code(self) -> Code {
        match self {
            LocalReason::DeadlineExceeded => Code::DeadlineExceeded,
            LocalReason::Cancelled => Code::Cancelled,
            LocalReason::TooManyTransparentRetries => Code::Internal,
            LocalReason::PerAttemptRecvTimeout => Code::Cancelled,
        }
    }

    /// The status message.
    pub fn message(self) -> &'static str {
        match self {
            LocalReason::DeadlineExceeded => "deadline exceeded",
            LocalReason::Cancelled => "call cancelled by the client",
            LocalReason::TooManyTransparentRetries => {
                "too many transparent retries: the call never left the client; this is likely a bug"
            }
            LocalReason::PerAttemptRecvTimeout => {
                "the attempt got no response within the retry policy's perAttemptRecvTimeout"
            }
        }
    }
}

/// The call's final outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The status of this attempt is the call's status.
    Attempt(AttemptId),
    /// A status made by the state machine.
    Local(LocalReason),
}

/// What the channel must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Pick a subchannel (preferring addresses not in `avoid`) and open a stream for a new attempt.
    StartAttempt {
        /// The new attempt.
        attempt: AttemptId,
        /// The value of `grpc-previous-rpc-attempts` (omit the header when 0).
        previous_attempts: u32,
        /// Whether this is a transparent retry.
        transparent: bool,
        /// Addresses this call already used; hedges and retries should prefer others.
        avoid: Vec<Address>,
    },
    /// Send message `index` of the call on `attempt` (in order; report with `handle_message_sent`).
    SendMessage {
        /// The attempt.
        attempt: AttemptId,
        /// The message's index in the call.
        index: usize,
        /// The message.
        message: Bytes,
    },
    /// Half-close `attempt` after its messages.
    HalfClose {
        /// The attempt.
        attempt: AttemptId,
    },
    /// Cancel `attempt` (RST_STREAM(CANCEL)); report nothing more about it.
    CancelAttempt {
        /// The attempt.
        attempt: AttemptId,
    },
    /// The call is committed to `attempt`: hand its response to the application.
    Commit {
        /// The attempt.
        attempt: AttemptId,
    },
    /// The call is over.
    Finish(Outcome),
}

/// Per-call settings.
#[derive(Clone, Debug)]
pub struct CallConfig {
    /// The method's policy (from the service config).
    pub policy: Policy,
    /// The application's policy, if it set one (for the channel or this call).
    pub app_policy: Option<Arc<dyn AppRetryPolicy>>,
    /// Which of `policy` and `app_policy` wins when both are set (see [`crate::Precedence`]).
    pub precedence: Precedence,
    /// `false` when the channel disabled retries (retries and hedging, the application's policy too;
    /// transparent retries stay on). The service config policy's codes still decide which failures the
    /// throttle counts.
    pub retries_enabled: bool,
    /// The call's deadline, spanning all attempts.
    pub deadline: Option<Instant>,
    /// The most bytes this call may keep for replay.
    pub per_call_buffer_limit: usize,
    /// The safety cap on transparent retries.
    pub max_transparent_retries: u32,
}

impl Default for CallConfig {
    fn default() -> Self {
        CallConfig {
            policy: Policy::None,
            app_policy: None,
            precedence: Precedence::ServiceConfig,
            retries_enabled: true,
            deadline: None,
            per_call_buffer_limit: DEFAULT_PER_CALL_LIMIT,
            max_transparent_retries: DEFAULT_MAX_TRANSPARENT_RETRIES,
        }
    }
}

/// The limits a call shares with other calls, which the channel hands to each: the target's retry throttle
/// and the channel's replay buffer pool.
#[derive(Clone, Debug, Default)]
pub struct SharedLimits {
    /// The throttle of the call's target, if the service config has `retryThrottling`.
    pub throttle: Option<Arc<Throttle>>,
    /// The channel's retry buffer pool.
    pub pool: Arc<BufferPool>,
}

#[derive(Clone, Debug)]
struct Attempt {
    live: bool,
    previous_attempts: u32,
    /// Messages handed to the channel for this attempt.
    queued: usize,
    /// Messages the channel reported as sent.
    sent: usize,
    /// When the per-attempt receive timeout cuts it (until the call commits).
    recv_deadline: Option<Instant>,
    /// The per-attempt receive timeout cut it: the call's status, if it is the last, is local.
    timed_out: bool,
}

/// Which policy is in force, after `retries_enabled` and the precedence rules.
#[derive(Clone, Debug)]
enum Mode {
    None,
    Retry(RetryPolicy),
    Hedging(HedgingPolicy),
    App(Arc<dyn AppRetryPolicy>),
}

/// The timer table: at most one deadline per kind.
#[derive(Clone, Copy, Debug, Default)]
struct Timers {
    deadline: Option<Instant>,
    retry: Option<Instant>,
    hedge: Option<Instant>,
    /// The earliest per-attempt receive deadline of the live attempts (none once committed).
    attempt: Option<Instant>,
}

impl Timers {
    fn next(&self) -> Option<Instant> {
        [self.deadline, self.retry, self.hedge, self.attempt]
            .into_iter()
            .flatten()
            .min()
    }
}

/// The gRFC A6 state machine of one call. See the crate docs for the diagram.
pub struct RetryCall {
    mode: Mode,
    source: PolicySource,
    /// The policy's per-attempt receive timeout.
    recv_timeout: Option<Duration>,
    /// When the call started (for [`RetryInfo::elapsed`]).
    started: Instant,
    /// The configured policy's retryable / non-fatal codes, kept for throttle accounting even when retries
    /// are disabled (the failure still qualifies for the target; the policy is just not acted on).
    qualifying: CodeSet,
    max_transparent: u32,
    per_call_limit: usize,
    limits: SharedLimits,
    rng: Box<dyn Rng>,
    attempts: Vec<Attempt>,
    live: usize,
    /// Every message of the call while it may still be replayed (released as the committed attempt sends).
    messages: Vec<Bytes>,
    /// Messages `0..accounted` are counted against the limits; later ones arrived after an overflow.
    accounted: usize,
    /// Bytes of `messages[released..accounted]` still counted.
    buffered_bytes: usize,
    released: usize,
    next_index: usize,
    half_closed: bool,
    committed: Option<AttemptId>,
    /// The buffer overflowed while no attempt was in flight: the next attempt is committed when it starts.
    commit_on_start: bool,
    finished: bool,
    any_processed: bool,
    unprocessed_retry_used: bool,
    policy_attempts: u32,
    backoff: Backoff,
    hedging_stopped: bool,
    timers: Timers,
    /// The addresses the call's attempts were sent to, for the next attempt to avoid: the first inline (a
    /// call with one attempt, the usual case, allocates nothing for it), the others after it.
    first_used: Option<Address>,
    more_used: Vec<Address>,
    last_ended: Option<AttemptId>,
    idle_since: Option<Instant>,
    actions: VecDeque<Action>,
    stats: CallStats,
}

impl std::fmt::Debug for RetryCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryCall")
            .field("mode", &self.mode)
            .field("live", &self.live)
            .field("committed", &self.committed)
            .field("finished", &self.finished)
            .field("timers", &self.timers)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl RetryCall {
    /// A new call; its first action is starting the original attempt (and, for a zero hedging delay, every
    /// hedge).
    pub fn new(config: CallConfig, limits: SharedLimits, rng: Box<dyn Rng>, now: Instant) -> RetryCall {
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
            per_call_limit: config.per_call_buffer_limit,
            limits,
            rng,
            attempts: Vec::new(),
            live: 0,
            messages: Vec::new(),
            accounted: 0,
            buffered_bytes: 0,
            released: 0,
            next_index: 0,
            half_closed: false,
            committed: None,
            commit_on_start: false,
            finished: false,
            any_processed: false,
            unprocessed_retry_used: false,
            policy_attempts: 0,
            backoff: Backoff::default(),
            hedging_stopped: false,
            timers: Timers {
                deadline: config.deadline,
                ..Timers::default()
            },
            first_used: None,
            more_used: Vec::new(),
            last_ended: None,
            idle_since: None,
            actions: VecDeque::new(),
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
        if self.finished {
            None
        } else {
            self.timers.next()
        }
    }

    // ---- getters ---------------------------------------------------------------------------------------

    /// The attempt the call is committed to, if any.
    pub fn committed(&self) -> Option<AttemptId> {
        self.committed
    }

    /// Whether the call has finished.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Attempts in flight.
    pub fn live_attempts(&self) -> usize {
        self.live
    }

    /// Bytes currently counted against the buffer limits.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered_bytes
    }

    /// The call's statistics so far (final once finished).
    pub fn stats(&self) -> &CallStats {
        &self.stats
    }

    /// Where the policy the call runs came from: the service config, the application, or none.
    pub fn policy_source(&self) -> PolicySource {
        self.source
    }

    // ---- events from attempts --------------------------------------------------------------------------

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
        if !a.live {
            return;
        }
        a.sent = a.sent.max(index + 1).min(a.queued);
        if self.committed == Some(attempt) {
            self.release_sent();
        }
    }

    /// The attempt received response headers: the call commits to it (A6 commit point 1).
    pub fn handle_headers(&mut self, attempt: AttemptId, _now: Instant) {
        if !self.is_live(attempt) || self.committed.is_some() {
            return;
        }
        self.commit(attempt);
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
        self.attempts[attempt.0 as usize].live = false;
        self.live -= 1;
        self.rearm_attempt_timer();
        self.last_ended = Some(attempt);
        if self.live == 0 {
            self.idle_since = Some(now);
        }
        let processed = end.place == FailurePlace::Processed;
        let transparent = self.committed != Some(attempt)
            && match end.place {
                FailurePlace::NotSent => true,
                FailurePlace::Unprocessed => !self.unprocessed_retry_used && !self.any_processed,
                _ => false,
            };
        if transparent {
            if end.place == FailurePlace::Unprocessed {
                self.unprocessed_retry_used = true;
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
        if self.committed == Some(attempt) {
            // Too late for any retry, but the RPC still counts for the throttle, unless it never left the
            // client.
            if end.place != FailurePlace::NotSent {
                self.account(end);
            }
            return self.finish(Outcome::Attempt(attempt), now);
        }
        self.any_processed |= processed;
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
    fn after_attempt(&mut self, attempt: AttemptId, end: AttemptEnd, now: Instant) {
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
        if self.finished {
            return;
        }
        if self.timers.deadline.is_some_and(|d| d <= now) {
            self.finish(Outcome::Local(LocalReason::DeadlineExceeded), now);
            return;
        }
        if self.timers.attempt.is_some_and(|t| t <= now) {
            self.recv_timeouts(now);
            if self.finished {
                return;
            }
        }
        if self.timers.retry.is_some_and(|t| t <= now) {
            self.timers.retry = None;
            self.start_policy_attempt(now);
        }
        if self.timers.hedge.is_some_and(|t| t <= now) {
            self.timers.hedge = None;
            self.hedge_tick(now);
        }
    }

    // ---- commands from the application -----------------------------------------------------------------

    /// The application sends a message. Returns `false` if the call has already finished.
    pub fn send_message(&mut self, message: Bytes, _now: Instant) -> bool {
        if self.finished {
            return false;
        }
        let index = self.next_index;
        self.next_index += 1;
        if let Some(c) = self.committed {
            self.queue_send(c, index, message);
            return true;
        }
        let len = message.len();
        let fits = !self.commit_on_start
            && self.buffered_bytes + len <= self.per_call_limit
            && self.limits.pool.try_reserve(len);
        if fits {
            self.buffered_bytes += len;
            self.accounted += 1;
            self.messages.push(message.clone());
            for i in 0..self.attempts.len() {
                if let Some(id) = self.live_at(i) {
                    self.queue_send(id, index, message.clone());
                }
            }
            return true;
        }
        // A6 commit point 2: the outgoing messages overflowed the retry buffer.
        self.stats.committed_by_buffer_overflow = true;
        match self.most_advanced_live_attempt() {
            Some(winner) => {
                self.commit(winner);
                self.queue_send(winner, index, message);
            }
            None => {
                // No attempt in flight (backing off): keep the message for the next attempt, which is then
                // committed. It is not retry-buffered: it will be sent once.
                self.commit_on_start = true;
                self.messages.push(message);
            }
        }
        true
    }

    /// The application half-closes.
    pub fn half_close(&mut self) {
        if self.finished || self.half_closed {
            return;
        }
        self.half_closed = true;
        for i in 0..self.attempts.len() {
            if let Some(id) = self.live_at(i) {
                self.actions.push_back(Action::HalfClose { attempt: id });
            }
        }
    }

    /// The application cancels the call.
    pub fn cancel(&mut self, now: Instant) {
        if !self.finished {
            self.finish(Outcome::Local(LocalReason::Cancelled), now);
        }
    }

    // ---- internals -------------------------------------------------------------------------------------

    fn is_live(&self, attempt: AttemptId) -> bool {
        !self.finished
            && self
                .attempts
                .get(attempt.0 as usize)
                .is_some_and(|a| a.live)
    }

    /// The attempt at `index` if it is live. Loops that change attempts walk `0..self.attempts.len()` with
    /// this (no loop body adds an attempt) rather than collect the live ids: no allocation per message.
    fn live_at(&self, index: usize) -> Option<AttemptId> {
        self.attempts
            .get(index)
            .filter(|a| a.live)
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
        let id = AttemptId(self.attempts.len() as u32);
        self.attempts.push(Attempt {
            live: true,
            previous_attempts,
            queued: 0,
            sent: 0,
            recv_deadline: self.recv_timeout.and_then(|t| now.checked_add(t)),
            timed_out: false,
        });
        self.live += 1;
        self.stats.attempts += 1;
        if let Some(since) = self.idle_since.take() {
            self.stats.retry_delay += now.saturating_duration_since(since);
        }
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
        for index in 0..self.messages.len() {
            let message = self.messages[index].clone();
            self.queue_send(id, index, message);
        }
        if self.half_closed {
            self.actions.push_back(Action::HalfClose { attempt: id });
        }
        if self.commit_on_start {
            self.commit(id);
        }
        self.rearm_attempt_timer();
    }

    fn commit(&mut self, attempt: AttemptId) {
        self.committed = Some(attempt);
        self.commit_on_start = false;
        self.timers.retry = None;
        self.timers.hedge = None;
        for i in 0..self.attempts.len() {
            match self.live_at(i) {
                Some(id) if id != attempt => self.cancel_attempt(id),
                _ => {}
            }
        }
        self.actions.push_back(Action::Commit { attempt });
        self.release_sent();
        self.rearm_attempt_timer();
    }

    fn cancel_attempt(&mut self, id: AttemptId) {
        self.attempts[id.0 as usize].live = false;
        self.live -= 1;
        self.actions
            .push_back(Action::CancelAttempt { attempt: id });
        self.rearm_attempt_timer();
    }

    /// The call's outcome if it ends with `attempt`'s status: a local CANCELLED for an attempt the
    /// receive timeout cut (the channel holds no status for a cancelled attempt).
    fn outcome_of(&self, attempt: AttemptId) -> Outcome {
        match self.attempts.get(attempt.0 as usize) {
            Some(a) if a.timed_out => Outcome::Local(LocalReason::PerAttemptRecvTimeout),
            _ => Outcome::Attempt(attempt),
        }
    }

    fn charge_failure(&self) {
        if let Some(t) = &self.limits.throttle {
            t.record_failure();
        }
    }

    /// Releases the buffered messages the committed attempt has sent: they will never be replayed.
    fn release_sent(&mut self) {
        let Some(c) = self.committed else { return };
        let upto = self.attempts[c.0 as usize].sent.min(self.messages.len());
        // One release to the shared pool for the lot, not one atomic update per message.
        let mut freed = 0;
        while self.released < upto {
            let i = self.released;
            if i < self.accounted {
                freed += self.messages[i].len();
            }
            self.messages[i] = Bytes::new();
            self.released += 1;
        }
        if freed > 0 {
            self.buffered_bytes -= freed;
            self.limits.pool.release(freed);
        }
    }

    fn release_all(&mut self) {
        self.limits.pool.release(self.buffered_bytes);
        self.buffered_bytes = 0;
        self.messages.clear();
        self.released = 0;
        self.accounted = 0;
    }

    fn finish(&mut self, outcome: Outcome, now: Instant) {
        for i in 0..self.attempts.len() {
            if let Some(id) = self.live_at(i) {
                self.cancel_attempt(id);
            }
        }
        if let Some(since) = self.idle_since.take() {
            self.stats.retry_delay += now.saturating_duration_since(since);
        }
        self.timers = Timers::default();
        self.release_all();
        self.finished = true;
        self.actions.push_back(Action::Finish(outcome));
    }

    fn throttle_allows(&self) -> bool {
        self.limits
            .throttle
            .as_ref()
            .is_none_or(|t| t.allows_retry())
    }

    /// Throttle accounting of one attempt's end (A6: every outgoing RPC, whatever its method or policy): OK
    /// gives back `tokenRatio`; a qualifying failure (a retryable / non-fatal code of the configured policy,
    /// even with retries disabled, or a "don't retry" pushback) costs one token; anything else costs nothing.
    fn account(&self, end: AttemptEnd) {
        let Some(t) = &self.limits.throttle else {
            return;
        };
        if end.code == Code::Ok {
            t.record_success();
        } else if end.pushback == Pushback::DontRetry || self.qualifying.contains(end.code) {
            t.record_failure();
        }
    }

    fn after_retry_policy_attempt(
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
        let retryable = if self.attempts[attempt.0 as usize].timed_out {
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
    fn schedule_retry(&mut self, now: Instant, delay: Duration, done: Outcome) {
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

    fn can_hedge(&self) -> bool {
        match &self.mode {
            Mode::Hedging(p) => {
                // A pending commit (overflow while no attempt was live) does not stop the next hedge: that
                // hedge is the one committed when it starts.
                !self.hedging_stopped
                    && self.committed.is_none()
                    && self.policy_attempts < p.max_attempts().get()
                    && self.throttle_allows()
            }
            _ => false,
        }
    }

    fn more_hedges_remain(&self) -> bool {
        match &self.mode {
            Mode::Hedging(p) => {
                !self.hedging_stopped
                    && self.committed.is_none()
                    && self.policy_attempts < p.max_attempts().get()
            }
            _ => false,
        }
    }

    fn arm_hedge(&mut self, at: Instant) {
        if self.more_hedges_remain() && self.timers.deadline.is_none_or(|d| at < d) {
            self.timers.hedge = Some(at);
        } else {
            self.timers.hedge = None;
        }
    }

    fn hedge_delay(&self) -> Duration {
        match &self.mode {
            Mode::Hedging(p) => p.hedging_delay(),
            _ => Duration::ZERO,
        }
    }

    fn hedge_tick(&mut self, now: Instant) {
        if self.can_hedge() {
            self.start_policy_attempt(now);
        }
        // A throttled hedge is skipped, not postponed: the schedule goes on, and tokens may come back.
        self.arm_hedge(now + self.hedge_delay());
        self.finish_if_hedging_exhausted(now);
    }

    fn after_hedge(
        &mut self,
        attempt: AttemptId,
        end: AttemptEnd,
        policy: &HedgingPolicy,
        now: Instant,
    ) {
        // A hedge cut by the receive timeout is a non-fatal failure: it ends that hedge only.
        let timed_out = self.attempts[attempt.0 as usize].timed_out;
        if end.code == Code::Ok || !(timed_out || policy.non_fatal().contains(end.code)) {
            // OK or a fatal code wins: every other attempt is cancelled. (`account` charged a fatal code
            // that came with a "don't retry" pushback.)
            return self.finish(Outcome::Attempt(attempt), now);
        }
        match end.pushback {
            Pushback::DontRetry => {
                self.hedging_stopped = true;
                self.timers.hedge = None;
            }
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
    fn finish_if_hedging_exhausted(&mut self, now: Instant) {
        if self.finished || self.live > 0 {
            return;
        }
        let waiting = self.timers.hedge.is_some() && self.throttle_allows();
        if !waiting {
            if let Some(last) = self.last_ended {
                self.finish(self.outcome_of(last), now);
            }
        }
    }
}

impl Drop for RetryCall {
    fn drop(&mut self) {
        // Memory returns to the channel's pool whatever way the call ends.
        self.limits.pool.release(self.buffered_bytes);
    }
}
