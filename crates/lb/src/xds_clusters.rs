//! The xDS cluster manager (`beyond-a6.md` §6, gRFCs A28 and A31): one child per cluster name, each a
//! priority policy (`priority.rs`) over weighted targets of round_robin localities or over ring_hash
//! children (A42, `ring_hash.rs`), as the cluster's `lb_policy` says, all sharing the
//! policy's subchannel table: one subchannel per distinct address across every cluster, priority and
//! locality, so two clusters with a common endpoint share its connection. An aggregate cluster
//! ([`crate::ClusterConfig::leaves`], A37/A75) has no children: its picker delegates to its leaves, and
//! its state is that of its first leaf not in TRANSIENT_FAILURE.
//!
//! The aggregate state is READY if any cluster is READY, else CONNECTING if any is, else IDLE if any is,
//! else TRANSIENT_FAILURE (also without clusters); a cluster that reported TRANSIENT_FAILURE counts as such
//! until it is READY again. The picker ([`PickerSpec::Clusters`], `cluster_picker.rs`) holds what each
//! cluster's chosen priority says, with its drops, circuit-breaking limit and in-flight counter.
//!
//! A cluster removed from the config goes at once (grpc-go's choice; C-core keeps it 15 minutes): calls
//! that name it afterwards fail. The config's owner keeps a cluster in it while calls need it (A28: the
//! channel's xDS resolver keeps each cluster an uncommitted call was routed to). A config update keeps
//! the subchannel (and the connection) of every address still used anywhere, and a cluster's in-flight
//! counter lives as long as the cluster (A32: a Cluster update does not reset it). Subchannels no existing
//! child uses are removed (and disconnected) once a config update or the end of a deactivated child's
//! retention left them unused. An event looks at the subchannels it changed only (each child counts its
//! endpoints' states), and a cluster's picker is built again only when what it shows changed. A failed or
//! lost connection asks for re-resolution, as round_robin does. The message of a failed cluster names the
//! cluster and priority and carries the latest connection error among that priority's own subchannels
//! (each subchannel keeps its last error; another cluster's errors never show).
//!
//! A cluster's own outlier detection (A50's xDS mapping) ejects addresses from that cluster only: its
//! children count an ejected endpoint as TRANSIENT_FAILURE (the ejection overlay, `ejections.rs`
//! [`Ejections`]), so round_robin localities and ring_hash picks skip it and a priority whose every
//! endpoint is ejected fails over (A56); an ejection change recounts that cluster's children only.
//!
//! Not here: client-side health checking (the overlay stays off for this policy), load reporting (LRS),
//! and the channel's use of [`crate::BreakerClaim`] for the call's life.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Instant;

use grpc_base::Address;

use crate::action::{LbAction, TimerEvent};
use crate::cluster_picker::{ClusterPick, ClusterPickerSpec, ReadyLocality};
use crate::ejections::Ejections;
use crate::pick::InFlightCounter;
use crate::picker::PickerSpec;
use crate::priority::{Changes, ChildPolicy, Priority};
use crate::state::{ConnectivityState, SubchannelId};
use crate::subchannel::Subchannels;
use crate::transport::TransportKey;
use crate::work::{rebuilt, visit};
use crate::xds_config::{DropOverload, XdsClustersConfig};

struct Cluster {
    priority: Priority,
    drops: Vec<DropOverload>,
    max_requests: u32,
    /// Set: the cluster fails its calls with this message.
    failure: Option<String>,
    in_flight: InFlightCounter,
    /// The state counted in the aggregate (sticky TRANSIENT_FAILURE).
    reported: ConnectivityState,
    /// What the last picker showed for the cluster.
    spec: Option<ClusterPickerSpec>,
    /// The round_robin priority whose READY localities `spec` lists, if it does.
    built_for: Option<usize>,
    /// Non-empty: an aggregate cluster over these leaf clusters (no priorities of its own).
    leaves: Vec<String>,
    /// All its addresses are one endpoint ([`crate::ClusterConfig::single_endpoint`]).
    single_endpoint: bool,
    /// With `single_endpoint`: the address its calls go to while it is READY.
    chosen: Option<Address>,
    /// Its subchannels whose ejection by the cluster's outlier detection changed since its children last
    /// looked.
    ejection_changed: BTreeSet<SubchannelId>,
}

pub(crate) struct XdsClusters {
    pub(crate) subs: Subchannels,
    clusters: BTreeMap<String, Cluster>,
    published: Option<(ConnectivityState, PickerSpec)>,
    /// The clusters, priorities or localities changed (a config, a child gone): the next refresh looks at
    /// every subchannel.
    membership_changed: bool,
    /// A new config: the next picker is compared whole with the last.
    config_changed: bool,
    /// Per cluster, the addresses its own outlier detection ejects from its picks (A50's xDS mapping:
    /// one detector per cluster, its ejections applied to that cluster only).
    ejected: HashMap<String, HashSet<Address>>,
}

impl XdsClusters {
    pub(crate) fn new(mut subs: Subchannels) -> XdsClusters {
        subs.track_changes();
        XdsClusters {
            subs,
            clusters: BTreeMap::new(),
            published: None,
            membership_changed: false,
            config_changed: false,
            ejected: HashMap::new(),
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
                in_flight: InFlightCounter::default(),
                reported: ConnectivityState::Connecting,
                spec: None,
                built_for: None,
                leaves: Vec::new(),
                single_endpoint: false,
                chosen: None,
                ejection_changed: BTreeSet::new(),
            });
            cluster
                .priority
                .update(c.lb, c.transport, c.priorities, &mut self.subs, now);
            cluster.drops = c.drop_overloads;
            cluster.max_requests = c.max_requests;
            cluster.failure = c.failure;
            cluster.leaves = c.leaves;
            cluster.single_endpoint = c.single_endpoint;
        }
        self.membership_changed = true;
        self.config_changed = true;
        self.refresh(now);
    }

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

    /// The outlier detection of `cluster` ejected `addr` from the cluster's picks (`ejected`), or
    /// returned it: only that cluster's children count it again (as TRANSIENT_FAILURE while ejected, so a
    /// priority whose every endpoint is ejected fails over); the subchannel stays connected, and other
    /// clusters keep picking it.
    pub(crate) fn cluster_ejection_changed(
        &mut self,
        cluster: &str,
        addr: &Address,
        ejected: bool,
        now: Instant,
    ) {
        let changed = if ejected {
            self.ejected
                .entry(cluster.to_owned())
                .or_default()
                .insert(addr.clone())
        } else {
            let removed = self
                .ejected
                .get_mut(cluster)
                .is_some_and(|set| set.remove(addr));
            if self.ejected.get(cluster).is_some_and(HashSet::is_empty) {
                self.ejected.remove(cluster);
            }
            removed
        };
        if !changed {
            return;
        }
        if let Some(c) = self.clusters.get_mut(cluster) {
            if let Some(id) = self.subs.find_with(addr, c.priority.transport()) {
                c.ejection_changed.insert(id);
            }
        }
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
            if c.priority.handle_timeout(now) {
                self.membership_changed = true;
            }
        }
        self.refresh(now);
    }

    /// Drops the subchannels no child uses any more (their cluster, priority or locality is gone); connects
    /// the IDLE ones (new, backoff over, connection lost) of round_robin children, since round_robin keeps
    /// every backend connected (ring_hash children connect theirs as picks and their rules ask); reruns
    /// each cluster's priorities (which may create children, with their subchannels connecting);
    /// publishes the picker if it changed.
    ///
    /// Only after a change of the clusters, priorities or localities does this look at every subchannel;
    /// otherwise it looks at those that changed (and asks each child about them: the work grows with the
    /// number of clusters and priorities, not of endpoints), and builds a new picker only if one changed
    /// what picks see.
    fn refresh(&mut self, now: Instant) {
        let mut changes = Changes {
            round: self.subs.take_changed(),
            ..Changes::default()
        };
        if std::mem::take(&mut self.membership_changed) {
            self.sweep(now);
        } else {
            for id in &changes.round {
                visit(1);
                let eager = self.subs.real_state(*id) == ConnectivityState::Idle
                    && self
                        .clusters
                        .values()
                        .any(|c| c.priority.connects_eagerly(*id));
                if eager {
                    self.subs.connect(*id, now);
                }
            }
        }
        changes.absorb(&mut self.subs);
        changes.during.clear();
        for (name, c) in &mut self.clusters {
            let ejection_changed = std::mem::take(&mut c.ejection_changed);
            let ejections = Ejections {
                out: self.ejected.get(name.as_str()),
                changed: (!ejection_changed.is_empty()).then_some(&ejection_changed),
            };
            c.priority
                .refresh(&mut changes, &mut self.subs, ejections, now);
        }
        // The children before the one that changed a subchannel see it at the next refresh.
        self.subs.mark_changed(changes.during);
        self.publish();
    }

    /// After a change of the clusters, priorities or localities: removes the subchannels no child uses,
    /// and connects the IDLE ones of round_robin children (O(n)).
    fn sweep(&mut self, now: Instant) {
        // A subchannel is (address, transport): each cluster's children use their cluster's transport.
        let children = || {
            self.clusters.values().flat_map(|c| {
                let transport = c.priority.transport();
                c.priority.children().map(move |child| (child, transport))
            })
        };
        let used: HashSet<(&Address, Option<&TransportKey>)> = children()
            .flat_map(|(child, t)| child.target.addresses().map(move |a| (a, t)))
            .collect();
        let eager: HashSet<(&Address, Option<&TransportKey>)> = children()
            .filter(|(child, _)| matches!(child.target, ChildPolicy::RoundRobin(_)))
            .flat_map(|(child, t)| child.target.addresses().map(move |a| (a, t)))
            .collect();
        let stale: Vec<SubchannelId> = self
            .subs
            .iter()
            .filter(|s| !used.contains(&(&s.addr, s.transport.as_ref())))
            .map(|s| s.id)
            .collect();
        for id in stale {
            self.subs.remove(id);
        }
        let idle: Vec<SubchannelId> = self
            .subs
            .iter()
            .filter(|s| {
                s.state == ConnectivityState::Idle
                    && eager.contains(&(&s.addr, s.transport.as_ref()))
            })
            .map(|s| s.id)
            .collect();
        for id in idle {
            self.subs.connect(id, now);
        }
    }

    fn publish(&mut self) {
        let config_changed = std::mem::take(&mut self.config_changed);
        let mut changed = config_changed;
        // Aggregates after their leaves (whose states they follow).
        let mut leaf_states = BTreeMap::new();
        let has_aggregates = self.clusters.values().any(|c| !c.leaves.is_empty());
        for aggregates in [false, true] {
            for (name, c) in &mut self.clusters {
                if c.leaves.is_empty() == aggregates {
                    continue;
                }
                visit(1);
                if c.spec.is_none() {
                    c.built_for = None;
                }
                let (state, pick) = if aggregates {
                    (
                        aggregate_state(&c.leaves, &leaf_states),
                        Some(ClusterPick::Aggregate(c.leaves.clone())),
                    )
                } else {
                    cluster_pick(name, c)
                };
                let sticky = c.reported == ConnectivityState::TransientFailure
                    && matches!(
                        state,
                        ConnectivityState::Connecting | ConnectivityState::Idle
                    );
                if !sticky {
                    c.reported = state;
                }
                if !aggregates && has_aggregates {
                    leaf_states.insert(name.clone(), c.reported);
                }
                match (&mut c.spec, pick) {
                    (Some(spec), Some(pick)) => {
                        if spec.state != pick {
                            spec.state = pick;
                            changed = true;
                        }
                        if spec.drops != c.drops || spec.max_requests != c.max_requests {
                            spec.drops = c.drops.clone();
                            spec.max_requests = c.max_requests;
                            changed = true;
                        }
                    }
                    // The READY localities are those of the last picker.
                    (Some(spec), None) => {
                        if spec.drops != c.drops || spec.max_requests != c.max_requests {
                            spec.drops = c.drops.clone();
                            spec.max_requests = c.max_requests;
                            changed = true;
                        }
                    }
                    (None, pick) => {
                        c.spec = Some(ClusterPickerSpec {
                            state: pick.unwrap_or(ClusterPick::Queue),
                            drops: c.drops.clone(),
                            max_requests: c.max_requests,
                            in_flight: c.in_flight.clone(),
                        });
                        changed = true;
                    }
                }
            }
        }
        let state = ConnectivityState::aggregate(self.clusters.values().map(|c| c.reported));
        if !changed && self.published.as_ref().map(|(s, _)| *s) == Some(state) {
            return;
        }
        let specs: BTreeMap<String, ClusterPickerSpec> = self
            .clusters
            .iter()
            .filter_map(|(name, c)| c.spec.clone().map(|spec| (name.clone(), spec)))
            .collect();
        rebuilt(specs.len());
        let next = (state, PickerSpec::Clusters(specs));
        // Without a new config, a cluster's picker changed or the state did: no need to compare.
        if !config_changed || self.published.as_ref() != Some(&next) {
            self.subs.out.push_back(LbAction::UpdatePicker {
                state: next.0,
                picker: next.1.clone(),
            });
            self.published = Some(next);
        }
    }
}

/// The READY subchannel a single-endpoint cluster's calls go to: `chosen`'s while it is READY, else the
/// first READY one (which becomes `chosen`).
fn one_endpoint(ready: Vec<ReadyLocality>, chosen: &mut Option<Address>) -> Vec<ReadyLocality> {
    let all = || ready.iter().flat_map(|l| l.subchannels.iter());
    let kept = chosen
        .as_ref()
        .and_then(|c| all().find(|(_, a)| a == c))
        .or_else(|| all().next())
        .cloned();
    *chosen = kept.as_ref().map(|(_, a)| a.clone());
    match kept {
        Some(sub) => vec![ReadyLocality {
            weight: 1,
            subchannels: vec![sub],
        }],
        None => Vec::new(),
    }
}

/// An aggregate cluster's state: that of its first leaf not in TRANSIENT_FAILURE (a missing leaf is
/// skipped), else TRANSIENT_FAILURE.
fn aggregate_state(
    leaves: &[String],
    states: &BTreeMap<String, ConnectivityState>,
) -> ConnectivityState {
    leaves
        .iter()
        .filter_map(|l| states.get(l))
        .find(|s| **s != ConnectivityState::TransientFailure)
        .copied()
        .unwrap_or(ConnectivityState::TransientFailure)
}

/// A cluster's state and picker: those of its chosen priority. No picker when the cluster's READY
/// round_robin priority lists the same READY localities and subchannels as in the last picker.
fn cluster_pick(name: &str, c: &mut Cluster) -> (ConnectivityState, Option<ClusterPick>) {
    let built_for = c.built_for.take();
    if let Some(failure) = &c.failure {
        return (
            ConnectivityState::TransientFailure,
            Some(ClusterPick::Fail(format!("cluster {name}: {failure}"))),
        );
    }
    let Some((p, child)) = c.priority.selected_mut() else {
        return (
            ConnectivityState::TransientFailure,
            Some(ClusterPick::Fail(format!(
                "cluster {name}: priority policy has empty priority list"
            ))),
        );
    };
    let has_addresses = child.target.has_addresses();
    let state = child.state;
    let target = match &mut child.target {
        ChildPolicy::RingHash(ring) if has_addresses => {
            let failure = format!(
                "cluster {name}: ring_hash: failed to connect to all endpoints of priority {p}; last error: {}",
                ring.last_error().unwrap_or("none")
            );
            // The cluster's ejected endpoints are TRANSIENT_FAILURE in the ring's states already.
            return (state, Some(ClusterPick::Ring(ring.pick_spec(failure))));
        }
        ChildPolicy::RingHash(_) => None,
        ChildPolicy::RoundRobin(target) => Some(target),
    };
    let pick = match state {
        ConnectivityState::Ready => match target {
            Some(target) => {
                let dirty = target.take_dirty();
                c.built_for = Some(p);
                if !dirty && built_for == Some(p) {
                    return (state, None);
                }
                // The cluster's ejected endpoints are not READY in the target's states.
                let ready = target.ready();
                if c.single_endpoint {
                    ClusterPick::Ready(one_endpoint(ready, &mut c.chosen))
                } else {
                    ClusterPick::Ready(ready)
                }
            }
            None => ClusterPick::Ready(Vec::new()),
        },
        ConnectivityState::Idle => ClusterPick::Idle,
        ConnectivityState::Connecting => ClusterPick::Queue,
        ConnectivityState::TransientFailure | ConnectivityState::Shutdown => {
            ClusterPick::Fail(if has_addresses {
                format!(
                    "cluster {name}: failed to connect to all addresses of priority {p}; last error: {}",
                    target.and_then(|t| t.last_error()).unwrap_or("none")
                )
            } else {
                format!("cluster {name}: priority {p} has no endpoints")
            })
        }
    };
    (state, Some(pick))
}
