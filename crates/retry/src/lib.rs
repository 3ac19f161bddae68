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
//! What it does beyond A6: a retry whose backoff would end after the deadline is not scheduled (the call
//! ends at once with the last status instead of a later DEADLINE_EXCEEDED); hedges ask to avoid the
//! addresses the call already used (the hint the 2017 A6 had). What it does not do: pick subchannels, talk
//! HTTP/2, parse service config JSON (see `grpc-service-config`), or rewrite A54 codes (the channel does that
//! before reporting a pick failure).
//!
//! The throttle's module docs explain why throttling exists.

mod backoff;
mod buffer;
mod call;
mod policy;
mod pushback;
pub mod stats;
mod throttle;

#[cfg(test)]
mod tests;

pub use backoff::{base_delay, Backoff, Rng, SplitMix64};
pub use buffer::{BufferPool, DEFAULT_PER_CALL_LIMIT, DEFAULT_PER_CHANNEL_LIMIT};
pub use call::{
    Action, AttemptEnd, AttemptId, CallConfig, FailurePlace, LocalReason, Outcome, RetryCall,
    Shared, DEFAULT_MAX_TRANSPARENT_RETRIES,
};
pub use policy::{
    CodeSet, HedgingPolicy, MaxAttempts, Policy, PolicyError, RetryPolicy, DEFAULT_MAX_ATTEMPTS_CAP,
};
pub use pushback::Pushback;
pub use stats::{CallStats, MethodStats};
pub use throttle::{Throttle, ThrottleConfig};
