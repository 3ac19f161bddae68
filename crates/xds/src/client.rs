//! The xDS client's state for one management server (gRFC A27, with A46's partial NACKs, A53's
//! `ignore_resource_deletion`, A57's does-not-exist timer and stream rules, A88's watcher errors): who
//! watches which resource, what is cached, which timers run, when the ADS stream may start, and which
//! requests to send. Sans-IO: the driver (grpc-channel's ADS task) reports the stream's life and each
//! response (decoded by the caller into values or errors per resource), passes `now`, and drains
//! [`XdsClient::poll_request`], [`XdsClient::poll_event`] and [`XdsClient::poll_timeout`].
//!
//! The rules, besides [`AdsState`]'s request rules:
//! * watchers of one name share one subscription; a new watcher gets the cached state at once; the last
//!   watcher leaving unsubscribes and forgets the resource;
//! * while the stream is failing (the last one ended before any response, and none has come since), a
//!   new watcher also gets that error at once (C-core's xDS channel status): as an error where no value
//!   is cached, as an ambient one beside a cached value, so it never waits for the next stream;
//! * an accepted resource equal to the cached one notifies nobody, unless the previous one was rejected;
//! * a rejected resource (A46) keeps its cached value, and its watchers get an ambient error (a resource
//!   never received gets a plain error); the rest of the response still applies;
//! * a Listener or Cluster missing from a response was deleted: with `ignore_resource_deletion` nothing
//!   happens; with `fail_on_data_errors` the cache drops it and watchers are told it does not exist;
//!   otherwise (A88's default) the cached value stays and watchers get an ambient error;
//! * does-not-exist (A57): 15 s after the request naming a resource was handed to an established stream,
//!   if nothing arrived for it; timers stop when the stream ends and start again on the next one;
//! * a stream that ended before any response is an error for every watcher (ambient where a value is
//!   cached), and the next stream waits for the connection backoff (1 s, ×1.6, ±20 %, up to 120 s); one
//!   that got a response restarts at once, and the backoff resets.
//!
//! Not here: decoding (the caller's), the stream's I/O, fallback between servers (A71: the driver
//! runs one client per server in use, as [`ServerChoice`](crate::ServerChoice) says), `resource_timer_is_transient_error`'s 30 s transient variant (the timer is always
//! does-not-exist).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use grpc_base::Rng;
use grpc_lb::{BackoffConfig, ConnectionBackoff};

use crate::ads::{AdsState, Request, Verdict};
use crate::bootstrap::ServerFeatures;
use crate::resource::{Decoded, ResourceType};

/// A57's does-not-exist timeout.
pub const DOES_NOT_EXIST_TIMEOUT: Duration = Duration::from_secs(15);

/// One watch, as returned by [`XdsClient::watch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WatchId(u64);

/// What a watcher is told.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent<R> {
    /// The resource's value, first or changed.
    Changed(Arc<R>),
    /// The resource does not exist (never sent in time, or deleted): stop using it.
    DoesNotExist,
    /// No value is usable: the resource was rejected before any valid value arrived, or the stream failed
    /// before it arrived.
    Error(String),
    /// Something went wrong, and the cached value stays in use.
    AmbientError(String),
}

#[derive(Debug)]
enum Presence<R> {
    /// Nothing received yet; the does-not-exist timer runs from `since` (once requested on a stream).
    Waiting { since: Option<Instant> },
    /// The last accepted value.
    Cached(Arc<R>),
    /// Known not to exist.
    Absent,
}

#[derive(Debug)]
struct Entry<R> {
    presence: Presence<R>,
    /// The version of the response that last brought an accepted value, and when it was handled.
    accepted: Option<(String, Instant)>,
    /// The last rejection of this resource, until a valid value arrives.
    rejected: Option<Rejection>,
    watchers: BTreeSet<WatchId>,
}

/// A rejected update of one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The version of the response that carried it.
    pub version: String,
    /// Why it was rejected.
    pub reason: String,
    /// When the response was handled.
    pub at: Instant,
}

impl Rejection {
    /// What the resource's watchers are told.
    fn message(&self) -> String {
        format!(
            "version {:?} of the resource was rejected: {}",
            self.version, self.reason
        )
    }
}

/// The ADS stream's phase, as the client sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    /// No stream; the next may start at this time.
    Down { next_start: Instant },
    /// A stream is up: whether it has had a response, and the earliest start of the next one if it ends
    /// without one.
    Up { got_response: bool, pace: Instant },
}

/// The xDS client's state for one management server (see the module docs). `R` is the decoded resource
/// value.
pub struct XdsClient<R> {
    features: ServerFeatures,
    ads: AdsState,
    entries: BTreeMap<(ResourceType, String), Entry<R>>,
    watches: BTreeMap<WatchId, (ResourceType, String)>,
    next_watch: u64,
    events: VecDeque<(WatchId, WatchEvent<R>)>,
    stream: Stream,
    /// Why the stream is failing: set when one ends before any response, cleared by the next response.
    stream_error: Option<String>,
    backoff: ConnectionBackoff,
    rng: Box<dyn Rng>,
}

impl<R> std::fmt::Debug for XdsClient<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdsClient")
            .field("resources", &self.entries.len())
            .field("watches", &self.watches.len())
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl<R: PartialEq> XdsClient<R> {
    /// A client with no watch and no stream; the first stream may start at `now`.
    pub fn new(features: ServerFeatures, now: Instant, rng: Box<dyn Rng>) -> XdsClient<R> {
        XdsClient {
            features,
            ads: AdsState::new(),
            entries: BTreeMap::new(),
            watches: BTreeMap::new(),
            next_watch: 0,
            events: VecDeque::new(),
            stream: Stream::Down { next_start: now },
            stream_error: None,
            backoff: ConnectionBackoff::new(BackoffConfig::default()),
            rng,
        }
    }

    /// Starts watching `name` of `resource_type`. A cached state is reported at once through
    /// [`XdsClient::poll_event`], and so is the stream's error while it is failing (see the module docs).
    pub fn watch(&mut self, resource_type: ResourceType, name: &str) -> WatchId {
        let id = WatchId(self.next_watch);
        self.next_watch += 1;
        let key = (resource_type, name.to_owned());
        self.watches.insert(id, key.clone());
        let stream_error = self.stream_error.as_ref();
        match self.entries.get_mut(&key) {
            Some(entry) => {
                entry.watchers.insert(id);
                match &entry.presence {
                    Presence::Cached(value) => {
                        self.events
                            .push_back((id, WatchEvent::Changed(value.clone())));
                        if let Some(e) = stream_error {
                            self.events
                                .push_back((id, WatchEvent::AmbientError(e.clone())));
                        }
                    }
                    Presence::Absent => self.events.push_back((id, WatchEvent::DoesNotExist)),
                    Presence::Waiting { .. } => {
                        let error = match &entry.rejected {
                            Some(r) => Some(r.message()),
                            None => stream_error.cloned(),
                        };
                        if let Some(e) = error {
                            self.events.push_back((id, WatchEvent::Error(e)));
                        }
                    }
                }
            }
            None => {
                if let Some(e) = stream_error {
                    self.events.push_back((id, WatchEvent::Error(e.clone())));
                }
                self.entries.insert(
                    key,
                    Entry {
                        presence: Presence::Waiting { since: None },
                        accepted: None,
                        rejected: None,
                        watchers: BTreeSet::from([id]),
                    },
                );
                self.ads.subscribe(resource_type.type_url(), name);
            }
        }
        id
    }

    /// Stops a watch. The last watcher of a resource unsubscribes from it, and it is forgotten.
    pub fn unwatch(&mut self, id: WatchId) {
        let Some(key) = self.watches.remove(&id) else {
            return;
        };
        self.events.retain(|(w, _)| *w != id);
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.watchers.remove(&id);
            if entry.watchers.is_empty() {
                self.entries.remove(&key);
                self.ads.unsubscribe(key.0.type_url(), &key.1);
            }
        }
    }

    /// When the next stream may start (`None` while one is up).
    pub fn next_stream_start(&self) -> Option<Instant> {
        match self.stream {
            Stream::Down { next_start } => Some(next_start),
            Stream::Up { .. } => None,
        }
    }

    /// A stream was established at `now`: every subscription is requested again.
    pub fn stream_started(&mut self, now: Instant) {
        // The backoff paces stream starts: the one after this waits unless this one gets a response.
        let (pace, _) = self.backoff.attempt(now, &mut *self.rng);
        self.stream = Stream::Up {
            got_response: false,
            pace,
        };
        self.ads.stream_started();
    }

    /// The stream ended at `now` (`reason` says how, for the watchers if it had no response).
    pub fn stream_ended(&mut self, now: Instant, reason: &str) {
        let Stream::Up { got_response, pace } = self.stream else {
            return;
        };
        self.ads.stream_ended();
        let next_start = if got_response {
            self.backoff.reset();
            now
        } else {
            pace.max(now)
        };
        self.stream = Stream::Down { next_start };
        for entry in self.entries.values_mut() {
            if let Presence::Waiting { since } = &mut entry.presence {
                *since = None;
            }
        }
        if !got_response {
            let message = format!("the xDS stream failed before any response: {reason}");
            self.stream_error = Some(message.clone());
            let keys: Vec<_> = self.entries.keys().cloned().collect();
            for key in keys {
                let cached = matches!(
                    self.entries.get(&key).map(|e| &e.presence),
                    Some(Presence::Cached(_))
                );
                let event = if cached {
                    WatchEvent::AmbientError(message.clone())
                } else {
                    WatchEvent::Error(message.clone())
                };
                self.notify(&key, event);
            }
        }
    }

    /// The next request to send on the stream, if any, taken as sent at `now`: [`XdsClient::next_request`]
    /// then [`XdsClient::request_sent`], for a driver that writes requests synchronously.
    pub fn poll_request(&mut self, now: Instant) -> Option<Request> {
        let request = self.next_request()?;
        self.request_sent(&request.type_url, &request.resource_names, now);
        Some(request)
    }

    /// The next request to send on the stream, if any. The driver reports when it has actually left
    /// with [`XdsClient::request_sent`], which starts the does-not-exist timers (A57).
    pub fn next_request(&mut self) -> Option<Request> {
        self.ads.poll_request()
    }

    /// A request of `type_url` naming `names` was actually sent at `now` (written to the stream within its
    /// flow-control window, A57: C-core's send completion): starts the does-not-exist timers of the names
    /// still waiting, unless a timer already runs; ignored while no stream is up. The driver reports only
    /// the current stream's requests.
    pub fn request_sent(&mut self, type_url: &str, names: &[String], now: Instant) {
        let Some(resource_type) = ResourceType::from_type_url(type_url) else {
            return;
        };
        if !matches!(self.stream, Stream::Up { .. }) {
            return;
        }
        for name in names {
            if let Some(entry) = self.entries.get_mut(&(resource_type, name.clone())) {
                if let Presence::Waiting {
                    since: since @ None,
                } = &mut entry.presence
                {
                    *since = Some(now);
                }
            }
        }
    }

    /// A response arrived on the stream at `now`: `resources` as the caller decoded them. Applies the
    /// valid ones, notes the invalid ones, handles deletions, and queues the ACK or NACK.
    pub fn handle_response(
        &mut self,
        now: Instant,
        type_url: &str,
        version: &str,
        nonce: &str,
        resources: Vec<Decoded<R>>,
    ) {
        if let Stream::Up { got_response, .. } = &mut self.stream {
            *got_response = true;
        }
        self.stream_error = None;
        self.backoff.reset();
        let Some(resource_type) = ResourceType::from_type_url(type_url) else {
            // Not a type this client asks for: neither ACK nor NACK.
            return;
        };
        let mut errors = Vec::new();
        let mut seen = BTreeSet::new();
        // A resource whose name could not be read may be any of the cached ones: nothing is deleted then.
        let mut unnamed = false;
        for decoded in resources {
            match decoded {
                Decoded::Valid { name, value } => {
                    seen.insert(name.clone());
                    self.accept(resource_type, name, value, version, now);
                }
                Decoded::Invalid { name, reason } => {
                    errors.push(match &name {
                        Some(n) => format!("{n:?}: {reason}"),
                        None => reason.clone(),
                    });
                    match name {
                        Some(name) => {
                            seen.insert(name.clone());
                            let rejection = Rejection {
                                version: version.to_owned(),
                                reason,
                                at: now,
                            };
                            self.reject(resource_type, name, rejection);
                        }
                        None => unnamed = true,
                    }
                }
            }
        }
        if resource_type.deletion_by_absence()
            && !self.features.ignore_resource_deletion
            && !unnamed
        {
            self.delete_absent(resource_type, &seen);
        }
        let verdict = if errors.is_empty() {
            Verdict::Accepted
        } else {
            Verdict::Rejected(format!(
                "{} rejected {} resource(s) of version {version:?}: {}",
                type_url,
                errors.len(),
                errors.join("; ")
            ))
        };
        self.ads.response(type_url, version, nonce, verdict);
    }

    fn accept(
        &mut self,
        resource_type: ResourceType,
        name: String,
        value: R,
        version: &str,
        now: Instant,
    ) {
        let key = (resource_type, name);
        let Some(entry) = self.entries.get_mut(&key) else {
            // Not subscribed (a server may send more than asked): ignored.
            return;
        };
        // Even an unchanged value is now the one of this version.
        entry.accepted = Some((version.to_owned(), now));
        let unchanged = entry.rejected.is_none()
            && matches!(&entry.presence, Presence::Cached(old) if **old == value);
        entry.rejected = None;
        if unchanged {
            return;
        }
        let value = Arc::new(value);
        entry.presence = Presence::Cached(value.clone());
        self.notify(&key, WatchEvent::Changed(value));
    }

    fn reject(&mut self, resource_type: ResourceType, name: String, rejection: Rejection) {
        let key = (resource_type, name);
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        let message = rejection.message();
        entry.rejected = Some(rejection);
        let event = match &entry.presence {
            Presence::Cached(_) if self.features.fail_on_data_errors => {
                entry.presence = Presence::Absent;
                WatchEvent::Error(message)
            }
            Presence::Cached(_) => WatchEvent::AmbientError(message),
            Presence::Waiting { .. } | Presence::Absent => {
                // The server did send it: the does-not-exist timer has nothing left to wait for.
                entry.presence = Presence::Waiting { since: None };
                WatchEvent::Error(message)
            }
        };
        self.notify(&key, event);
    }

    fn delete_absent(&mut self, resource_type: ResourceType, seen: &BTreeSet<String>) {
        let deleted: Vec<_> = self
            .entries
            .iter()
            .filter(|((t, name), entry)| {
                *t == resource_type
                    && !seen.contains(name)
                    && matches!(entry.presence, Presence::Cached(_))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in deleted {
            if self.features.fail_on_data_errors {
                if let Some(entry) = self.entries.get_mut(&key) {
                    entry.presence = Presence::Absent;
                }
                self.notify(&key, WatchEvent::DoesNotExist);
            } else {
                self.notify(
                    &key,
                    WatchEvent::AmbientError(
                        "the management server deleted the resource; the last value stays in use"
                            .to_owned(),
                    ),
                );
            }
        }
    }

    fn notify(&mut self, key: &(ResourceType, String), event: WatchEvent<R>) {
        if let Some(entry) = self.entries.get(key) {
            for &id in &entry.watchers {
                self.events.push_back((id, clone_event(&event)));
            }
        }
    }

    /// The next event for a watcher.
    pub fn poll_event(&mut self) -> Option<(WatchId, WatchEvent<R>)> {
        self.events.pop_front()
    }

    /// When [`XdsClient::handle_timeout`] is next due: the earliest does-not-exist timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.entries
            .values()
            .filter_map(|e| match e.presence {
                Presence::Waiting { since: Some(t) } if e.rejected.is_none() => {
                    Some(t + DOES_NOT_EXIST_TIMEOUT)
                }
                _ => None,
            })
            .min()
    }

    /// Fires the does-not-exist timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<_> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                e.rejected.is_none()
                    && matches!(e.presence, Presence::Waiting { since: Some(t) } if t + DOES_NOT_EXIST_TIMEOUT <= now)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if let Some(entry) = self.entries.get_mut(&key) {
                entry.presence = Presence::Absent;
            }
            self.notify(&key, WatchEvent::DoesNotExist);
        }
    }

    /// The cached value of a resource, if any.
    pub fn cached(&self, resource_type: ResourceType, name: &str) -> Option<Arc<R>> {
        match &self
            .entries
            .get(&(resource_type, name.to_owned()))?
            .presence
        {
            Presence::Cached(value) => Some(value.clone()),
            _ => None,
        }
    }

    /// Every subscribed resource, by type then name, for a CSDS-like dump: its status, the version and
    /// time of the value in use, and the last rejected update since.
    pub fn dump(&self) -> Vec<ResourceDump> {
        self.entries
            .iter()
            .map(|((t, name), e)| {
                let status = match (&e.presence, &e.rejected) {
                    (Presence::Absent, _) => ResourceStatus::DoesNotExist,
                    (_, Some(_)) => ResourceStatus::Nacked,
                    (Presence::Cached(_), None) => ResourceStatus::Acked,
                    (Presence::Waiting { .. }, None) => ResourceStatus::Requested,
                };
                let accepted = match e.presence {
                    Presence::Cached(_) => e.accepted.clone(),
                    _ => None,
                };
                let (version, last_updated) = accepted.unzip();
                ResourceDump {
                    resource_type: *t,
                    name: name.clone(),
                    status,
                    version,
                    last_updated,
                    rejection: e.rejected.clone(),
                }
            })
            .collect()
    }

    /// The last version ACKed for a type.
    pub fn acked_version(&self, resource_type: ResourceType) -> Option<&str> {
        self.ads.acked_version(resource_type.type_url())
    }
}

/// One resource in [`XdsClient::dump`] (CSDS's `GenericXdsConfig`, without the value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceDump {
    /// Its type.
    pub resource_type: ResourceType,
    /// Its name.
    pub name: String,
    /// Where it stands.
    pub status: ResourceStatus,
    /// The version of the response that brought the value in use; `None` without one.
    pub version: Option<String>,
    /// When that response was handled.
    pub last_updated: Option<Instant>,
    /// The last rejected update since a valid one (with `Nacked`, and with `DoesNotExist` when
    /// `fail_on_data_errors` dropped the value for it).
    pub rejection: Option<Rejection>,
}

/// A resource's status in [`XdsClient::dump`] (CSDS's `ClientResourceStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceStatus {
    /// Requested, nothing received yet.
    Requested,
    /// Received and accepted.
    Acked,
    /// The last update was rejected ([`ResourceDump::rejection`]); a value accepted before stays in use
    /// ([`ResourceDump::version`] says which).
    Nacked,
    /// Known not to exist.
    DoesNotExist,
}

fn clone_event<R>(event: &WatchEvent<R>) -> WatchEvent<R> {
    match event {
        WatchEvent::Changed(v) => WatchEvent::Changed(v.clone()),
        WatchEvent::DoesNotExist => WatchEvent::DoesNotExist,
        WatchEvent::Error(e) => WatchEvent::Error(e.clone()),
        WatchEvent::AmbientError(e) => WatchEvent::AmbientError(e.clone()),
    }
}

#[cfg(test)]
mod tests;
