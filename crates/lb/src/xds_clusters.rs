//! The xDS cluster manager (`beyond-a6.md` §6, gRFCs A28 and A31): one child per cluster name, each a
//! priority policy (`priority.rs`) over weighted targets of round_robin localities or over ring_hash
//! children (A42, `ring_hash.rs`), as the cluster's `lb_policy` says, all sharing the
//! policy's subchannel table: one subchannel per distinct address across every cluster, priority and
//! locality, so two clusters with a common endpoint share its connection.
//!
//! The aggregate state is READY if any cluster is READY, else CONNECTING if any is, else IDLE if any is,
//! else TRANSIENT_FAILURE (also without clusters); a cluster that reported TRANSIENT_FAILURE counts as such
//! until it is READY again. The picker ([`PickerSpec::Clusters`], `cluster_picker.rs`) holds what each
//! cluster's chosen priority says, with its drops, circuit-breaking limit and in-flight counter.
//!
//! A cluster removed from the config goes at once (grpc-go's choice; C-core keeps it 15 minutes): calls
//! that name it afterwards fail. The config's owner keeps a cluster in it while calls need it (A28: the
//! channel's xDS resolver keeps each cluster an uncommitted call was routed to). A config update keeps the subchannel (and the connection) of every address
//! still used anywhere, and a cluster's in-flight counter lives as long as the cluster (A32: a Cluster
//! update does not reset it). Subchannels no existing child uses are removed (and disconnected) after each
//! event. A failed or lost connection asks for re-resolution, as round_robin does. The message of a failed
//! cluster names the cluster and priority and carries the policy's latest connection error (which may be
//! another cluster's: errors are not kept per endpoint).
//!
//! Not here: client-side health checking (the overlay stays off for this policy), load reporting (LRS),
//! and the channel's use of [`crate::CallGuard`] for the call's life.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use grpc_base::Address;

use crate::cluster_picker::{CallCounter, ClusterPick, ClusterPickerSpec};
use crate::picker::PickerSpec;
use crate::priority::{ChildPolicy, Priority};
use crate::state::ConnectivityState;
use crate::subchannel::{LbAction, SubchannelId, Subchannels, TimerEvent};
use crate::xds_config::{DropOverload, XdsClustersConfig};

struct Cluster {
    priority: Priority,
    drops: Vec<DropOverload>,
    max_requests: u32,
    /// Set: the cluster fails its calls with this message.
    failure: Option<String>,
    in_flight: CallCounter,
    /// The state counted in the aggregate (sticky TRANSIENT_FAILURE).
    reported: ConnectivityState,
}

pub(crate) struct XdsClusters {
    pub(crate) subs: Subchannels,
    clusters: BTreeMap<String, Cluster>,
    published: Option<(ConnectivityState, PickerSpec)>,
}

impl XdsClusters {
    pub(crate) fn new(subs: Subchannels) -> XdsClusters {
        XdsClusters {
            subs,
            clusters: BTreeMap::new(),
            published: None,
        }
    }

    pub(crate) fn state(&self) -> ConnectivityState {
        self.published
            .as_ref()
            .map_or(ConnectivityState::Idle, |(s, _)| *s)
    }

    /// A new cluster configuration: clusters missing from it go at once; the others keep their children,
    /// timers and counters, with their new priorities.
    pub(crate) fn update_clusters(&mut self, config: XdsClustersConfig, now: Instant) {
        self.clusters
            .retain(|name, _| config.clusters.contains_key(name));
        for (name, c) in config.clusters {
            let cluster = self.clusters.entry(name).or_insert_with(|| Cluster {
                priority: Priority::new(),
                drops: Vec::new(),
                max_requests: c.max_requests,
                failure: None,
                in_flight: CallCounter::default(),
                reported: ConnectivityState::Connecting,
            });
            cluster
                .priority
                .update(c.lb, c.priorities, &mut self.subs, now);
            cluster.drops = c.drop_overloads;
            cluster.max_requests = c.max_requests;
            cluster.failure = c.failure;
        }
        self.refresh(now);
    }

    /// The address list of a resolver: not used by this policy (its addresses come with the clusters).
    pub(crate) fn update(&mut self, _addresses: Vec<Address>, _now: Instant) {}

    /// Leaves IDLE: ring_hash children connect an endpoint if none is connecting or connected (round_robin
    /// children connect every endpoint anyway).
    pub(crate) fn exit_idle(&mut self, now: Instant) {
        for c in self.clusters.values_mut() {
            c.priority.exit_idle();
        }
        self.refresh(now);
    }

    pub(crate) fn subchannel_ready(&mut self, id: SubchannelId, now: Instant) {
        if self.subs.ready(id) {
            self.refresh(now);
        }
    }

    pub(crate) fn subchannel_failed(&mut self, id: SubchannelId, error: String, now: Instant) {
        if self.subs.failed(id, error, now) {
            self.subs.out.push_back(LbAction::ResolveNow);
            self.refresh(now);
        }
    }

    pub(crate) fn subchannel_closed(&mut self, id: SubchannelId, now: Instant) {
        if self.subs.closed(id) {
            self.subs.out.push_back(LbAction::ResolveNow);
            self.refresh(now);
        }
    }

    /// Outlier detection ejected `addr`, or returned it: the localities follow.
    pub(crate) fn ejection_changed(&mut self, _addr: &Address, now: Instant) {
        self.refresh(now);
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.clusters
            .values()
            .filter_map(|c| c.priority.poll_timeout())
            .chain(self.subs.poll_timeout())
            .min()
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        for event in self.subs.handle_timeout(now) {
            if let TimerEvent::ConnectTimedOut(_) = event {
                self.subs.out.push_back(LbAction::ResolveNow);
            }
        }
        for c in self.clusters.values_mut() {
            c.priority.handle_timeout(now);
        }
        self.refresh(now);
    }

    /// Drops the subchannels no child uses any more (their cluster, priority or locality is gone); connects
    /// the IDLE ones (new, backoff over, connection lost) of round_robin children, since round_robin keeps
    /// every backend connected (ring_hash children connect theirs as picks and their rules ask); reruns
    /// each cluster's priorities (which may create children, with their subchannels connecting);
    /// publishes the picker if it changed.
    fn refresh(&mut self, now: Instant) {
        let children = || self.clusters.values().flat_map(|c| c.priority.children());
        let used: HashSet<&Address> = children()
            .flat_map(|child| child.target.addresses())
            .collect();
        let eager: HashSet<&Address> = children()
            .filter(|child| matches!(child.target, ChildPolicy::RoundRobin(_)))
            .flat_map(|child| child.target.addresses())
            .collect();
        let stale: Vec<SubchannelId> = self
            .subs
            .iter()
            .filter(|s| !used.contains(&s.addr))
            .map(|s| s.id)
            .collect();
        for id in stale {
            self.subs.remove(id);
        }
        let idle: Vec<SubchannelId> = self
            .subs
            .iter()
            .filter(|s| s.state == ConnectivityState::Idle && eager.contains(&s.addr))
            .map(|s| s.id)
            .collect();
        for id in idle {
            self.subs.connect(id, now);
        }
        for c in self.clusters.values_mut() {
            c.priority.refresh(&mut self.subs, now);
        }
        self.publish();
    }

    fn publish(&mut self) {
        let mut specs = BTreeMap::new();
        for (name, c) in &mut self.clusters {
            let (state, pick) = cluster_pick(name, c, &self.subs);
            let sticky = c.reported == ConnectivityState::TransientFailure
                && matches!(
                    state,
                    ConnectivityState::Connecting | ConnectivityState::Idle
                );
            if !sticky {
                c.reported = state;
            }
            specs.insert(
                name.clone(),
                ClusterPickerSpec {
                    state: pick,
                    drops: c.drops.clone(),
                    max_requests: c.max_requests,
                    in_flight: c.in_flight.clone(),
                },
            );
        }
        let state = ConnectivityState::aggregate(self.clusters.values().map(|c| c.reported));
        let next = (state, PickerSpec::Clusters(specs));
        if self.published.as_ref() != Some(&next) {
            self.subs.out.push_back(LbAction::UpdatePicker {
                state: next.0,
                picker: next.1.clone(),
            });
            self.published = Some(next);
        }
    }
}

/// A cluster's state and picker: those of its chosen priority.
fn cluster_pick(name: &str, c: &Cluster, subs: &Subchannels) -> (ConnectivityState, ClusterPick) {
    if let Some(failure) = &c.failure {
        return (
            ConnectivityState::TransientFailure,
            ClusterPick::Fail(format!("cluster {name}: {failure}")),
        );
    }
    let Some((p, child)) = c.priority.selected() else {
        return (
            ConnectivityState::TransientFailure,
            ClusterPick::Fail(format!(
                "cluster {name}: priority policy has empty priority list"
            )),
        );
    };
    let target = match &child.target {
        ChildPolicy::RingHash(ring) if child.target.has_addresses() => {
            let failure = format!(
                "cluster {name}: ring_hash: failed to connect to all endpoints of priority {p}; last error: {}",
                subs.last_error.as_deref().unwrap_or("none")
            );
            return (child.state, ClusterPick::Ring(ring.pick_spec(failure)));
        }
        ChildPolicy::RingHash(_) => None,
        ChildPolicy::RoundRobin(target) => Some(target),
    };
    let pick = match child.state {
        ConnectivityState::Ready => {
            ClusterPick::Ready(target.map(|t| t.ready(subs)).unwrap_or_default())
        }
        ConnectivityState::Idle => ClusterPick::Idle,
        ConnectivityState::Connecting => ClusterPick::Queue,
        ConnectivityState::TransientFailure | ConnectivityState::Shutdown => {
            ClusterPick::Fail(if child.target.has_addresses() {
                format!(
                    "cluster {name}: failed to connect to all addresses of priority {p}; last error: {}",
                    subs.last_error.as_deref().unwrap_or("none")
                )
            } else {
                format!("cluster {name}: priority {p} has no endpoints")
            })
        }
    };
    (child.state, pick)
}
