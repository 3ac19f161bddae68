//! When to resolve (sans-IO): at once when the channel starts; after a success, only when the channel asks
//! (`resolve_now`), and no sooner than the minimum interval after the last success (30 s by default, as in
//! C-core and grpc-go); after a failure, again by itself after a backoff of 1 s × 1.6 up to 120 s with ±20 %
//! jitter (`doc/connection-backoff.md` numbers), reset by the next success.
//!
//! With a refresh interval (off by default, as in every gRPC stack), also by itself that long after the last
//! success (never sooner than the minimum interval): a Kubernetes headless Service that gains pods is seen
//! without waiting for a connection to fail.

use std::time::{Duration, Instant};

use grpc_retry::Rng;

/// The minimum interval between resolutions by default.
pub const DEFAULT_MIN_INTERVAL: Duration = Duration::from_secs(30);
const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
const MULTIPLIER: f64 = 1.6;
const MAX_BACKOFF: Duration = Duration::from_secs(120);
const JITTER: f64 = 0.2;

/// The re-resolution schedule of one resolver.
#[derive(Debug)]
pub struct Schedule {
    min_interval: Duration,
    last_success: Option<Instant>,
    requested: bool,
    /// Set after a failure: the time of the next attempt, and the backoff that produced it.
    retry_at: Option<Instant>,
    backoff: Duration,
    first: bool,
    /// Resolve again this long after a success, unasked.
    refresh: Option<Duration>,
}

impl Schedule {
    /// A schedule whose first resolution is due at once.
    pub fn new(min_interval: Duration) -> Schedule {
        Schedule {
            min_interval,
            last_success: None,
            requested: false,
            retry_at: None,
            backoff: INITIAL_BACKOFF,
            first: true,
            refresh: None,
        }
    }

    /// This schedule, resolving again by itself `interval` after each success (but never sooner than the
    /// minimum interval); `None` (the default) only when asked.
    #[must_use]
    pub fn with_refresh(mut self, interval: Option<Duration>) -> Schedule {
        self.refresh = interval;
        self
    }

    /// The channel asks for a new resolution (connection failure, GOAWAY, all addresses failed).
    pub fn resolve_now(&mut self) {
        self.requested = true;
    }

    /// When the next resolution is due (`now` if it is due already), if one is.
    pub fn next(&self, now: Instant) -> Option<Instant> {
        let due = if let Some(at) = self.retry_at {
            at
        } else if self.first {
            now
        } else {
            // An interval too large for an `Instant` (`Duration::MAX`, "never") is never due.
            let after = |wait: Duration| match self.last_success {
                None => Some(now),
                Some(last) => last.checked_add(wait),
            };
            let requested = self.requested.then(|| after(self.min_interval)).flatten();
            let refresh = self
                .refresh
                .and_then(|every| after(every.max(self.min_interval)));
            match (requested, refresh) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => return None,
            }
        };
        Some(due.max(now))
    }

    /// Whether a resolution is due at `now`.
    pub fn is_due(&self, now: Instant) -> bool {
        self.next(now).is_some_and(|at| at <= now)
    }

    /// A resolution started at `now` succeeded.
    pub fn succeeded(&mut self, now: Instant) {
        self.first = false;
        self.requested = false;
        self.last_success = Some(now);
        self.retry_at = None;
        self.backoff = INITIAL_BACKOFF;
    }

    /// A resolution failed at `now`: the next one is due after the backoff.
    pub fn failed(&mut self, now: Instant, rng: &mut dyn Rng) -> Duration {
        self.first = false;
        self.requested = false;
        let base = self.backoff;
        let jittered = base.mul_f64(1.0 - JITTER + 2.0 * JITTER * rng.uniform());
        // At most 144 s: never past the end of `Instant` in practice, and "never" if it were.
        self.retry_at = now.checked_add(jittered);
        self.backoff = base.mul_f64(MULTIPLIER).min(MAX_BACKOFF);
        jittered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use grpc_retry::SplitMix64;

    #[test]
    fn first_resolution_is_due_at_once_then_only_on_request_and_rate_limited() {
        let t0 = Instant::now();
        let mut s = Schedule::new(Duration::from_secs(30));
        assert!(s.is_due(t0));
        s.succeeded(t0);
        assert!(
            !s.is_due(t0 + Duration::from_secs(3600)),
            "no polling without a request"
        );
        s.resolve_now();
        assert!(!s.is_due(t0 + Duration::from_secs(29)));
        assert_eq!(s.next(t0), Some(t0 + Duration::from_secs(30)));
        assert!(s.is_due(t0 + Duration::from_secs(30)));
        s.succeeded(t0 + Duration::from_secs(40));
        s.resolve_now();
        assert_eq!(s.next(t0), Some(t0 + Duration::from_secs(70)));
    }

    #[test]
    fn a_refresh_interval_resolves_again_unasked_never_sooner_than_the_minimum_interval() {
        let t0 = Instant::now();
        let mut s =
            Schedule::new(Duration::from_secs(30)).with_refresh(Some(Duration::from_secs(60)));
        assert!(s.is_due(t0));
        s.succeeded(t0);
        assert_eq!(s.next(t0), Some(t0 + Duration::from_secs(60)));
        assert!(!s.is_due(t0 + Duration::from_secs(59)));
        assert!(s.is_due(t0 + Duration::from_secs(60)));
        // A request comes sooner (the minimum interval), and a success restarts both.
        s.resolve_now();
        assert_eq!(s.next(t0), Some(t0 + Duration::from_secs(30)));
        let t1 = t0 + Duration::from_secs(45);
        s.succeeded(t1);
        assert_eq!(s.next(t1), Some(t1 + Duration::from_secs(60)));
        // A failure's backoff wins until the next success.
        let mut rng = SplitMix64::new(1);
        let wait = s.failed(t1, &mut rng);
        assert_eq!(s.next(t1), Some(t1 + wait));
        // A refresh shorter than the minimum interval is raised to it.
        let mut s =
            Schedule::new(Duration::from_secs(30)).with_refresh(Some(Duration::from_secs(5)));
        s.succeeded(t0);
        assert_eq!(s.next(t0), Some(t0 + Duration::from_secs(30)));
        // Off (the default): only when asked.
        let mut s = Schedule::new(Duration::from_secs(30)).with_refresh(None);
        s.succeeded(t0);
        assert_eq!(s.next(t0 + Duration::from_secs(3600)), None);
    }

    #[test]
    fn intervals_too_large_for_an_instant_mean_never() {
        let t0 = Instant::now();
        let mut s = Schedule::new(Duration::MAX).with_refresh(Some(Duration::MAX));
        assert!(s.is_due(t0));
        s.succeeded(t0);
        assert_eq!(s.next(t0), None);
        s.resolve_now();
        assert_eq!(s.next(t0 + Duration::from_secs(3600)), None);
        // A huge refresh with an ordinary minimum interval: a request still comes after the interval.
        let mut s = Schedule::new(Duration::from_secs(1)).with_refresh(Some(Duration::MAX));
        s.succeeded(t0);
        assert_eq!(s.next(t0), None);
        s.resolve_now();
        assert_eq!(s.next(t0), Some(t0 + Duration::from_secs(1)));
    }

    #[test]
    fn failures_back_off_from_one_second_by_1_6_up_to_120_with_jitter() {
        let t0 = Instant::now();
        let mut s = Schedule::new(Duration::from_secs(30));
        let mut rng = SplitMix64::new(9);
        let mut now = t0;
        let mut bases = Vec::new();
        let mut base = 1.0f64;
        for _ in 0..14 {
            let d = s.failed(now, &mut rng).as_secs_f64();
            assert!(
                d >= base * 0.8 - 1e-9 && d <= base * 1.2 + 1e-9,
                "{d} vs {base}"
            );
            assert!(!s.is_due(now));
            now += Duration::from_secs_f64(d);
            assert!(s.is_due(now), "retried by itself, without a request");
            bases.push(base);
            base = (base * 1.6).min(120.0);
        }
        for (got, want) in bases.iter().zip([1.0, 1.6, 2.56, 4.096]) {
            assert!((got - want).abs() < 1e-9, "{got} vs {want}");
        }
        assert_eq!(*bases.last().expect("bases"), 120.0);
        s.succeeded(now);
        let d = s.failed(now, &mut rng).as_secs_f64();
        assert!((0.8..=1.2).contains(&d), "backoff reset by a success: {d}");
    }
}
