//! The result tracker's state machine (sans-IO: time comes in as `now`), after Kudu's `ResultTracker`.
//!
//! Per client, per sequence number, one entry:
//!
//! ```text
//!             track (first time)                complete (success)
//!   (none) ─────────────────────▶ IN_PROGRESS ──────────────────────▶ COMPLETED ──(TTL or memory cap)──▶ EXPIRED
//!      ▲                              │                                    │                              │
//!      └──────── fail (error) ────────┘          watermark passes it ──────┴──────────────────────────────┴──▶ (gone)
//! ```
//!
//! What [`Tracker::track`] answers for a request:
//! * **New**: nothing is known of it (or its earlier attempt failed): the caller executes it, then calls
//!   [`Tracker::complete`] or [`Tracker::fail`];
//! * **InProgress**: another attempt is executing it: wait for that one to end, then track again;
//! * **Completed**: it succeeded before: answer with the cached response, without executing;
//! * **Stale**: below the client's watermark (the client said it had ended), or its cached response was
//!   dropped (age, memory): answer with an error, never execute again.
//!
//! Only successes are cached: a failed execution leaves no entry, so the client may retry it (a handler must
//! therefore fail only when it changed nothing). Garbage collection: each request carries its client's
//! first incomplete sequence number, and entries below it are dropped; a completed response older than
//! `response_ttl`, or the oldest ones when cached bytes pass `max_cached_bytes`, become EXPIRED tombstones
//! (a few bytes: a late duplicate is refused, not executed twice); a client unheard of for `client_ttl`,
//! with nothing in progress, is dropped with all its state. After that, a duplicate from it executes again:
//! the limit of the design, as in Kudu.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::request_id::RequestId;

/// How long results and clients are remembered, and how much memory responses may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// How long a completed response is kept for duplicates (Kudu: `remember_responses_ttl`).
    pub response_ttl: Duration,
    /// How long a client that sends nothing is remembered (Kudu: `remember_clients_ttl`).
    pub client_ttl: Duration,
    /// The most bytes of cached responses (by the sizes given to [`Tracker::complete`]).
    pub max_cached_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            response_ttl: Duration::from_secs(600),
            client_ttl: Duration::from_secs(3600),
            max_cached_bytes: 64 << 20,
        }
    }
}

/// Why a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stale {
    /// Its sequence number is below the client's first incomplete one: the client said it had ended.
    BelowWatermark,
    /// It completed, but its response is no longer kept (age or memory cap).
    ResponseDropped,
}

/// What to do with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision<R> {
    /// Execute it.
    New,
    /// Another attempt is executing it.
    InProgress,
    /// It succeeded before: this is its response.
    Completed(R),
    /// Refuse it.
    Stale(Stale),
}

/// Counters, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests being executed.
    pub in_progress: usize,
    /// Completed responses kept.
    pub completed: usize,
    /// Their bytes.
    pub cached_bytes: usize,
    /// Clients remembered.
    pub clients: usize,
    /// Requests executed (New answers) so far.
    pub executed: u64,
    /// Duplicates answered from the cache so far.
    pub replayed: u64,
    /// Requests refused as stale so far.
    pub stale_rejections: u64,
}

enum Entry<R> {
    InProgress,
    Completed {
        response: R,
        bytes: usize,
        at: Instant,
    },
    Expired,
}

struct Client<R> {
    entries: BTreeMap<u64, Entry<R>>,
    /// Every sequence number below this has ended (the highest watermark the client sent).
    watermark: u64,
    last_heard: Instant,
}

/// The tracker (see the module docs). `R` is a successful response, cloned for each duplicate (use
/// something cheap to clone, like `Bytes`).
pub struct Tracker<R> {
    config: Config,
    clients: HashMap<Bytes, Client<R>>,
    /// Completed entries in completion order, for the memory cap and the TTL (entries already gone are
    /// skipped when met).
    order: VecDeque<(Instant, Bytes, u64)>,
    stats: Stats,
}

impl<R: Clone> Tracker<R> {
    /// An empty tracker.
    pub fn new(config: Config) -> Tracker<R> {
        Tracker {
            config,
            clients: HashMap::new(),
            order: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// Decides what to do with a request (and records it as in progress when it is new).
    pub fn track(&mut self, id: &RequestId, now: Instant) -> Decision<R> {
        let client = self
            .clients
            .entry(id.client_id.clone())
            .or_insert_with(|| Client {
                entries: BTreeMap::new(),
                watermark: 0,
                last_heard: now,
            });
        client.last_heard = now;
        // The watermark only rises; a request never lowers it below its own sequence number's meaning.
        let watermark = id.first_incomplete_seq_no.min(id.seq_no);
        if watermark > client.watermark {
            client.watermark = watermark;
            let keep = client.entries.split_off(&watermark);
            let dropped = std::mem::replace(&mut client.entries, keep);
            for (seq, entry) in dropped {
                match entry {
                    // Still executing: keep it until it ends (its completion is then dropped).
                    Entry::InProgress => {
                        client.entries.insert(seq, Entry::InProgress);
                    }
                    Entry::Completed { bytes, .. } => {
                        self.stats.completed -= 1;
                        self.stats.cached_bytes -= bytes;
                    }
                    Entry::Expired => {}
                }
            }
        }
        if id.seq_no < client.watermark && !client.entries.contains_key(&id.seq_no) {
            self.stats.stale_rejections += 1;
            return Decision::Stale(Stale::BelowWatermark);
        }
        match client.entries.get(&id.seq_no) {
            None => {
                client.entries.insert(id.seq_no, Entry::InProgress);
                self.stats.in_progress += 1;
                self.stats.executed += 1;
                Decision::New
            }
            Some(Entry::InProgress) => Decision::InProgress,
            Some(Entry::Completed { response, .. }) => {
                self.stats.replayed += 1;
                Decision::Completed(response.clone())
            }
            Some(Entry::Expired) => {
                self.stats.stale_rejections += 1;
                Decision::Stale(Stale::ResponseDropped)
            }
        }
    }

    /// Records a successful execution of a request `track` answered New: its response (of `bytes` bytes,
    /// for the memory cap) is kept for duplicates.
    pub fn complete(&mut self, id: &RequestId, response: R, bytes: usize, now: Instant) {
        let Some(client) = self.clients.get_mut(&id.client_id) else {
            return;
        };
        let Some(entry) = client.entries.get_mut(&id.seq_no) else {
            return;
        };
        if !matches!(entry, Entry::InProgress) {
            return;
        }
        self.stats.in_progress -= 1;
        if id.seq_no < client.watermark {
            // The client has moved past it: nobody will ask again.
            client.entries.remove(&id.seq_no);
            return;
        }
        *entry = Entry::Completed {
            response,
            bytes,
            at: now,
        };
        self.stats.completed += 1;
        self.stats.cached_bytes += bytes;
        self.order.push_back((now, id.client_id.clone(), id.seq_no));
        while self.stats.cached_bytes > self.config.max_cached_bytes {
            if !self.expire_oldest() {
                break;
            }
        }
    }

    /// Records a failed (or abandoned) execution: the entry goes, so a retry executes again.
    pub fn fail(&mut self, id: &RequestId) {
        let Some(client) = self.clients.get_mut(&id.client_id) else {
            return;
        };
        if let Some(Entry::InProgress) = client.entries.get(&id.seq_no) {
            client.entries.remove(&id.seq_no);
            self.stats.in_progress -= 1;
        }
    }

    /// Drops what is too old: responses past `response_ttl` become tombstones, clients silent for
    /// `client_ttl` with nothing in progress go.
    pub fn gc(&mut self, now: Instant) {
        while let Some((at, _, _)) = self.order.front() {
            if now.saturating_duration_since(*at) < self.config.response_ttl {
                break;
            }
            if let Some(record) = self.order.pop_front() {
                self.expire(record);
            }
        }
        let ttl = self.config.client_ttl;
        let stats = &mut self.stats;
        self.clients.retain(|_, client| {
            let silent = now.saturating_duration_since(client.last_heard) >= ttl;
            let busy = client
                .entries
                .values()
                .any(|e| matches!(e, Entry::InProgress));
            if silent && !busy {
                for entry in client.entries.values() {
                    if let Entry::Completed { bytes, .. } = entry {
                        stats.completed -= 1;
                        stats.cached_bytes -= bytes;
                    }
                }
                false
            } else {
                true
            }
        });
        self.stats.clients = self.clients.len();
    }

    /// Turns the oldest completed response still kept into a tombstone; false if there is none.
    fn expire_oldest(&mut self) -> bool {
        while let Some(record) = self.order.pop_front() {
            if self.expire(record) {
                return true;
            }
        }
        false
    }

    /// Turns the completed response of this record into a tombstone, if it is still the one the record
    /// was made for (it may have gone with its client or the watermark, or been completed again after a
    /// failure and a new execution).
    fn expire(&mut self, (at, client_id, seq): (Instant, Bytes, u64)) -> bool {
        let Some(entry) = self
            .clients
            .get_mut(&client_id)
            .and_then(|c| c.entries.get_mut(&seq))
        else {
            return false;
        };
        match entry {
            Entry::Completed {
                at: done, bytes, ..
            } if *done == at => {
                self.stats.completed -= 1;
                self.stats.cached_bytes -= *bytes;
                *entry = Entry::Expired;
                true
            }
            _ => false,
        }
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        Stats {
            clients: self.clients.len(),
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
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
}
