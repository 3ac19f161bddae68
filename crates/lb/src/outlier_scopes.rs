//! Outlier detection over several address lists at once ([`OutlierDetectors`]): one A50
//! [`OutlierDetector`] per scope (the channel's own, from the service config; or one per xDS cluster with
//! an `outlier_detection`, A50's xDS mapping, as grpc-go and C-core run one per cluster). Sans-IO like the
//! detector: time and randomness come in.
//!
//! Each scope counts its own calls ([`OutlierDetectors::record_scope_counts`]: the channel counts an xDS
//! call in the cluster that served it; [`OutlierDetectors::record_counts`] gives every scope listing the
//! address the calls, for the channel's single scope) and ejects for itself: every scope's ejections and
//! returns come out of [`OutlierDetectors::poll_scoped_event`], which the channel applies to that
//! cluster's picks only (the channel's own scope through the policy's per-address overlay). Merged by
//! address, for stats and logs: an address is ejected while **any** scope ejects it;
//! [`OutlierDetectors::poll_event`] reports an [`OutlierEvent::Ejected`] for its first ejection and an
//! [`OutlierEvent::Unejected`] for its last return.
//!
//! A scope without an algorithm ejects nothing, and counts nothing. The number of scopes is the caller's
//! (one per cluster in the routing: bounded by the clusters the resolver publishes).
//!
//! Not here: counting calls (the channel), applying ejections (the policy).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use grpc_base::{Address, Rng};

use crate::outlier_detection::{
    CallCounts, NotEjected, OutlierDetectionConfig, OutlierDetector, OutlierEvent,
};

/// One scope's config and address list, for [`OutlierDetectors::update`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OutlierScope {
    /// The scope's name (a cluster's name; empty for the channel's own detection).
    pub name: String,
    /// Its config.
    pub config: OutlierDetectionConfig,
    /// Its addresses.
    pub addresses: Vec<Address>,
}

impl OutlierScope {
    /// A scope named `name` with `config` over `addresses`.
    pub fn new(
        name: String,
        config: OutlierDetectionConfig,
        addresses: Vec<Address>,
    ) -> OutlierScope {
        OutlierScope {
            name,
            config,
            addresses,
        }
    }
}

/// One scope's ejection or return of an address ([`OutlierDetectors::poll_scoped_event`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScopedEjection {
    /// The scope's name (a cluster's; empty for the channel's own detection).
    pub scope: String,
    /// The address.
    pub address: Address,
    /// Ejected (`true`) or returned (`false`).
    pub ejected: bool,
}

/// One [`OutlierDetector`] per scope, their ejections merged by address (see the module docs).
#[derive(Debug, Default)]
pub struct OutlierDetectors {
    detectors: BTreeMap<String, OutlierDetector>,
    /// Per ejected address: how many scopes eject it (at least 1).
    ejected: HashMap<Address, usize>,
    events: VecDeque<OutlierEvent>,
    scoped: VecDeque<ScopedEjection>,
}

impl OutlierDetectors {
    /// No scope: nothing is ejected.
    pub fn new() -> OutlierDetectors {
        OutlierDetectors::default()
    }

    /// Whether there is no scope.
    pub fn is_empty(&self) -> bool {
        self.detectors.is_empty()
    }

    /// The scopes now in force, at `now`: a scope new by name starts a detector, a known one gets its new
    /// config (if changed) and addresses (keeping what it knew of the addresses it keeps), a scope not
    /// listed goes (returning what only it ejected). A repeated name: the first counts.
    pub fn update(&mut self, scopes: Vec<OutlierScope>, now: Instant) {
        let mut old = std::mem::take(&mut self.detectors);
        for scope in scopes {
            if self.detectors.contains_key(&scope.name) {
                continue;
            }
            let mut detector = match old.remove(&scope.name) {
                Some(mut d) => {
                    if *d.config() != scope.config {
                        d.update_config(scope.config, now);
                    }
                    d
                }
                None => OutlierDetector::new(scope.config, now),
            };
            detector.update_addresses(scope.addresses);
            let name = scope.name;
            self.detectors.insert(name.clone(), detector);
            self.drain(&name);
        }
        for (name, gone) in old {
            for address in gone.ejected() {
                self.scoped.push_back(ScopedEjection {
                    scope: name.clone(),
                    address: address.clone(),
                    ejected: false,
                });
                self.release(address.clone(), crate::UnejectReason::Removed);
            }
        }
    }

    /// Moves the events of the detector named `name` into the merged queue.
    fn drain(&mut self, name: &str) {
        let Some(d) = self.detectors.get_mut(name) else {
            return;
        };
        let mut events = Vec::new();
        while let Some(event) = d.poll_event() {
            events.push(event);
        }
        for event in events {
            let (address, ejected) = match &event {
                OutlierEvent::Ejected { address, .. } => (address.clone(), true),
                OutlierEvent::Unejected { address, .. } => (address.clone(), false),
            };
            self.scoped.push_back(ScopedEjection {
                scope: name.to_owned(),
                address,
                ejected,
            });
            match event {
                OutlierEvent::Ejected { ref address, .. } => {
                    let n = self.ejected.entry(address.clone()).or_insert(0);
                    *n += 1;
                    if *n == 1 {
                        self.events.push_back(event);
                    }
                }
                OutlierEvent::Unejected { address, reason } => self.release(address, reason),
            }
        }
    }

    /// One scope stops ejecting `address`.
    fn release(&mut self, address: Address, reason: crate::UnejectReason) {
        match self.ejected.get_mut(&address) {
            Some(n) if *n > 1 => *n -= 1,
            Some(_) => {
                self.ejected.remove(&address);
                self.events
                    .push_back(OutlierEvent::Unejected { address, reason });
            }
            None => {}
        }
    }

    /// Whether any scope has an algorithm (only then are calls worth counting).
    pub fn is_enabled(&self) -> bool {
        self.detectors.values().any(OutlierDetector::is_enabled)
    }

    /// Calls finished on `address`: every scope listing it gets them.
    pub fn record_counts(&mut self, address: &Address, counts: CallCounts) {
        for d in self.detectors.values_mut() {
            d.record_counts(address, counts);
        }
    }

    /// Calls of the scope named `scope` finished on `address`: only that scope gets them.
    pub fn record_scope_counts(&mut self, scope: &str, address: &Address, counts: CallCounts) {
        if let Some(d) = self.detectors.get_mut(scope) {
            d.record_counts(address, counts);
        }
    }

    /// The scopes, by name, with their detectors.
    pub fn scopes(&self) -> impl Iterator<Item = (&str, &OutlierDetector)> + '_ {
        self.detectors.iter().map(|(n, d)| (n.as_str(), d))
    }

    /// The next ejection or return by one scope, until `None` (every scope's, unlike
    /// [`OutlierDetectors::poll_event`]'s merged ones): what a policy applying ejections per scope
    /// follows.
    pub fn poll_scoped_event(&mut self) -> Option<ScopedEjection> {
        self.scoped.pop_front()
    }

    /// The earliest sweep due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.detectors
            .values()
            .filter_map(OutlierDetector::poll_timeout)
            .min()
    }

    /// Runs every sweep due at `now`; drain [`OutlierDetectors::poll_event`] afterwards.
    pub fn handle_timeout(&mut self, now: Instant, rng: &mut dyn Rng) {
        let names: Vec<String> = self.detectors.keys().cloned().collect();
        for name in names {
            if let Some(d) = self.detectors.get_mut(&name) {
                d.handle_timeout(now, rng);
            }
            self.drain(&name);
        }
    }

    /// The next ejection (an address's first) or return (its last), until `None`.
    pub fn poll_event(&mut self) -> Option<OutlierEvent> {
        self.events.pop_front()
    }

    /// The next address a sweep left in service despite failures (any scope's), until `None`.
    pub fn poll_not_ejected(&mut self) -> Option<NotEjected> {
        self.detectors
            .values_mut()
            .find_map(OutlierDetector::poll_not_ejected)
    }

    /// The addresses some scope ejects now.
    pub fn ejected(&self) -> impl Iterator<Item = &Address> + '_ {
        self.ejected.keys()
    }

    /// Whether some scope ejects `address`.
    pub fn is_ejected(&self, address: &Address) -> bool {
        self.ejected.contains_key(address)
    }
}
