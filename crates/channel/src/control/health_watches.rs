//! The control plane's health watches (gRFC A17): which connections have a `grpc.health.v1.Health/Watch`
//! running (one task each, [`crate::health::run`]), for which service, and what their reports do to the
//! policy, tracing and the channel's stats. The event loop owns one [`HealthWatches`] and calls it when a
//! connection becomes READY or goes away, when the policy or the service config changes, and when a watch
//! reports.
//!
//! A watch runs only while the policy health checks (`LbPolicy::health_checking`: round_robin with a
//! `healthCheckConfig` and no local veto), on a connection the current policy holds READY. A service name
//! change restarts every watch (the last answers stand until the new ones come); no service name, a policy
//! that does not health check, a retired policy's connections, IDLE and shutdown stop them.
//!
//! Not here: the Watch stream itself and its restart rule (`crate::health`, `grpc_lb::WatchRetry`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use grpc_lb::{Address, Health, LbPolicy, SubchannelId};
use grpc_retry::SplitMix64;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Conn, Event, PlaneStats};
use crate::health::{self, Report, WatchSetup};

/// One running watch.
struct Watch {
    /// Tells this watch's reports from those of a watch it replaced on the same subchannel.
    serial: u64,
    addr: Address,
    task: JoinHandle<()>,
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
        let events = events.clone();
        let task = tokio::spawn(health::run(
            conn.clone(),
            setup.clone(),
            service.clone(),
            Box::new(SplitMix64::new(seed)),
            move |report| {
                let _ = events.send(Event::Health(id, serial, report));
            },
        ));
        if let Some(old) = self.watches.insert(
            id,
            Watch {
                serial,
                addr: addr.clone(),
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

    /// A report from the watch `serial` on `id`: applied to the policy (at `now`) unless the watch was
    /// replaced or stopped since.
    pub(super) fn on_report(
        &mut self,
        policy: Option<&mut LbPolicy>,
        id: SubchannelId,
        serial: u64,
        report: Report,
        now: std::time::Instant,
    ) {
        let Some(watch) = self.watches.get(&id).filter(|w| w.serial == serial) else {
            return;
        };
        let addr = watch.addr.clone();
        let service = self.service.as_deref().unwrap_or_default();
        let health = match report {
            Report::Starting => Health::Unknown,
            Report::Answer(health) => health,
            Report::Unimplemented(status) => {
                // The task has ended; the connection counts as healthy for as long as it lasts.
                self.watches.remove(&id);
                if self.logged_unimplemented.insert(addr.clone()) {
                    tracing::error!(%addr, service, %status, "the server has no health service (Watch is UNIMPLEMENTED): health checking is off for it and it is used as healthy");
                }
                Health::Serving
            }
            Report::Failed { status, retry_in } => {
                tracing::debug!(%addr, service, %status, ?retry_in, "the health Watch failed: the address is not used until a new Watch answers SERVING");
                Health::NotServing
            }
        };
        let Some(policy) = policy else {
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
