//! The result tracker's state machine (sans-IO: time comes in as `now`), after Kudu's `ResultTracker`, with
//! every structure a client can grow bounded and counted.
//!
//! Per client, per sequence number, one entry:
//!
//! ```text
//!             track (first time)                complete (success)
//!   (none) ─────────────────────▶ IN_PROGRESS ──────────────────────▶ COMPLETED ──(TTL or caps)──▶ EXPIRED (tombstone)
//!      ▲                              │                                    │                           │
//!      └──────── fail (error) ────────┘                                    │              (tombstone caps)
//!                                                                          │                           ▼
//!                                             watermark passes it ─────────┴─────────▶ (gone)    FORGOTTEN (the mark)
//! ```
//!
//! What [`Tracker::track`] answers for a request:
//! * **New**: nothing is known of it (or its earlier attempt failed): the caller executes it, then calls
//!   [`Tracker::complete`] or [`Tracker::fail`];
//! * **InProgress**: another attempt is executing it: wait for that one to end, then track again;
//! * **Completed**: it succeeded before: answer with the cached response, without executing;
//! * **Stale**: below the client's watermark (the client said it had ended), its cached response was dropped
//!   (age, caps), or it is at or below the client's forgotten mark: answer with an error, never execute;
//! * **Refused**: the tracker will not take it: a client id that is not [`CLIENT_ID_LEN`] bytes
//!   (INVALID_ARGUMENT), or a new client when [`Config::max_clients`] are remembered (RESOURCE_EXHAUSTED).
//!
//! Only successes are cached: a failed execution leaves no entry, so the client may retry it (a handler must
//! therefore fail only when it changed nothing). Garbage collection: each request carries its client's
//! first incomplete sequence number, and entries below it are dropped.
//!
//! # Bounds
//!
//! A client controls how many calls it makes, what watermark it sends (it may pin it, as a hostile client or
//! one with a long call in flight does) and which client ids it sends. None of that grows the tracker without
//! bound:
//!
//! * **Completed responses**: at most [`Config::max_cached_bytes`] bytes (by the sizes given to
//!   [`Tracker::complete`]) and [`Config::max_responses`] entries (empty responses cost bookkeeping too).
//!   Past either cap, or past `response_ttl`, the oldest become tombstones.
//! * **Tombstones** (EXPIRED: a response that completed and was dropped, so that a late duplicate is refused
//!   instead of executed): at most [`Config::max_tombstones_per_client`] per client (the client's lowest
//!   sequence numbers go first) and [`Config::max_tombstones`] in all (the oldest tombstones go first).
//!   An evicted tombstone still refuses its duplicates: see the forgotten mark below.
//! * **Clients**: at most [`Config::max_clients`] records. A request of a new client when they are all taken
//!   is refused ([`Refusal::TooManyClients`]); no record is forgotten to make room, since forgetting a record
//!   (its watermark, responses and tombstones) would let its duplicates run again. Records free up as
//!   [`Tracker::gc`] forgets clients silent for `client_ttl`.
//! * **Client ids**: exactly [`CLIENT_ID_LEN`] bytes (what grpc-channel sends); any other length is refused
//!   ([`Refusal::InvalidClientId`]) before anything is stored. Records are keyed by the 16 bytes inline.
//! * **The completion and tombstone queues** (oldest first, for the TTL and the caps) hold records of entries
//!   already gone (dropped by the watermark or with their client) until they are met; they are compacted
//!   whenever they reach twice their live entries (plus a small slack), so they stay proportional to the caps.
//!
//! Not bounded here: IN_PROGRESS entries. Each is a handler running on the server, so the server's own
//! concurrency limits (HTTP/2 `max_concurrent_streams`, connection limits) bound them.
//!
//! # The forgotten mark
//!
//! Evicting a tombstone must not let its sequence number execute again, and remembering each evicted one
//! would be unbounded again. So each client keeps one number, its *forgotten mark*: the highest sequence
//! number whose tombstone was evicted. Evicting tombstone `s` raises the mark to `s` and drops the client's
//! other tombstones at or below `s` (they are now redundant). A request at or below the mark that the client
//! record does not hold (no IN_PROGRESS or COMPLETED entry) is refused as [`Stale::Forgotten`]. A sequence
//! number above the mark that was never seen still executes.
//!
//! The cost of one number instead of a set: a sequence number at or below the mark that never executed here
//! (a call still queued at the client, or retried after an attempt that failed) is refused too, not
//! executed. That is safe (it never runs twice: refusing is the only error this design allows) and it needs a
//! client with more than `max_tombstones_per_client` expired responses above a call it has not finished, or
//! the total cap evicting its tombstones; the channel's client, whose watermark follows its calls, rarely
//! leaves any tombstone at all. An entry already held at or below the mark is unaffected: an IN_PROGRESS one
//! still completes and replays (its response, when it later expires, leaves no tombstone: the mark covers it).
//! (Ranges of evicted numbers would refuse fewer calls that never ran, but a client that leaves gaps makes
//! ranges as many as tombstones; one mark per client is the bounded end of that trade.)
//!
//! Not here: a client unheard of for `client_ttl`, with nothing in progress, is dropped with all its state.
//! After that, a duplicate from it executes again: the limit of the design, as in Kudu.

use std::collections::{hash_map, BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use grpc_code::Code;

use crate::request_id::{RequestId, CLIENT_ID_LEN};

/// How long results and clients are remembered, and how much each kind of state may take.
///
/// Build it from [`Config::default`] with the `with_*` setters (or assign the public fields of a mutable
/// value): the struct is `#[non_exhaustive]`, so it may gain caps without breaking callers.
///
/// ```
/// use std::time::Duration;
/// use grpc_exactly_once::Config;
///
/// let config = Config::default()
///     .with_response_ttl(Duration::from_secs(60))
///     .with_max_clients(10_000);
/// assert_eq!(config.max_clients, 10_000);
/// ```
///
/// A cap of 0 is allowed and means "none": no response kept, no tombstone kept (every expired response
/// raises its client's forgotten mark at once), or no client accepted.
///
/// The bookkeeping costs below were measured on x86-64 Linux with `Bytes` responses. At the defaults, the
/// worst a client can make the tracker hold is the 64 MiB of responses plus about 40 MB for their entries,
/// 15 MB of tombstones and 65 MB of client records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// How long a completed response is kept for duplicates (Kudu: `remember_responses_ttl`). Default: 10 min.
    pub response_ttl: Duration,
    /// How long a client that sends nothing is remembered (Kudu: `remember_clients_ttl`). Default: 1 h.
    pub client_ttl: Duration,
    /// The most bytes of cached responses (by the sizes given to [`Tracker::complete`]). Default: 64 MiB.
    pub max_cached_bytes: usize,
    /// The most cached responses, whatever their size: an empty response costs bookkeeping too (about 150
    /// bytes each, besides its own bytes). Default: 262,144.
    pub max_responses: usize,
    /// The most tombstones (responses dropped, whose duplicates are refused) of all clients; past it the oldest
    /// are evicted into their client's forgotten mark. Each costs about 55 bytes. Default: 262,144.
    pub max_tombstones: usize,
    /// The most tombstones of one client; past it its lowest sequence numbers are evicted into its forgotten
    /// mark. Default: 16,384.
    pub max_tombstones_per_client: usize,
    /// The most client records; a new client past it is refused with RESOURCE_EXHAUSTED until silent clients
    /// are forgotten (`client_ttl`). A record costs about 250 bytes idle, up to about 1 KiB while it holds
    /// entries. Default: 65,536.
    pub max_clients: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            response_ttl: Duration::from_secs(600),
            client_ttl: Duration::from_secs(3600),
            max_cached_bytes: 64 << 20,
            max_responses: 1 << 18,
            max_tombstones: 1 << 18,
            max_tombstones_per_client: 1 << 14,
            max_clients: 1 << 16,
        }
    }
}

impl Config {
    /// Sets [`Config::response_ttl`].
    #[must_use]
    pub const fn with_response_ttl(mut self, ttl: Duration) -> Config {
        self.response_ttl = ttl;
        self
    }

    /// Sets [`Config::client_ttl`].
    #[must_use]
    pub const fn with_client_ttl(mut self, ttl: Duration) -> Config {
        self.client_ttl = ttl;
        self
    }

    /// Sets [`Config::max_cached_bytes`].
    #[must_use]
    pub const fn with_max_cached_bytes(mut self, bytes: usize) -> Config {
        self.max_cached_bytes = bytes;
        self
    }

    /// Sets [`Config::max_responses`].
    #[must_use]
    pub const fn with_max_responses(mut self, responses: usize) -> Config {
        self.max_responses = responses;
        self
    }

    /// Sets [`Config::max_tombstones`].
    #[must_use]
    pub const fn with_max_tombstones(mut self, tombstones: usize) -> Config {
        self.max_tombstones = tombstones;
        self
    }

    /// Sets [`Config::max_tombstones_per_client`].
    #[must_use]
    pub const fn with_max_tombstones_per_client(mut self, tombstones: usize) -> Config {
        self.max_tombstones_per_client = tombstones;
        self
    }

    /// Sets [`Config::max_clients`].
    #[must_use]
    pub const fn with_max_clients(mut self, clients: usize) -> Config {
        self.max_clients = clients;
        self
    }
}

/// Why a request is refused as a duplicate of a call that ended: it must never execute (again).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Stale {
    /// Its sequence number is below the client's first incomplete one: the client said it had ended.
    BelowWatermark,
    /// It completed, but its response is no longer kept (age or caps): its tombstone refuses it.
    ResponseDropped,
    /// Its sequence number is at or below the client's forgotten mark (tombstones evicted by the caps): it
    /// completed and its tombstone was evicted, or, rarely, it never executed here (see the module docs).
    Forgotten,
}

impl Stale {
    /// The gRPC code to answer it with: FAILED_PRECONDITION (the call must not run; retrying will not help).
    pub const fn code(self) -> Code {
        Code::FailedPrecondition
    }
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stale::BelowWatermark => {
                "stale request: below the client's first incomplete sequence number"
            }
            Stale::ResponseDropped => {
                "stale request: it completed and its response is no longer kept"
            }
            Stale::Forgotten => {
                "stale request: at or below the client's forgotten sequence numbers"
            }
        })
    }
}

impl std::error::Error for Stale {}

/// Why the tracker does not take a request at all (it is not executed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Refusal {
    /// The client id is not [`CLIENT_ID_LEN`] bytes long.
    InvalidClientId {
        /// Its length.
        len: usize,
    },
    /// It comes from a client the tracker does not know, and [`Config::max_clients`] are remembered.
    TooManyClients,
}

impl Refusal {
    /// The gRPC code to answer it with: INVALID_ARGUMENT for a malformed client id, RESOURCE_EXHAUSTED when
    /// the client records are all taken.
    pub const fn code(self) -> Code {
        match self {
            Refusal::InvalidClientId { .. } => Code::InvalidArgument,
            Refusal::TooManyClients => Code::ResourceExhausted,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::InvalidClientId { len } => write!(
                f,
                "exactly-once client id of {len} bytes ({CLIENT_ID_LEN} expected)"
            ),
            Refusal::TooManyClients => f.write_str("exactly-once result tracker: too many clients"),
        }
    }
}

impl std::error::Error for Refusal {}

/// What to do with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision<R> {
    /// Execute it.
    New,
    /// Another attempt is executing it.
    InProgress,
    /// It succeeded before: this is its response.
    Completed(R),
    /// Refuse it: a duplicate of a call that ended.
    Stale(Stale),
    /// Refuse it: the tracker does not take it (nothing was recorded).
    Refused(Refusal),
}

/// Counters, for metrics: the sizes of what the tracker holds, and totals since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Requests being executed.
    pub in_progress: usize,
    /// Completed responses kept.
    pub completed: usize,
    /// Their bytes.
    pub cached_bytes: usize,
    /// Tombstones kept (responses dropped, whose duplicates are refused).
    pub tombstones: usize,
    /// Clients remembered.
    pub clients: usize,
    /// Requests executed (New answers) so far.
    pub executed: u64,
    /// Duplicates answered from the cache so far.
    pub replayed: u64,
    /// Requests refused as stale so far.
    pub stale_rejections: u64,
    /// Tombstones evicted by the tombstone caps so far (into their client's forgotten mark).
    pub tombstones_evicted: u64,
    /// Requests refused for a client id that is not [`CLIENT_ID_LEN`] bytes so far.
    pub invalid_client_ids: u64,
    /// Requests of new clients refused because [`Config::max_clients`] were remembered, so far.
    pub clients_refused: u64,
}

/// A client id, inline (no allocation per client).
type ClientKey = [u8; CLIENT_ID_LEN];

/// When the completion and tombstone queues hold this many more records than twice their live entries,
/// they are compacted.
const COMPACT_SLACK: usize = 1024;

enum Entry<R> {
    InProgress,
    Completed {
        response: R,
        bytes: usize,
        /// Which completion this is (unique in the tracker), to match its record in the completion queue.
        stamp: u64,
    },
}

struct Client<R> {
    /// In progress and completed requests (tombstones are in `tombstones`).
    entries: BTreeMap<u64, Entry<R>>,
    /// How many of `entries` are in progress.
    in_progress: usize,
    /// Sequence numbers whose response was dropped: their duplicates are refused. All are at or above
    /// `watermark` and above `forgotten`.
    tombstones: BTreeSet<u64>,
    /// Every sequence number below this has ended (the highest watermark the client sent).
    watermark: u64,
    /// The forgotten mark: the highest sequence number whose tombstone was evicted. At or below it, what
    /// `entries` does not hold is refused.
    forgotten: Option<u64>,
    /// Which record of this client id this is (a client forgotten and heard of again gets a new one).
    incarnation: u64,
    last_heard: Instant,
}

impl<R> Client<R> {
    fn is_forgotten(&self, seq: u64) -> bool {
        self.forgotten.is_some_and(|mark| seq <= mark)
    }

    /// Raises the forgotten mark to `seq` and drops the tombstones it now covers; returns how many.
    fn forget_through(&mut self, seq: u64) -> usize {
        self.forgotten = Some(self.forgotten.map_or(seq, |mark| mark.max(seq)));
        let keep = match seq.checked_add(1) {
            Some(above) => self.tombstones.split_off(&above),
            None => BTreeSet::new(),
        };
        let dropped = std::mem::replace(&mut self.tombstones, keep).len();
        self.release_empty();
        dropped
    }

    /// Frees the node an emptied map keeps (about 700 bytes for `entries`): an idle client costs only its
    /// record.
    fn release_empty(&mut self) {
        if self.entries.is_empty() {
            self.entries = BTreeMap::new();
        }
        if self.tombstones.is_empty() {
            self.tombstones = BTreeSet::new();
        }
    }
}

/// A completed response in the completion queue.
struct CompletionRecord {
    at: Instant,
    client: ClientKey,
    seq: u64,
    stamp: u64,
}

/// A tombstone in the tombstone queue.
struct TombstoneRecord {
    client: ClientKey,
    incarnation: u64,
    seq: u64,
}

/// The tracker (see the module docs). `R` is a successful response, cloned for each duplicate (use
/// something cheap to clone, like `Bytes`).
pub struct Tracker<R> {
    config: Config,
    clients: HashMap<ClientKey, Client<R>>,
    /// Completed responses in completion order, for the TTL and the response caps (records of entries already
    /// gone are skipped when met, and compacted away).
    completions: VecDeque<CompletionRecord>,
    /// Tombstones in the order they were made, for the total tombstone cap (same).
    tombstone_order: VecDeque<TombstoneRecord>,
    next_stamp: u64,
    next_incarnation: u64,
    stats: Stats,
}

impl<R: Clone> Tracker<R> {
    /// An empty tracker.
    pub fn new(config: Config) -> Tracker<R> {
        Tracker {
            config,
            clients: HashMap::new(),
            completions: VecDeque::new(),
            tombstone_order: VecDeque::new(),
            next_stamp: 0,
            next_incarnation: 0,
            stats: Stats::default(),
        }
    }

    /// Decides what to do with a request (and records it as in progress when it is new).
    pub fn track(&mut self, id: &RequestId, now: Instant) -> Decision<R> {
        let Ok(key) = ClientKey::try_from(id.client_id.as_ref()) else {
            self.stats.invalid_client_ids += 1;
            return Decision::Refused(Refusal::InvalidClientId {
                len: id.client_id.len(),
            });
        };
        let known = self.clients.len();
        let stats = &mut self.stats;
        let client = match self.clients.entry(key) {
            hash_map::Entry::Occupied(record) => record.into_mut(),
            hash_map::Entry::Vacant(slot) => {
                if known >= self.config.max_clients {
                    stats.clients_refused += 1;
                    return Decision::Refused(Refusal::TooManyClients);
                }
                self.next_incarnation += 1;
                slot.insert(Client {
                    entries: BTreeMap::new(),
                    in_progress: 0,
                    tombstones: BTreeSet::new(),
                    watermark: 0,
                    forgotten: None,
                    incarnation: self.next_incarnation,
                    last_heard: now,
                })
            }
        };
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
                        stats.completed -= 1;
                        stats.cached_bytes -= bytes;
                    }
                }
            }
            let keep = client.tombstones.split_off(&watermark);
            stats.tombstones -= std::mem::replace(&mut client.tombstones, keep).len();
            client.release_empty();
        }
        let seq = id.seq_no;
        match client.entries.get(&seq) {
            Some(Entry::InProgress) => return Decision::InProgress,
            Some(Entry::Completed { response, .. }) => {
                stats.replayed += 1;
                return Decision::Completed(response.clone());
            }
            None => {}
        }
        let stale = if seq < client.watermark {
            Some(Stale::BelowWatermark)
        } else if client.tombstones.contains(&seq) {
            Some(Stale::ResponseDropped)
        } else if client.is_forgotten(seq) {
            Some(Stale::Forgotten)
        } else {
            None
        };
        if let Some(why) = stale {
            stats.stale_rejections += 1;
            return Decision::Stale(why);
        }
        client.entries.insert(seq, Entry::InProgress);
        client.in_progress += 1;
        stats.in_progress += 1;
        stats.executed += 1;
        Decision::New
    }

    /// Records a successful execution of a request `track` answered New: its response (of `bytes` bytes,
    /// for the memory cap) is kept for duplicates.
    pub fn complete(&mut self, id: &RequestId, response: R, bytes: usize, now: Instant) {
        let Ok(key) = ClientKey::try_from(id.client_id.as_ref()) else {
            return;
        };
        let Some(client) = self.clients.get_mut(&key) else {
            return;
        };
        let Some(entry) = client.entries.get_mut(&id.seq_no) else {
            return;
        };
        if !matches!(entry, Entry::InProgress) {
            return;
        }
        // The client is as recent as its last completed call: a duplicate of it may come at once, however
        // long the call ran (gc must not forget the client with a response it just cached).
        client.last_heard = client.last_heard.max(now);
        client.in_progress -= 1;
        self.stats.in_progress -= 1;
        if id.seq_no < client.watermark {
            // The client has moved past it: nobody will ask again.
            client.entries.remove(&id.seq_no);
            client.release_empty();
            return;
        }
        self.next_stamp += 1;
        let stamp = self.next_stamp;
        *entry = Entry::Completed {
            response,
            bytes,
            stamp,
        };
        self.stats.completed += 1;
        self.stats.cached_bytes += bytes;
        if self.completions.len() >= 2 * self.stats.completed + COMPACT_SLACK {
            let clients = &self.clients;
            self.completions
                .retain(|record| completion_is_live(clients, record));
        }
        self.completions.push_back(CompletionRecord {
            at: now,
            client: key,
            seq: id.seq_no,
            stamp,
        });
        while self.stats.cached_bytes > self.config.max_cached_bytes
            || self.stats.completed > self.config.max_responses
        {
            if !self.expire_oldest() {
                break;
            }
        }
    }

    /// Records a failed (or abandoned) execution: the entry goes, so a retry executes again (unless the
    /// client's forgotten mark has passed it meanwhile: see the module docs).
    pub fn fail(&mut self, id: &RequestId) {
        let Ok(key) = ClientKey::try_from(id.client_id.as_ref()) else {
            return;
        };
        let Some(client) = self.clients.get_mut(&key) else {
            return;
        };
        if let Some(Entry::InProgress) = client.entries.get(&id.seq_no) {
            client.entries.remove(&id.seq_no);
            client.release_empty();
            client.in_progress -= 1;
            self.stats.in_progress -= 1;
        }
    }

    /// Drops what is too old: responses past `response_ttl` become tombstones, clients silent for
    /// `client_ttl` with nothing in progress go.
    pub fn gc(&mut self, now: Instant) {
        while let Some(record) = self.completions.front() {
            if now.saturating_duration_since(record.at) < self.config.response_ttl {
                break;
            }
            if let Some(record) = self.completions.pop_front() {
                self.expire(&record);
            }
        }
        let ttl = self.config.client_ttl;
        let stats = &mut self.stats;
        self.clients.retain(|_, client| {
            let silent = now.saturating_duration_since(client.last_heard) >= ttl;
            if !silent || client.in_progress > 0 {
                return true;
            }
            for entry in client.entries.values() {
                if let Entry::Completed { bytes, .. } = entry {
                    stats.completed -= 1;
                    stats.cached_bytes -= bytes;
                }
            }
            stats.tombstones -= client.tombstones.len();
            false
        });
    }

    /// Turns the oldest completed response still kept into a tombstone; false if there is none.
    fn expire_oldest(&mut self) -> bool {
        while let Some(record) = self.completions.pop_front() {
            if self.expire(&record) {
                return true;
            }
        }
        false
    }

    /// Drops the completed response of this record, if it is still the one the record was made for (it
    /// may have gone with its client or the watermark), leaving a tombstone unless the client's watermark or
    /// forgotten mark already covers it.
    fn expire(&mut self, record: &CompletionRecord) -> bool {
        let Some(client) = self.clients.get_mut(&record.client) else {
            return false;
        };
        match client.entries.get(&record.seq) {
            Some(Entry::Completed { stamp, bytes, .. }) if *stamp == record.stamp => {
                self.stats.completed -= 1;
                self.stats.cached_bytes -= *bytes;
            }
            _ => return false,
        }
        client.entries.remove(&record.seq);
        client.release_empty();
        if record.seq < client.watermark || client.is_forgotten(record.seq) {
            return true;
        }
        client.tombstones.insert(record.seq);
        self.stats.tombstones += 1;
        while client.tombstones.len() > self.config.max_tombstones_per_client {
            let Some(lowest) = client.tombstones.first().copied() else {
                break;
            };
            let evicted = client.forget_through(lowest);
            self.stats.tombstones -= evicted;
            self.stats.tombstones_evicted += evicted as u64;
        }
        if client.tombstones.contains(&record.seq) {
            let incarnation = client.incarnation;
            if self.tombstone_order.len() >= 2 * self.stats.tombstones + COMPACT_SLACK {
                let clients = &self.clients;
                self.tombstone_order
                    .retain(|record| tombstone_is_live(clients, record));
            }
            self.tombstone_order.push_back(TombstoneRecord {
                client: record.client,
                incarnation,
                seq: record.seq,
            });
        }
        while self.stats.tombstones > self.config.max_tombstones {
            let Some(oldest) = self.tombstone_order.pop_front() else {
                break;
            };
            if !tombstone_is_live(&self.clients, &oldest) {
                continue;
            }
            if let Some(client) = self.clients.get_mut(&oldest.client) {
                let evicted = client.forget_through(oldest.seq);
                self.stats.tombstones -= evicted;
                self.stats.tombstones_evicted += evicted as u64;
            }
        }
        true
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        Stats {
            clients: self.clients.len(),
            ..self.stats
        }
    }
}

/// Whether the response a completion record was made for is still kept.
fn completion_is_live<R>(
    clients: &HashMap<ClientKey, Client<R>>,
    record: &CompletionRecord,
) -> bool {
    clients
        .get(&record.client)
        .and_then(|client| client.entries.get(&record.seq))
        .is_some_and(
            |entry| matches!(entry, Entry::Completed { stamp, .. } if *stamp == record.stamp),
        )
}

/// Whether the tombstone a record was made for is still kept.
fn tombstone_is_live<R>(clients: &HashMap<ClientKey, Client<R>>, record: &TombstoneRecord) -> bool {
    clients.get(&record.client).is_some_and(|client| {
        client.incarnation == record.incarnation && client.tombstones.contains(&record.seq)
    })
}

#[cfg(test)]
mod tests;
