//! Throttle accounting (A6: "every outgoing RPC regardless of method") covers every call, whatever its
//! policy and whether retries are enabled. Each attempt's end is charged at most once: an OK gives back
//! `tokenRatio`; a qualifying failure costs one token, where qualifying means a code in the *configured*
//! policy's `retryableStatusCodes` / `nonFatalStatusCodes` (still so when retries are disabled) or a "don't
//! retry" pushback, fatal code or not; the committed attempt's end counts too. Transparent retries
//! (`NotSent`, a transparently retried `Unprocessed`), `Dropped` and `Local` failures never touch the
//! throttle, and a call without a policy only pays for "don't retry" pushbacks.

use grpc_code::Code;

use super::{AttemptEnd, RetryCall};
use crate::pushback::Pushback;

impl RetryCall {
    pub(super) fn charge_failure(&self) {
        if let Some(t) = &self.limits.throttle {
            t.record_failure();
        }
    }

    pub(super) fn throttle_allows(&self) -> bool {
        self.limits
            .throttle
            .as_ref()
            .is_none_or(|t| t.allows_retry())
    }

    /// Throttle accounting of one attempt's end (A6: every outgoing RPC, whatever its method or policy): OK
    /// gives back `tokenRatio`; a qualifying failure (a retryable / non-fatal code of the configured policy,
    /// even with retries disabled, or a "don't retry" pushback) costs one token; anything else costs nothing.
    pub(super) fn account(&self, end: AttemptEnd) {
        let Some(t) = &self.limits.throttle else {
            return;
        };
        if end.code == Code::Ok {
            t.record_success();
        } else if end.pushback == Pushback::DontRetry || self.qualifying.contains(end.code) {
            t.record_failure();
        }
    }
}
