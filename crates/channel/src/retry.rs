//! Everything for writing an application retry policy (gRFC A6 semantics, run by `grpc-retry`'s state
//! machine): the [`AppRetryPolicy`] trait, what a policy is told about a failed attempt
//! ([`FailedAttempt`], [`TrailerView`], [`Pushback`]) and answers ([`RetryDecision`]), the random source
//! it is handed ([`Rng`]), the ready-made policies, and which source's policy a call runs ([`Precedence`],
//! [`PolicySource`]).
//!
//! The ready-made policies and [`Precedence`] are also at the crate root, where applications set them
//! (`ChannelBuilder::retry_policy`, `Request::with_retry_policy`).
//!
//! [`FailedAttempt`] is what a policy reads about an attempt; the server's `google.rpc.RetryInfo` error
//! detail is [`crate::error_details::RetryInfo`].

pub use grpc_retry::{
    AppRetryPolicy, Exponential, FailedAttempt, Linear, NoRetry, NoTrailers, PolicySource,
    Precedence, Pushback, RetryDecision, Rng, TrailerView,
};
