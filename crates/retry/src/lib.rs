//! The sans-IO gRFC A6 state machine for gRPC client retries: retry and hedging policies, backoff with
//! jitter, retry throttling, server pushback, commit, replay buffering, transparent retries, and retry
//! statistics (gRFC A6; the A96 instruments).
//!
//! One [`RetryCall`] per RPC decides everything and performs nothing: the channel feeds it events (an
//! attempt's pick, response headers, its end with a status and a failure place, messages sent, timers) and
//! application commands (send, half-close, cancel), and executes the [`Action`]s it emits (start an attempt
//! with its `grpc-previous-rpc-attempts` and the addresses to avoid, send message n on attempt k, half-close,
//! cancel, commit, finish). Time arrives as `now: Instant` arguments and randomness through an injected
//! [`Rng`], so every behaviour can be tested as a timeline without sleeping. This crate depends on no I/O or
//! runtime crate, and knows nothing of subchannels or HTTP/2.
//!
//! ```text
//!                         new(): StartAttempt(0) [+ hedges]
//!                                     │
//!                                     ▼
//!        ┌──── retry timer ──▶  ATTEMPTING  ◀──── hedge timer / non-fatal status: StartAttempt(k)
//!        │                    (≥ 1 attempt live,
//!        │                     uncommitted)
//!        │                      │   │   │
//!        │   retryable status,  │   │   └── NotSent / first Unprocessed: transparent StartAttempt
//!        │   attempts and       │   │
//!        │   tokens left        │   └────── headers, or buffer overflow: Commit(k), cancel the others
//!        │                      ▼                       │
//!    BACKING OFF ◀──────────────┘                       ▼
//!   (no attempt live;                              COMMITTED ── attempt ends ──▶ FINISHED
//!    overflow here commits                                                        ▲
//!    the next attempt)                                                            │
//!        └──── fatal / not retryable / throttled / max attempts / pushback "don't retry" /
//!              deadline / cancel / drop / local error / retry past the deadline ──┘
//! ```
//!
//! The machine holds this life cycle as one enum with a variant per box, each holding what exists in it
//! (the attempts in flight while ATTEMPTING, when BACKING OFF began and whether an overflow commits the next
//! attempt, the committed attempt), not as flags.
//!
//! What it does beyond A6: a retry whose backoff would end after the deadline is not scheduled (the call
//! ends at once with the last status instead of a later DEADLINE_EXCEEDED); hedges ask to avoid the
//! addresses the call already used (the hint the 2017 A6 had). What it does not do: pick subchannels, talk
//! HTTP/2, parse service config JSON (see `grpc-service-config`), or rewrite A54 codes (the channel does that
//! before reporting a pick failure).
//!
//! The throttle's module docs explain why throttling exists.
//!
//! # Application policies
//!
//! Beside A6's service-config policies, the application may set its own [`AppRetryPolicy`] (built-ins
//! [`NoRetry`], [`Linear`], [`Exponential`], or a custom one deciding from a [`FailedAttempt`]). The same
//! state machine runs it, with every guard rail above; [`precedence`] says which policy a call runs when both
//! exist (the service config, unless the application opts in), and [`RetryCall::policy_source`] says which
//! one it got.
//!
//! # `perAttemptRecvTimeout`
//!
//! The extension of gRFC A44 to `retryPolicy` and `hedgingPolicy` (and the per-attempt timeout of an
//! application policy). Its semantics here:
//!
//! - The timer starts when the attempt starts (when [`Action::StartAttempt`] is emitted, so a slow pick
//!   counts), for each attempt anew, transparent retries included.
//! - It covers the attempt until the call commits to it (its response headers, or a replay-buffer
//!   overflow), as in gRPC C-core, which stops the timer at the response headers. Why not until the
//!   response is complete: after commit nothing can be retried, so cutting a committed attempt could only
//!   fail a call that is making progress, which would turn the timeout into a second, shorter deadline for
//!   long streams; the call's own deadline bounds the rest.
//! - An attempt that runs out is cancelled ([`Action::CancelAttempt`]) and counts as CANCELLED (A44; as in
//!   C-core). Not DEADLINE_EXCEEDED: that code means the call's own deadline passed, which it has not.
//!   Under a retry policy it is retried when `retryableStatusCodes` lists CANCELLED or DEADLINE_EXCEEDED
//!   (an empty list, which A44 allows with the timeout, cuts without retrying), within maxAttempts, the
//!   throttle (it costs a token) and the deadline; an application policy decides itself ([`FailedAttempt::timed_out`]; the built-ins retry it). If
//!   it is the call's last attempt, the call ends with [`LocalReason::PerAttemptRecvTimeout`] (CANCELLED).
//! - Under a hedging policy it ends that hedge only, as a non-fatal failure: the next hedge goes out at
//!   once; the call ends only when no hedge is left.
//! - The call's deadline still bounds everything: when both are due, the deadline wins
//!   (DEADLINE_EXCEEDED).

// Unit tests read the clock: they stand in for grpc-channel (clippy.toml bans it in the library).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod app_policy;
mod backoff;
mod buffer;
mod call;
mod policy;
pub mod precedence;
mod pushback;
pub mod stats;
mod throttle;

#[cfg(test)]
mod tests;

pub use app_policy::{
    AppRetryPolicy, AttemptDetails, Exponential, FailedAttempt, Linear, NoRetry, NoTrailers,
    RetryDecision, TrailerView,
};
pub use backoff::{base_delay, Backoff};
pub use buffer::{BufferPool, DEFAULT_PER_CALL_LIMIT, DEFAULT_PER_CHANNEL_LIMIT};
pub use call::{
    Action, AttemptEnd, AttemptId, CallConfig, LocalReason, Outcome, RetryCall, SharedLimits,
    DEFAULT_MAX_TRANSPARENT_RETRIES,
};
pub use grpc_base::{Address, FailurePlace, Rng, SplitMix64};
pub use policy::{
    CodeSet, HedgingPolicy, MaxAttempts, Policy, PolicyError, RetryPolicy, DEFAULT_MAX_ATTEMPTS_CAP,
};
pub use precedence::{PolicySource, Precedence};
pub use pushback::Pushback;
pub use stats::{CallStats, MethodStats};
pub use throttle::{Throttle, ThrottleConfig};
