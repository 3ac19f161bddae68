//! Property tests over random event sequences: whatever happens, the state machine keeps A6's invariants.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use grpc_code::Code;
use proptest::prelude::*;

use super::*;

#[derive(Clone, Debug)]
enum Op {
    End {
        attempt: u8,
        code: u8,
        place: u8,
        pushback: u8,
    },
    Headers(u8),
    Send(u16),
    Sent {
        attempt: u8,
        index: u8,
    },
    Picked {
        attempt: u8,
        addr: u8,
    },
    HalfClose,
    Cancel,
    Sleep(u16),
    Timer,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..10, code(), 0u8..6, 0u8..4).prop_map(|(attempt, code, place, pushback)| Op::End { attempt, code, place, pushback }),
        1 => (0u8..10).prop_map(Op::Headers),
        3 => (0u16..400).prop_map(Op::Send),
        2 => (0u8..10, 0u8..8).prop_map(|(attempt, index)| Op::Sent { attempt, index }),
        1 => (0u8..10, 0u8..4).prop_map(|(attempt, addr)| Op::Picked { attempt, addr }),
        1 => Just(Op::HalfClose),
        1 => Just(Op::Cancel),
        2 => (0u16..500).prop_map(Op::Sleep),
        3 => Just(Op::Timer),
    ]
}

/// Mostly the retryable / non-fatal codes, so that retries and hedges really happen.
fn code() -> impl Strategy<Value = u8> {
    prop_oneof![4 => Just(14u8), 2 => Just(13u8), 1 => Just(0u8), 2 => 0u8..17]
}

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![
        Just(Policy::None),
        (2u64..7, 1u64..200, 1u64..400, 1u32..40).prop_map(|(max, initial, maxb, mult)| {
            retry_policy(
                max,
                initial,
                maxb,
                f64::from(mult) / 10.0,
                &[Code::Unavailable, Code::Internal],
            )
        }),
        (2u64..7, 0u64..200).prop_map(|(max, delay)| hedging_policy(
            max,
            delay,
            &[Code::Unavailable, Code::Internal]
        )),
    ]
}

fn place(n: u8) -> FailurePlace {
    [
        FailurePlace::Processed,
        FailurePlace::NotSent,
        FailurePlace::Unprocessed,
        FailurePlace::PickFailed,
        FailurePlace::Dropped,
        FailurePlace::Local,
    ][n as usize % 6]
}

fn pushback(n: u8) -> Pushback {
    match n {
        0 | 1 => Pushback::None,
        2 => Pushback::DontRetry,
        _ => Pushback::RetryAfter(Duration::from_millis(37)),
    }
}

/// Checks the actions of one step against what came before.
#[derive(Default)]
struct Checker {
    finished: usize,
    cancelled: HashSet<u32>,
    started: HashSet<u32>,
    committed: Option<u32>,
    policy_starts: u32,
    last_previous: Option<u32>,
}

impl Checker {
    fn check(&mut self, actions: &[Action]) -> Result<(), TestCaseError> {
        for a in actions {
            prop_assert_eq!(self.finished, 0, "an action after Finish: {:?}", a);
            let target = match a {
                Action::StartAttempt { attempt, .. } => Some(attempt.0),
                Action::SendMessage { attempt, .. }
                | Action::HalfClose { attempt }
                | Action::CancelAttempt { attempt }
                | Action::Commit { attempt } => Some(attempt.0),
                Action::Finish(_) => None,
            };
            if let Some(id) = target {
                prop_assert!(
                    !self.cancelled.contains(&id),
                    "action for cancelled attempt {id}: {a:?}"
                );
            }
            match a {
                Action::StartAttempt {
                    attempt,
                    previous_attempts,
                    transparent,
                    ..
                } => {
                    prop_assert!(
                        self.started.insert(attempt.0),
                        "attempt {} started twice",
                        attempt.0
                    );
                    prop_assert!(self.committed.is_none(), "an attempt started after commit");
                    if !transparent {
                        self.policy_starts += 1;
                        if let Some(prev) = self.last_previous {
                            prop_assert!(
                                *previous_attempts > prev,
                                "grpc-previous-rpc-attempts must increase"
                            );
                        }
                        self.last_previous = Some(*previous_attempts);
                    }
                }
                Action::SendMessage { attempt, .. } => {
                    if let Some(c) = self.committed {
                        prop_assert_eq!(attempt.0, c, "sent on a losing attempt after commit");
                    }
                }
                Action::CancelAttempt { attempt } => {
                    self.cancelled.insert(attempt.0);
                }
                Action::Commit { attempt } => {
                    prop_assert!(self.committed.is_none(), "committed twice");
                    self.committed = Some(attempt.0);
                }
                Action::HalfClose { .. } => {}
                Action::Finish(_) => self.finished += 1,
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn invariants_hold_for_any_event_sequence(
        policy in policy(),
        ops in prop::collection::vec(op(), 0..60),
        per_call in 0usize..1200,
        pool_limit in 0usize..1500,
        throttled in any::<bool>(),
        max_tokens in 1u64..10,
        ratio in 1u64..2000,
        seed in any::<u64>(),
        deadline_ms in prop::option::of(1u64..3000),
    ) {
        let max_attempts = match &policy {
            Policy::Retry(p) => p.max_attempts().get(),
            Policy::Hedging(p) => p.max_attempts().get(),
            Policy::None => 1,
        };
        let start = Instant::now();
        let deadline = deadline_ms.map(|ms| start + Duration::from_millis(ms));
        let shared = SharedLimits { throttle: throttled.then(|| throttle(max_tokens, ratio)), pool: pool(pool_limit) };
        let config = CallConfig {
            policy,
            deadline,
            per_call_buffer_limit: per_call,
            ..CallConfig::default()
        };
        let mut t = Timeline::starting_at(config, shared.clone(), start, seed);
        let mut checker = Checker::default();
        let check_state = |t: &Timeline| -> Result<(), TestCaseError> {
            let tokens = shared.throttle.as_ref().map_or(0, |t| t.milli_tokens());
            prop_assert!(u64::from(tokens) <= max_tokens * 1000);
            prop_assert!(t.call.buffered_bytes() <= per_call, "per-call limit");
            prop_assert!(shared.pool.used() <= pool_limit, "channel limit");
            if t.call.committed().is_some() {
                // After commit no retry or hedge is scheduled: only the deadline may remain.
                let timer = t.call.poll_timeout();
                prop_assert!(timer.is_none() || timer == deadline, "a timer after commit: {timer:?}");
            }
            Ok(())
        };
        // Ops name attempts relative to the most recent ones (so long retry chains happen), and sometimes by
        // raw id (so stale and unknown ids are exercised too).
        let mut recent: Vec<u32> = Vec::new();
        let resolve = |recent: &Vec<u32>, k: u8| -> u32 {
            match recent.len() {
                0 => u32::from(k),
                n if k < 6 => recent[n - 1 - (usize::from(k) % n.min(3))],
                _ => u32::from(k - 6),
            }
        };
        let step = |t: &mut Timeline, checker: &mut Checker, recent: &mut Vec<u32>| -> Result<(), TestCaseError> {
            let actions = t.raw_actions();
            for a in &actions {
                if let Action::StartAttempt { attempt, .. } = a {
                    recent.push(attempt.0);
                }
            }
            checker.check(&actions)
        };
        step(&mut t, &mut checker, &mut recent)?;
        for op in ops {
            match op {
                Op::End { attempt, code, place: p, pushback: pb } => {
                    let tokens = |s: &SharedLimits| s.throttle.as_ref().map(|t| t.milli_tokens());
                    let before = tokens(&shared);
                    t.end(
                        resolve(&recent, attempt),
                        AttemptEnd { code: Code::from_i32(i32::from(code)).unwrap_or(Code::Ok), place: place(p), pushback: pushback(pb) },
                    );
                    if matches!(place(p), FailurePlace::Local | FailurePlace::Dropped) {
                        prop_assert_eq!(tokens(&shared), before, "a {:?} end changed the throttle", place(p));
                    }
                }
                Op::Headers(a) => t.headers(resolve(&recent, a)),
                Op::Send(n) => t.send(usize::from(n)),
                Op::Sent { attempt, index } => t.sent(resolve(&recent, attempt), usize::from(index)),
                Op::Picked { attempt, addr } => t.picked(resolve(&recent, attempt), addr),
                Op::HalfClose => t.call.half_close(),
                Op::Cancel => t.call.cancel(t.now),
                Op::Sleep(ms) => t.sleep(u64::from(ms)),
                Op::Timer => { t.advance(); }
            }
            step(&mut t, &mut checker, &mut recent)?;
            check_state(&t)?;
        }
        // Whatever is left, the call ends exactly once.
        t.call.cancel(t.now);
        step(&mut t, &mut checker, &mut recent)?;
        prop_assert_eq!(checker.finished, 1, "exactly one final outcome");
        prop_assert!(checker.policy_starts <= max_attempts, "{} attempts > maxAttempts {}", checker.policy_starts, max_attempts);
        prop_assert_eq!(shared.pool.used(), 0, "buffer memory returned to the pool");
        prop_assert_eq!(t.call.live_attempts(), 0);
        // A6 statistics: failed retry attempts are among those made, and each retry attempt is in one bucket.
        let stats = t.call.stats();
        prop_assert!(stats.failed_retries <= stats.retries + stats.hedges, "{:?}", stats);
        let mut method = crate::stats::MethodStats::default();
        method.record(stats);
        prop_assert_eq!(method.retry_count_buckets.iter().sum::<u64>(), method.retries + method.hedges);
    }
}
