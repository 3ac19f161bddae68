//! The control plane's health watches (gRFC A17): which connections have a `grpc.health.v1.Health/Watch`
//! running (one task each, [`super::health_stream::run`]), for which service, and what their reports do to the
//! policy, tracing and the channel's stats. The event loop owns one [`HealthWatches`] and calls it when a
//! connection becomes READY or goes away, when the policy or the service config changes, and when a watch
//! reports.
//!
//! A watch runs only while the policy health checks (`LbPolicy::health_checking`: round_robin with a
//! `healthCheckConfig` and no local veto), on a connection the current policy holds READY. A service name
//! change restarts every watch, from unknown health (A17: CONNECTING until the first answer, which is
//! about the new name); no service name, a policy that does not health check, a retired policy's
//! connections, IDLE and shutdown stop them (and forget their answers, so that checking turned on again
//! starts from unknown too).
//!
//! A watch's answers reach the event loop through a one-value slot per watch, not a queue: the task
//! overwrites the slot and wakes the loop only when the slot was empty, and the loop takes the latest
//! value. A server that sends status changes faster than the loop applies them costs one slot, whatever
//! it sends, and the loop applies the latest health, which is what matters.
//!
//! Not here: the Watch stream itself and its restart rule (`health_stream.rs`, `grpc_lb::WatchRetry`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use grpc_lb::{Address, Health, LbPolicy, SubchannelId};
use grpc_retry::SplitMix64;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::shared::{Conn, Event, PlaneStats};
use crate::control::health_stream::{self, WatchSetup, WatchSink};
use crate::wire::status::Status;

/// One running watch.
struct Watch {
    /// Tells this watch's reports from those of a watch it replaced on the same subchannel.
    serial: u64,
    addr: Address,
    /// The latest health the task found, not yet applied.
    latest: Arc<Latest>,
    task: JoinHandle<()>,
}

/// A one-value slot: the latest health a watch found (0: none pending).
#[derive(Default)]
struct Latest(AtomicU8);

impl Latest {
    fn code(health: Health) -> u8 {
        match health {
            Health::Unknown => 1,
            Health::Serving => 2,
            Health::NotServing => 3,
        }
    }

    /// Stores `health`; whether the slot was empty (the loop must be woken).
    fn put(&self, health: Health) -> bool {
        self.0.swap(Latest::code(health), Ordering::AcqRel) == 0
    }

    /// Takes the pending health, if any.
    fn take(&self) -> Option<Health> {
        match self.0.swap(0, Ordering::AcqRel) {
            1 => Some(Health::Unknown),
            2 => Some(Health::Serving),
            3 => Some(Health::NotServing),
            _ => None,
        }
    }
}

/// What a watch task reports through: the slot, and the loop's queue for wake-ups and the one
/// UNIMPLEMENTED report.
struct Sink {
    id: SubchannelId,
    serial: u64,
    latest: Arc<Latest>,
    events: mpsc::UnboundedSender<Event>,
}

impl WatchSink for Sink {
    fn health(&self, health: Health) {
        if self.latest.put(health) {
            let _ = self.events.send(Event::Health(self.id, self.serial, None));
        }
    }

    fn unimplemented(&self, status: Status) {
        let _ = self
            .events
            .send(Event::Health(self.id, self.serial, Some(status)));
    }
}

/// The health watches of one channel.
pub(super) struct HealthWatches {
    /// What each Watch sends; `None` when the application turned health checking off.
    setup: Option<WatchSetup>,
    /// The service the watches check (`Some` while the service config asks for health checking).
    service: Option<String>,
    watches: HashMap<SubchannelId, Watch>,
    serial: u64,
    /// What `Channel::stats()` shows.
    stats: Arc<PlaneStats>,
    /// Addresses already logged as having no health service (logged once each while they are in use).
    logged_unimplemented: HashSet<Address>,
}

impl Drop for HealthWatches {
    fn drop(&mut self) {
        self.stop_all();
    }
}

impl HealthWatches {
    pub(super) fn new(setup: Option<WatchSetup>, stats: Arc<PlaneStats>) -> HealthWatches {
        HealthWatches {
            setup,
            service: None,
            watches: HashMap::new(),
            serial: 0,
            stats,
            logged_unimplemented: HashSet::new(),
        }
    }

    /// The service name the config asks to check, unless the application turned checking off.
    pub(super) fn wanted(&self, config_service: Option<&str>) -> Option<String> {
        self.setup.as_ref().and(config_service).map(str::to_owned)
    }

    /// The service to check is now `service`: `true` if it changed (the caller restarts the watches).
    pub(super) fn set_service(&mut self, service: Option<String>) -> bool {
        if self.service == service {
            return false;
        }
        self.service = service;
        true
    }

    /// Starts a watch on `id`'s READY connection `conn` to `addr`, if the policy health checks (replacing
    /// one already running there).
    pub(super) fn start(
        &mut self,
        policy: &LbPolicy,
        id: SubchannelId,
        addr: &Address,
        conn: &Conn,
        events: &mpsc::UnboundedSender<Event>,
        seed: u64,
    ) {
        let (Some(setup), Some(service)) = (&self.setup, &self.service) else {
            return;
        };
        if !policy.health_checking() {
            return;
        }
        self.serial += 1;
        let serial = self.serial;
        let latest = Arc::new(Latest::default());
        let sink = Sink {
            id,
            serial,
            latest: latest.clone(),
            events: events.clone(),
        };
        let task = tokio::spawn(health_stream::run(
            conn.send.clone(),
            conn.streams.clone(),
            setup.clone(),
            service.clone(),
            addr.to_string(),
            Box::new(SplitMix64::new(seed)),
            sink,
        ));
        if let Some(old) = self.watches.insert(
            id,
            Watch {
                serial,
                addr: addr.clone(),
                latest,
                task,
            },
        ) {
            old.task.abort();
        }
    }

    /// Stops `id`'s watch (its connection is gone or no longer the policy's).
    pub(super) fn stop(&mut self, id: SubchannelId) {
        if let Some(watch) = self.watches.remove(&id) {
            watch.task.abort();
            self.stats.health.forget(&watch.addr.to_string());
        }
    }

    /// Stops every watch.
    pub(super) fn stop_all(&mut self) {
        for (_, watch) in self.watches.drain() {
            watch.task.abort();
        }
        self.stats.health.clear();
    }

    /// Forgets what was logged about addresses no longer in `current`.
    pub(super) fn retain_addresses(&mut self, current: &[Address]) {
        let current: HashSet<&Address> = current.iter().collect();
        self.logged_unimplemented.retain(|a| current.contains(a));
    }

    /// A wake-up from the watch `serial` on `id` (with the status of its UNIMPLEMENTED end, if that is
    /// what it reports): its latest health is applied to the policy (at `now`) unless the watch was
    /// replaced or stopped since.
    pub(super) fn on_report(
        &mut self,
        policy: Option<&mut LbPolicy>,
        id: SubchannelId,
        serial: u64,
        unimplemented: Option<Status>,
        now: std::time::Instant,
    ) {
        let Some(watch) = self.watches.get(&id).filter(|w| w.serial == serial) else {
            return;
        };
        let addr = watch.addr.clone();
        let latest = watch.latest.take();
        let service = self.service.as_deref().unwrap_or_default();
        if let Some(status) = unimplemented {
            // The task has ended; the connection counts as healthy for as long as it lasts.
            self.watches.remove(&id);
            if self.logged_unimplemented.insert(addr.clone()) {
                tracing::error!(%addr, service, %status, "the server has no health service (Watch is UNIMPLEMENTED): health checking is off for it and it is used as healthy");
            }
        }
        let (Some(policy), Some(health)) = (policy, latest) else {
            return;
        };
        let before = policy.health(&addr);
        policy.set_health(&addr, health, now);
        match health {
            Health::Serving => self.stats.health.set(addr.to_string(), true),
            Health::NotServing => self.stats.health.set(addr.to_string(), false),
            Health::Unknown => self.stats.health.forget(&addr.to_string()),
        }
        if before != Some(health) {
            match health {
                Health::NotServing => {
                    tracing::info!(%addr, service, "health check: the address is not serving; calls avoid it")
                }
                Health::Serving => {
                    tracing::info!(%addr, service, "health check: the address is serving")
                }
                Health::Unknown => {
                    tracing::debug!(%addr, service, "health check: a new Watch starts")
                }
            }
        }
    }
}
