//! Client-side health checking (gRFC A17, with A61's rule on which policies use it): the health of a
//! subchannel's current connection, as the `grpc.health.v1.Health/Watch` stream the channel runs on it
//! last reported. It is an overlay on the subchannel's connectivity, like ejection: a subchannel whose
//! connection is READY but whose [`Health`] is not [`Health::Serving`] looks CONNECTING ([`Health::Unknown`],
//! the first answer is awaited) or TRANSIENT_FAILURE ([`Health::NotServing`]) to its policy, and its
//! connection stays open. Ejection wins over health: an ejected subchannel looks TRANSIENT_FAILURE whatever
//! its health.
//!
//! Which policies use it (A61): only those that balance over several subchannels, here `round_robin`, and
//! only once the channel turned it on with [`LbPolicy::set_health_checking`](crate::LbPolicy::set_health_checking)
//! (the service config's `healthCheckConfig` and no local veto). A top-level `pick_first` never health
//! checks: it ignores the overlay, whatever the channel reports.
//!
//! Health belongs to a connection: it is [`Health::Unknown`] whenever a subchannel becomes READY (a new
//! connection starts a new Watch) and is reset when the connection is lost. A report for a subchannel that
//! is not READY is ignored.
//!
//! The channel maps the Watch to [`Health`] (A17):
//! * a response `SERVING` → [`Health::Serving`]; any other status (`NOT_SERVING`, `SERVICE_UNKNOWN`,
//!   `UNKNOWN`, an unparseable message) → [`Health::NotServing`];
//! * the call ends with `UNIMPLEMENTED` → [`Health::Serving`] (the server has no health service; log it once,
//!   and do not watch that connection again);
//! * the call ends with another status → [`Health::NotServing`], then [`Health::Unknown`] when the retry
//!   starts (backoff 1 s, ×1.6, ±20 %, 120 s; at once if the ended call received a message).
//!
//! [`WatchRetry`] is the restart rule, [`health_of_serving_status`] the answer's mapping.
//!
//! Not here: the Watch stream and its cancellation when the connection leaves READY (the channel's
//! `health.rs`), the service name (`grpc-service-config`), the unary `Check` method.

use std::time::Instant;

use grpc_base::Rng;

use crate::{BackoffConfig, ConnectionBackoff};

/// What the health Watch on a subchannel's current connection last said.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Health {
    /// No answer yet on this connection (or a new Watch is starting): a READY subchannel looks CONNECTING.
    #[default]
    Unknown,
    /// The backend serves the watched service: the subchannel shows its real state.
    Serving,
    /// The backend does not serve it (or the Watch failed): a READY subchannel looks TRANSIENT_FAILURE.
    NotServing,
}

/// A `HealthCheckResponse.status` value (`grpc.health.v1`), as A17 maps it: `SERVING` (1) is
/// [`Health::Serving`]; every other value (`UNKNOWN` 0, `NOT_SERVING` 2, `SERVICE_UNKNOWN` 3, or one this
/// client does not know) is [`Health::NotServing`].
pub fn health_of_serving_status(status: i32) -> Health {
    if status == 1 {
        Health::Serving
    } else {
        Health::NotServing
    }
}

/// How a health Watch call on a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchEnd {
    /// UNIMPLEMENTED: the server has no health service.
    Unimplemented,
    /// Any other end (a status, a reset, an unparseable answer), and whether the call had received at
    /// least one answer.
    Failed {
        /// The call received at least one response message.
        answered: bool,
    },
}

/// What to do after a Watch call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchNext {
    /// Stop watching this connection; it counts as [`Health::Serving`] (A17: a server without the health
    /// service is healthy).
    Stop,
    /// Report [`Health::NotServing`] now, and start the next Watch at this instant (reporting
    /// [`Health::Unknown`] when it starts).
    RetryAt(Instant),
}

/// The restart rule of one connection's health Watch (A17): after a call that received an answer, the
/// next starts at once and the backoff starts over; after one that received none, it starts after the
/// connection backoff (1 s, then ×1.6 with ±20 % jitter, up to 120 s), counted from the failure.
#[derive(Clone, Debug)]
pub struct WatchRetry {
    backoff: ConnectionBackoff,
}

impl Default for WatchRetry {
    fn default() -> Self {
        WatchRetry::new(BackoffConfig::default())
    }
}

impl WatchRetry {
    /// The rule with these backoff parameters (`min_connect_timeout` is not used).
    pub fn new(config: BackoffConfig) -> WatchRetry {
        WatchRetry {
            backoff: ConnectionBackoff::new(config),
        }
    }

    /// The Watch call ended at `now` as `end`: what next.
    pub fn ended(&mut self, end: WatchEnd, now: Instant, rng: &mut dyn Rng) -> WatchNext {
        match end {
            WatchEnd::Unimplemented => WatchNext::Stop,
            WatchEnd::Failed { answered: true } => {
                self.backoff.reset();
                WatchNext::RetryAt(now)
            }
            WatchEnd::Failed { answered: false } => {
                let (next_start, _deadline) = self.backoff.attempt(now, rng);
                WatchNext::RetryAt(next_start)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grpc_base::SplitMix64;
    use std::time::Duration;

    #[test]
    fn only_serving_is_serving() {
        assert_eq!(health_of_serving_status(1), Health::Serving);
        for other in [0, 2, 3, 4, -1, i32::MAX] {
            assert_eq!(
                health_of_serving_status(other),
                Health::NotServing,
                "{other}"
            );
        }
    }

    #[test]
    fn unimplemented_stops_watching() {
        let mut retry = WatchRetry::default();
        let mut rng = SplitMix64::new(1);
        assert_eq!(
            retry.ended(WatchEnd::Unimplemented, Instant::now(), &mut rng),
            WatchNext::Stop
        );
    }

    /// A timeline: failures without answers back off 1 s, then ×1.6 ±20 % up to 120 s; a call that got an
    /// answer is followed at once, and the backoff starts over at 1 s.
    #[test]
    fn failures_back_off_and_an_answered_call_restarts_at_once() {
        let mut retry = WatchRetry::default();
        let mut rng = SplitMix64::new(42);
        let t0 = Instant::now();
        let silent = WatchEnd::Failed { answered: false };
        assert_eq!(
            retry.ended(silent, t0, &mut rng),
            WatchNext::RetryAt(t0 + Duration::from_secs(1)),
            "the first wait is 1 s, unjittered"
        );
        let mut base = 1.0f64;
        let mut now = t0 + Duration::from_secs(1);
        for _ in 0..14 {
            base = (base * 1.6).min(120.0);
            let WatchNext::RetryAt(at) = retry.ended(silent, now, &mut rng) else {
                panic!("a failure is retried");
            };
            let wait = (at - now).as_secs_f64();
            assert!(
                (base * 0.8 - 1e-6..=base * 1.2 + 1e-6).contains(&wait),
                "{wait} s after a {base} s base"
            );
            now = at;
        }
        assert_eq!(base, 120.0, "capped at 120 s");
        assert_eq!(
            retry.ended(WatchEnd::Failed { answered: true }, now, &mut rng),
            WatchNext::RetryAt(now),
            "an answered call is restarted at once"
        );
        assert_eq!(
            retry.ended(silent, now, &mut rng),
            WatchNext::RetryAt(now + Duration::from_secs(1)),
            "and the backoff started over"
        );
    }
}
