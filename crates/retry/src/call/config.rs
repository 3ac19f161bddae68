//! What a call is given when it starts: its own settings ([`CallConfig`]) and the limits it shares with other
//! calls ([`SharedLimits`]).

use std::sync::Arc;
use std::time::Instant;

use crate::app_policy::AppRetryPolicy;
use crate::buffer::{BufferPool, DEFAULT_PER_CALL_LIMIT};
use crate::policy::Policy;
use crate::precedence::Precedence;
use crate::throttle::Throttle;

/// The safety cap on transparent retries of one call (grpc-java's number): past it the call fails INTERNAL.
pub const DEFAULT_MAX_TRANSPARENT_RETRIES: u32 = 1000;

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
