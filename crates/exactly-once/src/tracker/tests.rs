//! The tracker's state machine, driven directly with injected time.

use std::collections::HashSet;

use bytes::Bytes;

use super::*;

fn id(client: u8, seq: u64, first_incomplete: u64) -> RequestId {
    RequestId {
        client_id: Bytes::from(vec![client; 16]),
        seq_no: seq,
        first_incomplete_seq_no: first_incomplete,
        attempt_no: 1,
    }
}

fn tracker(config: Config) -> (Tracker<&'static str>, Instant) {
    (Tracker::new(config), Instant::now())
}

#[test]
fn new_in_progress_completed_and_replayed() {
    let (mut t, now) = tracker(Config::default());
    assert_eq!(t.track(&id(1, 1, 1), now), Decision::New);
    assert_eq!(t.track(&id(1, 1, 1), now), Decision::InProgress);
    t.complete(&id(1, 1, 1), "done", 4, now);
    assert_eq!(t.track(&id(1, 1, 1), now), Decision::Completed("done"));
    let s = t.stats();
    assert_eq!((s.in_progress, s.completed, s.cached_bytes), (0, 1, 4));
    assert_eq!((s.executed, s.replayed), (1, 1));
    // Another client's same sequence number is another call.
    assert_eq!(t.track(&id(2, 1, 1), now), Decision::New);
}

#[test]
fn errors_are_not_cached_so_a_retry_executes_again() {
    let (mut t, now) = tracker(Config::default());
    assert_eq!(t.track(&id(1, 5, 5), now), Decision::New);
    t.fail(&id(1, 5, 5));
    assert_eq!(t.track(&id(1, 5, 5), now), Decision::New);
    assert_eq!(t.stats().in_progress, 1);
}

#[test]
fn the_watermark_drops_results_and_makes_lower_requests_stale() {
    let (mut t, now) = tracker(Config::default());
    for seq in 1..=3 {
        assert_eq!(t.track(&id(1, seq, 1), now), Decision::New);
        t.complete(&id(1, seq, 1), "r", 10, now);
    }
    assert_eq!(t.stats().completed, 3);
    // The client says 1 and 2 have ended.
    assert_eq!(t.track(&id(1, 4, 3), now), Decision::New);
    assert_eq!(t.stats().completed, 1);
    assert_eq!(t.stats().cached_bytes, 10);
    assert_eq!(
        t.track(&id(1, 2, 3), now),
        Decision::Stale(Stale::BelowWatermark)
    );
    assert_eq!(t.track(&id(1, 3, 3), now), Decision::Completed("r"));
    // An old watermark in a late request does not lower it.
    assert_eq!(
        t.track(&id(1, 1, 1), now),
        Decision::Stale(Stale::BelowWatermark)
    );
    assert_eq!(t.stats().stale_rejections, 2);
}

#[test]
fn an_in_progress_request_below_the_watermark_finishes_and_is_then_forgotten() {
    let (mut t, now) = tracker(Config::default());
    assert_eq!(t.track(&id(1, 1, 1), now), Decision::New);
    assert_eq!(t.track(&id(1, 2, 2), now), Decision::New);
    // Still in progress: a duplicate attaches, it is not stale.
    assert_eq!(t.track(&id(1, 1, 2), now), Decision::InProgress);
    t.complete(&id(1, 1, 2), "late", 4, now);
    assert_eq!(t.stats().completed, 0, "nobody will ask for it again");
    assert_eq!(
        t.track(&id(1, 1, 2), now),
        Decision::Stale(Stale::BelowWatermark)
    );
}

#[test]
fn responses_expire_by_age_into_tombstones_that_refuse_duplicates() {
    let config = Config {
        response_ttl: Duration::from_secs(10),
        ..Config::default()
    };
    let (mut t, now) = tracker(config);
    assert_eq!(t.track(&id(1, 1, 1), now), Decision::New);
    t.complete(&id(1, 1, 1), "r", 1, now);
    t.gc(now + Duration::from_secs(9));
    assert_eq!(
        t.track(&id(1, 1, 1), now + Duration::from_secs(9)),
        Decision::Completed("r")
    );
    t.gc(now + Duration::from_secs(10));
    assert_eq!(t.stats().completed, 0);
    assert_eq!(
        t.track(&id(1, 1, 1), now + Duration::from_secs(11)),
        Decision::Stale(Stale::ResponseDropped),
        "never executed twice"
    );
}

#[test]
fn the_memory_cap_expires_the_oldest_responses() {
    let config = Config {
        max_cached_bytes: 25,
        ..Config::default()
    };
    let (mut t, now) = tracker(config);
    for seq in 1..=3 {
        assert_eq!(t.track(&id(1, seq, 1), now), Decision::New);
        t.complete(&id(1, seq, 1), "r", 10, now);
    }
    let s = t.stats();
    assert_eq!((s.completed, s.cached_bytes), (2, 20));
    assert_eq!(
        t.track(&id(1, 1, 1), now),
        Decision::Stale(Stale::ResponseDropped)
    );
    assert_eq!(t.track(&id(1, 3, 1), now), Decision::Completed("r"));
}

#[test]
fn silent_clients_are_dropped_unless_busy() {
    let config = Config {
        client_ttl: Duration::from_secs(60),
        ..Config::default()
    };
    let (mut t, now) = tracker(config);
    assert_eq!(t.track(&id(1, 1, 1), now), Decision::New);
    t.complete(&id(1, 1, 1), "r", 3, now);
    assert_eq!(t.track(&id(2, 1, 1), now), Decision::New); // stays in progress
    t.gc(now + Duration::from_secs(61));
    let s = t.stats();
    assert_eq!((s.clients, s.completed, s.cached_bytes), (1, 0, 0));
    // The forgotten client's duplicate executes again: the documented limit.
    assert_eq!(
        t.track(&id(1, 1, 1), now + Duration::from_secs(62)),
        Decision::New
    );
}

fn track_and_complete(t: &mut Tracker<&'static str>, id: &RequestId, now: Instant) {
    assert_eq!(t.track(id, now), Decision::New, "seq {}", id.seq_no);
    t.complete(id, "r", 1, now);
}

#[test]
fn client_ids_of_another_length_are_refused_before_anything_is_stored() {
    let (mut t, now) = tracker(Config::default());
    for len in [0, 1, 15, 17, 1024] {
        let id = RequestId {
            client_id: Bytes::from(vec![9; len]),
            ..id(0, 1, 1)
        };
        assert_eq!(
            t.track(&id, now),
            Decision::Refused(Refusal::InvalidClientId { len })
        );
        // Completing or failing it is a no-op, not a panic.
        t.complete(&id, "r", 1, now);
        t.fail(&id);
    }
    let s = t.stats();
    assert_eq!((s.clients, s.executed, s.invalid_client_ids), (0, 0, 5));
    assert_eq!(
        Refusal::InvalidClientId { len: 3 }.code(),
        Code::InvalidArgument
    );
}

#[test]
fn past_max_clients_new_clients_are_refused_and_known_ones_served() {
    let config = Config {
        max_clients: 2,
        client_ttl: Duration::from_secs(60),
        ..Config::default()
    };
    let (mut t, now) = tracker(config);
    track_and_complete(&mut t, &id(1, 1, 1), now);
    track_and_complete(&mut t, &id(2, 1, 1), now);
    assert_eq!(
        t.track(&id(3, 1, 1), now),
        Decision::Refused(Refusal::TooManyClients)
    );
    assert_eq!(Refusal::TooManyClients.code(), Code::ResourceExhausted);
    // Known clients keep their state: a duplicate replays, a new call runs.
    assert_eq!(t.track(&id(1, 1, 1), now), Decision::Completed("r"));
    assert_eq!(t.track(&id(2, 2, 1), now), Decision::New);
    let s = t.stats();
    assert_eq!((s.clients, s.clients_refused), (2, 1));
    // Client 1 falls silent and is forgotten: its slot goes to the new client.
    let later = now + Duration::from_secs(61);
    t.gc(later);
    assert_eq!(t.stats().clients, 1, "client 2 has a call in progress");
    assert_eq!(t.track(&id(3, 1, 1), later), Decision::New);
}

#[test]
fn the_response_count_caps_empty_responses_too() {
    let config = Config {
        max_responses: 3,
        ..Config::default()
    };
    let (mut t, now) = tracker(config);
    for seq in 1..=10 {
        assert_eq!(t.track(&id(1, seq, 1), now), Decision::New);
        t.complete(&id(1, seq, 1), "", 0, now);
    }
    let s = t.stats();
    assert_eq!((s.completed, s.cached_bytes, s.tombstones), (3, 0, 7));
    assert_eq!(t.track(&id(1, 10, 1), now), Decision::Completed(""));
    assert_eq!(
        t.track(&id(1, 7, 1), now),
        Decision::Stale(Stale::ResponseDropped)
    );
}

/// (c): tombstones past the per-client cap are evicted lowest first into the forgotten mark; their
/// duplicates are still refused, never executed, and a sequence number above the mark still runs.
#[test]
fn an_evicted_tombstone_still_refuses_its_duplicates() {
    let config = Config {
        max_responses: 1,
        max_tombstones_per_client: 4,
        ..Config::default()
    };
    let (mut t, now) = tracker(config);
    // The watermark stays at 1: seq 1 never ends.
    assert_eq!(t.track(&id(1, 1, 1), now), Decision::New);
    for seq in 2..=11 {
        track_and_complete(&mut t, &id(1, seq, 1), now);
    }
    // 11 is cached; 2..=10 expired: 7..=10 are tombstones, 2..=6 evicted (the mark is 6).
    let s = t.stats();
    assert_eq!((s.completed, s.tombstones, s.tombstones_evicted), (1, 4, 5));
    let executed = s.executed;
    for seq in 2..=6 {
        assert_eq!(
            t.track(&id(1, seq, 1), now),
            Decision::Stale(Stale::Forgotten),
            "seq {seq}"
        );
    }
    for seq in 7..=10 {
        assert_eq!(
            t.track(&id(1, seq, 1), now),
            Decision::Stale(Stale::ResponseDropped),
            "seq {seq}"
        );
    }
    assert_eq!(t.track(&id(1, 11, 1), now), Decision::Completed("r"));
    assert_eq!(t.stats().executed, executed, "no duplicate executed");
    // Entries held below the mark are unaffected: seq 1 is still in progress, and completes.
    assert_eq!(t.track(&id(1, 1, 1), now), Decision::InProgress);
    t.complete(&id(1, 1, 1), "first", 5, now);
    assert_eq!(t.track(&id(1, 1, 1), now), Decision::Completed("first"));
    // A sequence number above the mark that was never seen runs.
    assert_eq!(t.track(&id(1, 12, 1), now), Decision::New);
    // The documented cost: one at or below the mark that never ran here is refused (never run twice).
    let mut other = Tracker::new(config);
    assert_eq!(other.track(&id(1, 1, 1), now), Decision::New);
    for seq in 3..=12 {
        track_and_complete(&mut other, &id(1, seq, 1), now);
    }
    assert_eq!(
        other.track(&id(1, 2, 1), now),
        Decision::Stale(Stale::Forgotten),
        "seq 2 never arrived before the mark passed it"
    );
}

/// The total tombstone cap evicts the oldest tombstones, whichever client holds them.
#[test]
fn the_total_tombstone_cap_evicts_the_oldest_first() {
    let config = Config {
        max_responses: 0,
        max_tombstones: 3,
        ..Config::default()
    };
    let (mut t, now) = tracker(config);
    for client in 1..=3 {
        assert_eq!(t.track(&id(client, 1, 1), now), Decision::New);
    }
    // Tombstones made in this order: (1, 2), (2, 2), (3, 2), (1, 3).
    track_and_complete(&mut t, &id(1, 2, 1), now);
    track_and_complete(&mut t, &id(2, 2, 1), now);
    track_and_complete(&mut t, &id(3, 2, 1), now);
    assert_eq!(t.stats().tombstones, 3);
    track_and_complete(&mut t, &id(1, 3, 1), now);
    let s = t.stats();
    assert_eq!((s.tombstones, s.tombstones_evicted), (3, 1));
    assert_eq!(
        t.track(&id(1, 2, 1), now),
        Decision::Stale(Stale::Forgotten)
    );
    assert_eq!(
        t.track(&id(1, 3, 1), now),
        Decision::Stale(Stale::ResponseDropped)
    );
    assert_eq!(
        t.track(&id(2, 2, 1), now),
        Decision::Stale(Stale::ResponseDropped)
    );
    assert_eq!(t.track(&id(2, 3, 1), now), Decision::New);
}

#[test]
fn the_watermark_and_forgotten_clients_release_tombstones() {
    let config = Config {
        max_responses: 0,
        client_ttl: Duration::from_secs(60),
        ..Config::default()
    };
    let (mut t, now) = tracker(config);
    for seq in 1..=5 {
        track_and_complete(&mut t, &id(1, seq, 1), now);
        track_and_complete(&mut t, &id(2, seq, 1), now);
    }
    assert_eq!(t.stats().tombstones, 10);
    // Client 1 says 1..=3 have ended.
    assert_eq!(t.track(&id(1, 6, 4), now), Decision::New);
    assert_eq!(t.stats().tombstones, 7);
    t.fail(&id(1, 6, 4));
    t.gc(now + Duration::from_secs(61));
    let s = t.stats();
    assert_eq!((s.clients, s.tombstones), (0, 0));
}

/// Records of entries the watermark dropped do not pile up in the completion queue until the TTL.
#[test]
fn the_completion_queue_stays_proportional_to_the_responses_kept() {
    let (mut t, now) = tracker(Config::default());
    for seq in 1..=100_000 {
        // A well-behaved client: every earlier call has ended.
        assert_eq!(t.track(&id(1, seq, seq), now), Decision::New);
        t.complete(&id(1, seq, seq), "r", 1, now);
    }
    assert_eq!(t.stats().completed, 1);
    assert!(
        t.completions.len() <= 2 + COMPACT_SLACK,
        "{} records for 1 response",
        t.completions.len()
    );
}

/// xorshift64: deterministic draws for the property test.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// (d): random interleavings of track, complete, fail and gc, with caps small enough that every one of
/// them evicts, never answer New for a request that completed or is running, always answer a completed
/// duplicate with its own response, always run a client's never-seen highest sequence number, and keep
/// every structure within its cap.
#[test]
fn random_interleavings_never_execute_a_completed_request_again() {
    const CLIENTS: u8 = 4;
    const SEQS: u64 = 60;
    let config = Config {
        response_ttl: Duration::from_millis(200),
        client_ttl: Duration::from_secs(1 << 30),
        max_cached_bytes: 40,
        max_responses: 6,
        max_tombstones: 10,
        max_tombstones_per_client: 4,
        max_clients: 3,
    };
    let mut answers: HashMap<&'static str, u64> = HashMap::new();
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut t: Tracker<u64> = Tracker::new(config);
        let mut now = Instant::now();
        let mut completed: HashSet<(u8, u64)> = HashSet::new();
        let mut running: Vec<(u8, u64)> = Vec::new();
        let mut highest: HashMap<u8, u64> = HashMap::new();
        for _ in 0..2_000 {
            now += Duration::from_millis(rng.below(20));
            match rng.below(10) {
                0..=4 => {
                    let client = rng.below(u64::from(CLIENTS)) as u8;
                    let seq = 1 + rng.below(SEQS);
                    let first_incomplete = 1 + rng.below(seq + 2);
                    let fresh = highest.get(&client).is_none_or(|&h| seq > h);
                    let decision = t.track(&id(client, seq, first_incomplete), now);
                    let key = (client, seq);
                    let kind = match &decision {
                        Decision::New => "new",
                        Decision::InProgress => "in progress",
                        Decision::Completed(_) => "completed",
                        Decision::Stale(Stale::BelowWatermark) => "below the watermark",
                        Decision::Stale(Stale::ResponseDropped) => "tombstone",
                        Decision::Stale(Stale::Forgotten) => "forgotten",
                        Decision::Refused(_) => "refused",
                    };
                    *answers.entry(kind).or_default() += 1;
                    match decision {
                        Decision::New => {
                            assert!(!completed.contains(&key), "seed {seed}: {key:?} ran twice");
                            assert!(!running.contains(&key), "seed {seed}: {key:?} runs twice");
                            running.push(key);
                        }
                        Decision::InProgress => assert!(running.contains(&key)),
                        Decision::Completed(r) => {
                            assert!(completed.contains(&key));
                            assert_eq!(r, u64::from(client) << 32 | seq);
                        }
                        Decision::Stale(_) => {
                            assert!(!fresh, "seed {seed}: fresh {key:?} stale")
                        }
                        Decision::Refused(why) => {
                            assert_eq!(why, Refusal::TooManyClients);
                            assert!(!highest.contains_key(&client));
                        }
                    }
                    if !matches!(decision, Decision::Refused(_)) {
                        let h = highest.entry(client).or_default();
                        *h = (*h).max(seq);
                    }
                }
                5..=6 if !running.is_empty() => {
                    let key = running.swap_remove(rng.below(running.len() as u64) as usize);
                    let response = u64::from(key.0) << 32 | key.1;
                    let bytes = rng.below(16) as usize;
                    t.complete(&id(key.0, key.1, 1), response, bytes, now);
                    completed.insert(key);
                }
                7 if !running.is_empty() => {
                    let key = running.swap_remove(rng.below(running.len() as u64) as usize);
                    t.fail(&id(key.0, key.1, 1));
                }
                _ => t.gc(now),
            }
            let s = t.stats();
            assert!(s.completed <= config.max_responses);
            assert!(s.cached_bytes <= config.max_cached_bytes);
            assert!(s.tombstones <= config.max_tombstones);
            assert!(s.clients <= config.max_clients);
            assert_eq!(s.in_progress, running.len());
            for client in t.clients.values() {
                assert!(client.tombstones.len() <= config.max_tombstones_per_client);
            }
            assert_eq!(
                s.tombstones,
                t.clients
                    .values()
                    .map(|c| c.tombstones.len())
                    .sum::<usize>()
            );
            assert!(t.completions.len() <= 2 * s.completed + COMPACT_SLACK + 1);
            assert!(t.tombstone_order.len() <= 2 * s.tombstones + COMPACT_SLACK + 1);
        }
    }
    // Every kind of answer came up.
    let kinds = [
        "new",
        "in progress",
        "completed",
        "below the watermark",
        "tombstone",
        "forgotten",
        "refused",
    ];
    for kind in kinds {
        assert!(answers.get(kind).is_some_and(|&n| n > 100), "{answers:?}");
    }
}
