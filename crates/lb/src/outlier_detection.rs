//! Outlier detection (gRFC A50), the sans-IO half: per-address call counters, the periodic ejection sweep
//! with its two algorithms (success rate, failure percentage), ejection times that grow with a multiplier,
//! and un-ejection. [`OutlierDetector`] decides which addresses are ejected and when; it does not eject
//! anything itself.
//!
//! One address's life cycle (the multiplier starts at 0):
//!
//! ```text
//!             sweep: an outlier, maxEjectionPercent allows it, the draw is under enforcementPercentage
//!   INCLUDED ───────────────────────────────────────────────────────────────────▶ EJECTED { since }
//!   (each sweep: multiplier − 1,              multiplier + 1 on the way in, since = the sweep's time
//!    down to 0)              ◀─────────────────────────────────────────────────
//!             a later sweep at or after since + min(base × multiplier, max(base, maxEjectionTime));
//!             a config with neither algorithm (multiplier back to 0); the address leaving the list
//! ```
//!
//! Call order, for the channel:
//!
//! 1. [`OutlierDetector::new`] with the policy's config; [`OutlierDetector::update_addresses`] with every
//!    address list the child policy gets, [`OutlierDetector::update_config`] with every new config.
//! 2. [`OutlierDetector::record`] for each call that finished on an address's subchannel, OK or not, while
//!    [`OutlierDetector::is_enabled`] (otherwise it ignores them, as A50's picker counts nothing).
//! 3. One timer at [`OutlierDetector::poll_timeout`] (it may already be past: then at once); when it fires,
//!    [`OutlierDetector::handle_timeout`] with the time and the injected `Rng`.
//! 4. After each of these, drain [`OutlierDetector::poll_event`]: an [`OutlierEvent::Ejected`] address's
//!    subchannels report TRANSIENT_FAILURE to the child policy (connections stay open), an
//!    [`OutlierEvent::Unejected`] one's report their real state again. [`OutlierDetector::is_ejected`]
//!    answers for a subchannel created later. After a sweep, [`OutlierDetector::poll_not_ejected`] says
//!    why each address that had failures stayed in service (below `requestVolume`, below `minimumHosts`,
//!    `maxEjectionPercent` reached, the enforcement draw, or a rate that is no outlier's), for the log.
//!
//! The sweep follows A50: note the time; swap every counter's buckets; run success rate, then failure
//! percentage (each only if configured); then for every address, decay the multiplier of an included one
//! and un-eject an ejected one whose time is up. Where the gRFC and the stacks disagree, the choice is
//! documented where it is made: candidates, thresholds, the `maxEjectionPercent` reading and the random
//! draw in `algorithms.rs`; the un-ejection boundary and the timer here.
//!
//! Addresses are kept in the order of the last address list, and the algorithms visit them in that order,
//! so with a seeded `Rng` a sweep is reproducible. An address that leaves the list loses its state (a
//! later list that brings it back starts it afresh: included, multiplier 0, no calls); one that stays keeps
//! it. Not here: subchannel wrappers, the picker that counts calls, the timer itself, and the xDS mapping
//! of Envoy's `OutlierDetection` (all for the channel or later work); Envoy's other detectors (consecutive
//! 5xx and gateway failures), which A50 leaves out.

mod algorithms;
mod config;
mod counter;
mod spared;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use grpc_base::{Address, Rng};

use algorithms::{
    enforced, failure_percentage_outliers, hosts_with_volume, may_eject, not_outlier_reason,
    success_rate_outliers, success_rate_threshold, Outlier, Sample,
};
use counter::CallBuckets;

pub use algorithms::EjectionCause;
pub use config::{
    FailurePercentageEjection, OutlierDetectionConfig, Percentage, SuccessRateEjection,
};
pub use counter::CallCounts;
pub use spared::{NotEjected, NotEjectedReason};

/// The shortest time between two sweeps, whatever `interval` says. A50 allows `interval: "0s"`, which read
/// literally runs the sweep back to back and spins the channel's event loop; a floor of 1 ms keeps a sweep
/// per millisecond at most. Not a gRFC value: a guard against a config that could hang the control plane.
pub const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(1);

/// An address entering or leaving ejection.
#[derive(Clone, Debug, PartialEq)]
pub enum OutlierEvent {
    /// The address is ejected: its subchannels must look TRANSIENT_FAILURE to the child policy.
    Ejected {
        /// The address.
        address: Address,
        /// Which algorithm ejected it, and what it saw.
        cause: EjectionCause,
        /// The address's ejection multiplier, this ejection included (1 for a first ejection).
        multiplier: u32,
        /// The earliest time a sweep returns it: the sweep's time plus `min(base × multiplier, max(base,
        /// maxEjectionTime))`; `None` if that is beyond what an `Instant` can hold (never).
        until: Option<Instant>,
    },
    /// The address is back: its subchannels report their real state again.
    Unejected {
        /// The address.
        address: Address,
        /// Why.
        reason: UnejectReason,
    },
}

/// Why an ejection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnejectReason {
    /// A sweep found its ejection time over.
    Expired,
    /// A config with neither algorithm arrived: every address is un-ejected.
    Disabled,
    /// The address left the address list (its state is gone).
    Removed,
}

/// What the detector knows of one address, for statistics and tracing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressStats {
    /// Calls finished since the last sweep (the active bucket).
    pub current: CallCounts,
    /// Calls of the interval the last sweep judged (the inactive bucket).
    pub last_interval: CallCounts,
    /// The ejection time multiplier: ejections raise it, sweeps that find the address included lower it.
    pub multiplier: u32,
    /// When the address was ejected, if it is.
    pub ejected_since: Option<Instant>,
}

/// Whether an address is ejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ejection {
    /// It takes calls.
    Included,
    /// Ejected by the sweep at `since`.
    Ejected { since: Instant },
}

/// A50's "timer start timestamp": unset while no algorithm is configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    /// No algorithm: no sweeps.
    Stopped,
    /// The last sweep, or the config that started the timer, was at `started`; the next sweep is due an
    /// interval later.
    Running { started: Instant },
}

#[derive(Clone, Debug)]
struct Entry {
    address: Address,
    counter: CallBuckets,
    ejection: Ejection,
    multiplier: u32,
}

impl Entry {
    fn new(address: Address) -> Entry {
        Entry {
            address,
            counter: CallBuckets::default(),
            ejection: Ejection::Included,
            multiplier: 0,
        }
    }

    fn is_ejected(&self) -> bool {
        matches!(self.ejection, Ejection::Ejected { .. })
    }

    fn stats(&self) -> AddressStats {
        AddressStats {
            current: self.counter.current(),
            last_interval: self.counter.last_interval(),
            multiplier: self.multiplier,
            ejected_since: match self.ejection {
                Ejection::Included => None,
                Ejection::Ejected { since } => Some(since),
            },
        }
    }
}

/// The A50 outlier detector for one policy's address list. See the module docs for the call order.
#[derive(Clone, Debug)]
pub struct OutlierDetector {
    config: OutlierDetectionConfig,
    /// In the order of the last address list.
    entries: Vec<Entry>,
    /// Address → index in `entries`.
    index: HashMap<Address, usize>,
    timer: Timer,
    events: VecDeque<OutlierEvent>,
    /// The last sweep's addresses with failures that stayed in service (at most one per address).
    not_ejected: VecDeque<NotEjected>,
}

impl OutlierDetector {
    /// A detector with `config` applied at `now` and no addresses yet.
    pub fn new(config: OutlierDetectionConfig, now: Instant) -> OutlierDetector {
        let mut detector = OutlierDetector {
            config: OutlierDetectionConfig::default(),
            entries: Vec::new(),
            index: HashMap::new(),
            timer: Timer::Stopped,
            events: VecDeque::new(),
            not_ejected: VecDeque::new(),
        };
        detector.update_config(config, now);
        detector
    }

    /// The config in force.
    pub fn config(&self) -> &OutlierDetectionConfig {
        &self.config
    }

    /// Whether an algorithm is configured: only then are calls counted and sweeps run.
    pub fn is_enabled(&self) -> bool {
        self.config.is_enabled()
    }

    /// A new config at `now` (A50). With an algorithm: if the timer was stopped it starts now and every
    /// counter is emptied; if it was running it keeps its start, so the next sweep is due at that start
    /// plus the new interval (at once if that is past). With neither algorithm: the timer stops, every
    /// ejected address is un-ejected ([`UnejectReason::Disabled`]) and every multiplier and counter goes
    /// back to 0 (grpc-go and C-core do this; A50 only says to stop the timer).
    pub fn update_config(&mut self, config: OutlierDetectionConfig, now: Instant) {
        if config.is_enabled() {
            if self.timer == Timer::Stopped {
                self.timer = Timer::Running { started: now };
                for entry in &mut self.entries {
                    entry.counter.reset();
                }
            }
        } else {
            self.timer = Timer::Stopped;
            for entry in &mut self.entries {
                if entry.is_ejected() {
                    entry.ejection = Ejection::Included;
                    self.events.push_back(OutlierEvent::Unejected {
                        address: entry.address.clone(),
                        reason: UnejectReason::Disabled,
                    });
                }
                entry.multiplier = 0;
                entry.counter.reset();
            }
        }
        self.config = config;
    }

    /// A new address list (the one the child policy gets). Addresses already known keep their counters,
    /// ejection and multiplier; new ones start included with multiplier 0; those not in the list are
    /// forgotten, an ejected one with [`UnejectReason::Removed`]. A repeated address counts once.
    pub fn update_addresses(&mut self, addresses: impl IntoIterator<Item = Address>) {
        let mut old: HashMap<Address, Entry> = self
            .entries
            .drain(..)
            .map(|e| (e.address.clone(), e))
            .collect();
        self.index.clear();
        for address in addresses {
            if self.index.contains_key(&address) {
                continue;
            }
            let entry = old
                .remove(&address)
                .unwrap_or_else(|| Entry::new(address.clone()));
            self.index.insert(address, self.entries.len());
            self.entries.push(entry);
        }
        // Report removals in a stable order: the old map's order is arbitrary.
        let mut removed: Vec<Entry> = old.into_values().filter(Entry::is_ejected).collect();
        removed.sort_by(|a, b| a.address.cmp(&b.address));
        for entry in removed {
            self.events.push_back(OutlierEvent::Unejected {
                address: entry.address,
                reason: UnejectReason::Removed,
            });
        }
    }

    /// A call finished on a subchannel of `address`: OK is a success, any other status a failure.
    /// Ignored while no algorithm is configured, and for an address not in the list.
    pub fn record(&mut self, address: &Address, success: bool) {
        if !self.is_enabled() {
            return;
        }
        if let Some(&i) = self.index.get(address) {
            if let Some(entry) = self.entries.get_mut(i) {
                entry.counter.record(success);
            }
        }
    }

    /// Several calls finished on subchannels of `address` ([`OutlierDetector::record`] for each, at once):
    /// for a channel that counts calls elsewhere and hands the totals over before each sweep.
    pub fn record_counts(&mut self, address: &Address, counts: CallCounts) {
        if !self.is_enabled() {
            return;
        }
        if let Some(&i) = self.index.get(address) {
            if let Some(entry) = self.entries.get_mut(i) {
                entry.counter.add(counts);
            }
        }
    }

    /// When the next sweep is due: `None` while no algorithm is configured (or if the time is beyond what an
    /// `Instant` holds). It may be in the past after a config shortened the interval: fire at once.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.timer {
            Timer::Stopped => None,
            Timer::Running { started } => {
                started.checked_add(self.config.interval.max(MIN_SWEEP_INTERVAL))
            }
        }
    }

    /// Runs the sweep if it is due at `now` (nothing otherwise); drain [`OutlierDetector::poll_event`]
    /// afterwards.
    pub fn handle_timeout(&mut self, now: Instant, rng: &mut dyn Rng) {
        if self.poll_timeout().is_some_and(|due| now >= due) {
            self.sweep(now, rng);
        }
    }

    /// The next ejection or un-ejection, until `None`.
    pub fn poll_event(&mut self) -> Option<OutlierEvent> {
        self.events.pop_front()
    }

    /// The next address the last sweep left in service although it had failures, with the reasons, until
    /// `None`: at most one per address per sweep, and only the last sweep's (a sweep drops what was not
    /// drained of the one before), so never more than the address list.
    pub fn poll_not_ejected(&mut self) -> Option<NotEjected> {
        self.not_ejected.pop_front()
    }

    /// Whether `address` is ejected (an unknown address is not).
    pub fn is_ejected(&self, address: &Address) -> bool {
        self.entry(address).is_some_and(Entry::is_ejected)
    }

    /// The ejected addresses, in address-list order.
    pub fn ejected(&self) -> impl Iterator<Item = &Address> + '_ {
        self.entries
            .iter()
            .filter(|e| e.is_ejected())
            .map(|e| &e.address)
    }

    /// What the detector knows of `address`, if it is in the list.
    pub fn stats(&self, address: &Address) -> Option<AddressStats> {
        self.entry(address).map(Entry::stats)
    }

    /// Every address with its statistics, in address-list order.
    pub fn addresses(&self) -> impl Iterator<Item = (&Address, AddressStats)> + '_ {
        self.entries.iter().map(|e| (&e.address, e.stats()))
    }

    fn entry(&self, address: &Address) -> Option<&Entry> {
        self.index.get(address).and_then(|&i| self.entries.get(i))
    }

    /// A50's timer callback, at `now`.
    fn sweep(&mut self, now: Instant, rng: &mut dyn Rng) {
        self.timer = Timer::Running { started: now };
        for entry in &mut self.entries {
            entry.counter.swap();
        }
        let mut samples: Vec<Sample> = self
            .entries
            .iter()
            .map(|e| Sample {
                counts: e.counter.last_interval(),
                ejected: e.is_ejected(),
            })
            .collect();
        self.not_ejected.clear();
        // Why each address was not ejected, by algorithm: [success rate, failure percentage].
        let mut spared: HashMap<usize, [Option<NotEjectedReason>; 2]> = HashMap::new();
        if let Some(config) = self.config.success_rate {
            let outliers = success_rate_outliers(&config, &samples);
            let threshold = success_rate_threshold(&config, &samples);
            let refused = self.eject(
                outliers,
                config.enforcement_percentage,
                &mut samples,
                now,
                rng,
            );
            note_spared(
                &samples,
                &refused,
                (config.request_volume, config.minimum_hosts),
                NotEjectedReason::SuccessRateNotBelowThreshold { threshold },
                &mut spared,
                0,
            );
        }
        if let Some(config) = self.config.failure_percentage {
            let outliers = failure_percentage_outliers(&config, &samples);
            let refused = self.eject(
                outliers,
                config.enforcement_percentage,
                &mut samples,
                now,
                rng,
            );
            note_spared(
                &samples,
                &refused,
                (config.request_volume, config.minimum_hosts),
                NotEjectedReason::FailurePercentageNotAboveThreshold {
                    threshold: config.threshold.get(),
                },
                &mut spared,
                1,
            );
        }
        // In address-list order; an address the second algorithm ejected is not listed.
        for (i, (entry, sample)) in self.entries.iter().zip(&samples).enumerate() {
            if sample.ejected {
                continue;
            }
            if let Some([success_rate, failure_percentage]) = spared.remove(&i) {
                self.not_ejected.push_back(NotEjected::new(
                    entry.address.clone(),
                    sample.counts,
                    success_rate,
                    failure_percentage,
                ));
            }
        }
        for entry in &mut self.entries {
            match entry.ejection {
                Ejection::Included => entry.multiplier = entry.multiplier.saturating_sub(1),
                Ejection::Ejected { since } => {
                    // `since < now`: an address this sweep ejected stays out until a later one, even with
                    // `baseEjectionTime: 0` (C-core's strict comparison gives the same).
                    //
                    // At or after the deadline: A50 says "after". An injected clock makes a sweep land
                    // exactly on it (ejected at 10 s for 30 s, swept at 40 s), where "after" would keep
                    // the address out a whole extra interval; real timers fire a little late, so the
                    // stacks return it at that sweep, and so does this.
                    let due = since.checked_add(self.config.ejection_duration(entry.multiplier));
                    if since < now && due.is_some_and(|due| now >= due) {
                        entry.ejection = Ejection::Included;
                        self.events.push_back(OutlierEvent::Unejected {
                            address: entry.address.clone(),
                            reason: UnejectReason::Expired,
                        });
                    }
                }
            }
        }
    }

    /// Ejects `outliers` in order, each if `maxEjectionPercent` still allows one more and the draw passes;
    /// the first refusal by the limit ends the algorithm (A50's "stop"). Returns the outliers left in
    /// service, by index, with the reason (the limit, or the draw).
    fn eject(
        &mut self,
        outliers: Vec<Outlier>,
        enforcement: Percentage,
        samples: &mut [Sample],
        now: Instant,
        rng: &mut dyn Rng,
    ) -> HashMap<usize, NotEjectedReason> {
        let total = self.entries.len();
        let mut ejected = samples.iter().filter(|s| s.ejected).count();
        let mut refused = HashMap::new();
        let mut limit_reached = false;
        for outlier in outliers {
            if limit_reached || !may_eject(ejected, total, self.config.max_ejection_percent) {
                limit_reached = true;
                refused.insert(
                    outlier.index,
                    NotEjectedReason::MaxEjectionPercent {
                        ejected,
                        total,
                        max_ejection_percent: self.config.max_ejection_percent.get(),
                    },
                );
                continue;
            }
            if !enforced(enforcement, rng) {
                refused.insert(
                    outlier.index,
                    NotEjectedReason::EnforcementDraw {
                        enforcement_percentage: enforcement.get(),
                    },
                );
                continue;
            }
            let (Some(entry), Some(sample)) = (
                self.entries.get_mut(outlier.index),
                samples.get_mut(outlier.index),
            ) else {
                continue;
            };
            entry.ejection = Ejection::Ejected { since: now };
            entry.multiplier = entry.multiplier.saturating_add(1);
            sample.ejected = true;
            ejected += 1;
            self.events.push_back(OutlierEvent::Ejected {
                address: entry.address.clone(),
                cause: outlier.cause,
                multiplier: entry.multiplier,
                until: now.checked_add(self.config.ejection_duration(entry.multiplier)),
            });
        }
        refused
    }
}

/// Notes in `slot` of `spared` (0: success rate, 1: failure percentage) why each address with failures
/// that one algorithm's pass left in service was not ejected: the reason [`OutlierDetector::eject`] gave for
/// an outlier it refused, else too few calls, too few addresses with enough calls, or `otherwise` (its rate
/// was no outlier's), by the algorithm's (`requestVolume`, `minimumHosts`).
fn note_spared(
    samples: &[Sample],
    refused: &HashMap<usize, NotEjectedReason>,
    (request_volume, minimum_hosts): (u32, u32),
    otherwise: NotEjectedReason,
    spared: &mut HashMap<usize, [Option<NotEjectedReason>; 2]>,
    slot: usize,
) {
    let hosts = hosts_with_volume(samples, request_volume);
    for (i, sample) in samples.iter().enumerate() {
        if sample.ejected || sample.counts.failures == 0 {
            continue;
        }
        let reason = refused.get(&i).copied().unwrap_or_else(|| {
            not_outlier_reason(
                sample.counts.total(),
                hosts,
                request_volume,
                minimum_hosts,
                otherwise,
            )
        });
        if let Some(place) = spared.entry(i).or_default().get_mut(slot) {
            *place = Some(reason);
        }
    }
}
