//! The event loop's per-address call results: outlier detection (gRFC A50) as the loop drives it (its
//! config, the sweep with the counts calls made, the ejections and returns it applies to the policy, and
//! the DEBUG event for each address a sweep left in service despite failures), and the counters and
//! subchannel states `Channel::stats()` shows per address. Methods of [`Loop`] only.
//!
//! Not here: the counters themselves (`control/outlier.rs`), the per-address table
//! (`control/address_stats.rs`), the loop itself (`event_loop.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use grpc_lb::{
    Address, ConnectivityState, OutlierDetectionConfig, OutlierDetectors, OutlierEvent,
    OutlierScope, SubchannelId, XdsClustersConfig,
};

use super::Loop;
use crate::control::outlier::{trace_not_ejected, CallResults};
use crate::control::resolver_state::Routing;

impl Loop {
    /// The outlier detection scopes of a resolution: the service config's `config` over every address, or
    /// with an xDS `routing` each cluster's own over its endpoints.
    pub(super) fn outlier_scopes(
        &self,
        routing: Option<&Routing>,
        config: Option<OutlierDetectionConfig>,
    ) -> Vec<OutlierScope> {
        match (routing, config) {
            (Some(r), _) => cluster_outlier_scopes(&r.clusters),
            (None, Some(config)) => vec![OutlierScope::new(
                String::new(),
                config,
                self.addresses.clone(),
            )],
            (None, None) => Vec::new(),
        }
    }

    /// The outlier detection scopes now in force at `now` (none: detection ends): the detectors are
    /// created, updated or dropped; the policy is left alone.
    pub(super) fn update_outlier(&mut self, scopes: Vec<OutlierScope>, now: std::time::Instant) {
        let Some(a) = self.activity.active() else {
            return;
        };
        if scopes.is_empty() {
            if a.outlier.is_some() {
                self.drop_outlier(now);
            }
            return;
        }
        a.outlier
            .get_or_insert_with(OutlierDetectors::new)
            .update(scopes, now);
    }

    /// Outlier detection ends (no config, or the channel goes IDLE): every ejected address returns.
    pub(super) fn drop_outlier(&mut self, now: std::time::Instant) {
        if let Some(a) = self.activity.active() {
            if let Some(d) = a.outlier.take() {
                for (scope, detector) in d.scopes() {
                    for address in detector.ejected() {
                        if let Some(p) = &mut a.policy {
                            Loop::set_ejected(&mut p.lb, scope, address, false, now);
                        }
                    }
                }
                for address in d.ejected() {
                    let ejected_for = self
                        .ejected_since
                        .get(address)
                        .map(|since| now.saturating_duration_since(*since));
                    tracing::info!(%address, reason = "outlier detection is off", ?ejected_for, "outlier detection returns the address");
                }
            }
        }
        self.stats.ejections.clear();
        self.ejected_since.clear();
    }

    /// The detector's sweep, if due: the calls counted since the last one go in first.
    pub(super) fn sweep(&mut self, now: std::time::Instant) {
        let Some(d) = self.activity.outlier() else {
            return;
        };
        if d.poll_timeout().is_none_or(|due| due > now) {
            return;
        }
        if self.cluster_results.is_empty() {
            for (address, results) in &self.results {
                d.record_counts(address, results.take());
            }
        } else {
            // xDS: each cluster's detector counts that cluster's calls only.
            for results in self.results.values() {
                results.take();
            }
            for (scope, addresses) in &self.cluster_results {
                for (address, results) in addresses {
                    d.record_scope_counts(scope, address, results.take());
                }
            }
        }
        d.handle_timeout(now, &mut self.rng);
        while let Some(note) = d.poll_not_ejected() {
            trace_not_ejected(&note);
        }
        self.apply_outlier_events(now);
    }

    /// Gives the detector's ejections and un-ejections to the policy, tracing and the stats.
    pub(super) fn apply_outlier_events(&mut self, now: std::time::Instant) {
        let Some(a) = self.activity.active() else {
            return;
        };
        let Some(d) = a.outlier.as_mut() else {
            return;
        };
        while let Some(event) = d.poll_event() {
            match event {
                OutlierEvent::Ejected {
                    address,
                    cause,
                    multiplier,
                    until,
                } => {
                    let duration = until.map(|until| until.saturating_duration_since(now));
                    tracing::info!(%address, ?cause, multiplier, ?duration, "outlier detection ejects the address");
                    self.stats.ejections.ejected(address.to_string());
                    self.ejected_since.insert(address.clone(), now);
                }
                OutlierEvent::Unejected { address, reason } => {
                    let ejected_for = self
                        .ejected_since
                        .remove(&address)
                        .map(|since| now.saturating_duration_since(since));
                    tracing::info!(%address, ?reason, ?ejected_for, "outlier detection returns the address");
                    self.stats.ejections.unejected(&address.to_string());
                }
            }
        }
        // The policy follows each scope's own ejections.
        while let Some(e) = d.poll_scoped_event() {
            if let Some(p) = &mut a.policy {
                Loop::set_ejected(&mut p.lb, &e.scope, &e.address, e.ejected, now);
            }
        }
    }

    /// Keeps a call-results counter for each address in the list (the per-address stats count into it;
    /// outlier detection takes its counts while it has an algorithm, and starts from zero when it gets
    /// one), and publishes the picker again if that changed which handles count.
    pub(super) fn sync_results(&mut self) {
        let counting = self.activity.outlier().is_some_and(|d| d.is_enabled());
        if counting && !self.outlier_counting {
            // What was counted before detection started is no interval's.
            for results in self.results.values() {
                results.take();
            }
            for results in self.cluster_results.values().flat_map(HashMap::values) {
                results.take();
            }
        }
        self.outlier_counting = counting;
        let before = self.results.len();
        let mut changed = false;
        let current: std::collections::HashSet<&Address> = self.addresses.iter().collect();
        self.results.retain(|a, _| current.contains(a));
        changed |= self.results.len() != before;
        for address in &self.addresses {
            if !self.results.contains_key(address) {
                self.results
                    .insert(address.clone(), Arc::new(CallResults::default()));
                changed = true;
            }
        }
        changed |= self.sync_cluster_results();
        self.stats.addresses.sync(&self.results);
        // Subchannels of a policy that is gone (a switch, a panic) say nothing more.
        let (tasks, conns) = (&self.tasks, &self.conns);
        self.subchannel_addresses
            .retain(|id, _| tasks.contains_key(id) || conns.contains_key(id));
        // While a new policy connects (a graceful switch), the retired one's picker serves and the new one
        // publishes when it has something to show: publishing the current spec here would end the switch
        // early, with no connection to serve.
        if changed && !self.activity.is_idle() && self.retired.is_none() {
            let (state, spec) = self.spec.clone();
            self.publish(state, spec);
        }
    }

    /// Keeps a counter per address of each xDS cluster with outlier detection (its detector's scope),
    /// drops the others; whether that changed anything.
    fn sync_cluster_results(&mut self) -> bool {
        let Some(d) = self.activity.outlier() else {
            let changed = !self.cluster_results.is_empty();
            self.cluster_results.clear();
            return changed;
        };
        let mut changed = false;
        let mut next: HashMap<String, HashMap<Address, Arc<CallResults>>> = HashMap::new();
        for (scope, detector) in d.scopes() {
            if scope.is_empty() {
                continue;
            }
            let mut old = self.cluster_results.remove(scope).unwrap_or_default();
            let mut kept = HashMap::new();
            for (address, _) in detector.addresses() {
                let Some(parent) = self.results.get(address) else {
                    continue;
                };
                let counter = match old.remove(address) {
                    Some(c) => c,
                    None => {
                        changed = true;
                        Arc::new(CallResults::in_cluster(parent.clone()))
                    }
                };
                kept.insert(address.clone(), counter);
            }
            changed |= !old.is_empty();
            next.insert(scope.to_owned(), kept);
        }
        changed |= !self.cluster_results.is_empty();
        self.cluster_results = next;
        changed
    }

    /// Applies one scope's ejection (`ejected`) or return of `address` to the policy: the channel's own scope
    /// (empty name) through the policy's per-address overlay, an xDS cluster's to that cluster's picks only.
    pub(super) fn set_ejected(
        lb: &mut grpc_lb::LbPolicy,
        scope: &str,
        address: &Address,
        ejected: bool,
        now: std::time::Instant,
    ) {
        match (scope.is_empty(), ejected) {
            (true, true) => lb.eject(address, now),
            (true, false) => lb.uneject(address, now),
            (false, _) => lb.set_ejected_in_cluster(scope, address, ejected, now),
        }
    }

    /// The subchannel `id` is now in `state`, as `Channel::stats()` shows its address.
    pub(super) fn set_subchannel_state(&self, id: SubchannelId, state: ConnectivityState) {
        if let Some(addr) = self.subchannel_addresses.get(&id) {
            self.stats.addresses.set_state(addr, id, state);
        }
    }
}

/// The outlier detection scopes of xDS clusters: one per cluster with an `outlier_detection`, over the
/// cluster's endpoint addresses (a cluster without one ejects nothing).
fn cluster_outlier_scopes(clusters: &XdsClustersConfig) -> Vec<OutlierScope> {
    clusters
        .clusters
        .iter()
        .filter_map(|(name, cluster)| {
            let config = cluster.outlier_detection.clone()?;
            let addresses = cluster
                .priorities
                .iter()
                .flat_map(|p| p.localities.iter())
                .flat_map(|l| l.addresses.iter().cloned())
                .collect();
            Some(OutlierScope::new(name.clone(), config, addresses))
        })
        .collect()
}
