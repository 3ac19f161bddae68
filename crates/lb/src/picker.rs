//! Pickers: an immutable snapshot of where calls go, built by the control plane and swapped in whole, so a
//! pick takes no lock the control plane holds. A pick may be asked to avoid addresses the call already used
//! (its earlier attempts and hedges); round_robin honours that when another READY backend exists.
//!
//! The xDS cluster manager's picker ([`PickerSpec::Clusters`], built in `cluster_picker.rs`) dispatches on
//! the call's cluster ([`PickRequest::cluster`]) and may drop calls ([`PickResult::Drop`]) or hand out an
//! in-flight claim with the pick ([`PickResult::Pick::guard`], a [`crate::BreakerClaim`]). What a pick asks and
//! answers is in `pick.rs`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use grpc_base::Address;

use crate::cluster_picker::{ClusterPickerSpec, ClustersPicker};
use crate::panics::{panic_message, DropCaught};
use crate::pick::{PickGuard, PickRequest, PickResult, Rotation};
use crate::state::SubchannelId;

/// A policy's own picker ([`PickerSpec::Custom`]): answers each pick with one of the policy's
/// subchannels, or queue, fail or drop. It runs on the calls' tasks, concurrently: it must be cheap and
/// must not block. A panic in it fails the call (UNAVAILABLE, "load-balancing policy picker panicked"),
/// never the channel.
pub trait SubchannelPicker: Send + Sync + 'static {
    /// Answers one pick.
    fn pick(&self, request: &PickRequest<'_>) -> CustomPick;
}

/// A custom picker's answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum CustomPick {
    /// Use this subchannel (one of [`CustomPicker::new`]'s list; another queues the call).
    Pick {
        /// The subchannel.
        id: SubchannelId,
        /// Kept by the attempt until it ends, then dropped (e.g. a count of calls in flight; see
        /// [`PickGuard`]).
        guard: Option<PickGuard>,
    },
    /// Wait for the next picker (and, if `exit_idle`, ask the policy to connect).
    Queue {
        /// The policy is IDLE and must be woken.
        exit_idle: bool,
    },
    /// Fail a fail-fast call (UNAVAILABLE) with this message; a wait-for-ready call queues instead.
    Fail(String),
    /// Fail the call at once with UNAVAILABLE and this message, even if it is wait-for-ready.
    Drop(String),
}

impl CustomPick {
    /// Use subchannel `id`, with no guard.
    pub fn subchannel(id: SubchannelId) -> CustomPick {
        CustomPick::Pick { id, guard: None }
    }

    /// Use subchannel `id`; the attempt keeps `guard` until it ends (the committed attempt's until the call
    /// ends; see [`PickGuard`]).
    pub fn subchannel_with_guard(id: SubchannelId, guard: PickGuard) -> CustomPick {
        CustomPick::Pick {
            id,
            guard: Some(guard),
        }
    }
}

/// A custom picker with the subchannels it may answer (the policy's READY ones): the channel finds their
/// connections when it builds the picker. The address paired with each id is informative only: the
/// channel uses the address it has for that subchannel (where outlier detection counts the calls, and the
/// pick's address), and leaves out an id that is not one of the policy's subchannels. Two are equal when
/// they are the same picker and list.
#[derive(Clone)]
pub struct CustomPicker {
    subchannels: Arc<[(SubchannelId, Address)]>,
    /// The application's picker, whose `Drop` (when the channel lets go of its last clone) may panic.
    picker: DropCaught<Arc<dyn SubchannelPicker>>,
}

impl CustomPicker {
    /// `picker`, answering with the subchannels of `subchannels` (their addresses as the channel has them:
    /// a listed address that is not the subchannel's is replaced).
    pub fn new(
        subchannels: Vec<(SubchannelId, Address)>,
        picker: Arc<dyn SubchannelPicker>,
    ) -> CustomPicker {
        CustomPicker {
            subchannels: subchannels.into(),
            picker: DropCaught::new(picker),
        }
    }

    /// The subchannels it may answer.
    pub fn subchannels(&self) -> &[(SubchannelId, Address)] {
        &self.subchannels
    }

    /// This picker with each subchannel's address as `address` says (the channel's own record), and
    /// without the subchannels it does not know. The same picker when nothing changes.
    pub(crate) fn with_addresses(
        &self,
        address: impl Fn(SubchannelId) -> Option<Address>,
    ) -> CustomPicker {
        let fixed: Vec<(SubchannelId, Address)> = self
            .subchannels
            .iter()
            .filter_map(|(id, _)| address(*id).map(|a| (*id, a)))
            .collect();
        if *fixed == *self.subchannels {
            return self.clone();
        }
        CustomPicker {
            subchannels: fixed.into(),
            picker: self.picker.clone(),
        }
    }
}

impl PartialEq for CustomPicker {
    fn eq(&self, other: &CustomPicker) -> bool {
        std::ptr::eq(
            Arc::as_ptr(&*self.picker) as *const u8,
            Arc::as_ptr(&*other.picker) as *const u8,
        ) && self.subchannels == other.subchannels
    }
}

impl Eq for CustomPicker {}

impl fmt::Debug for CustomPicker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CustomPicker")
            .field("subchannels", &self.subchannels)
            .finish_non_exhaustive()
    }
}

/// What a policy wants picks to do (the channel turns it into a [`Picker`] with connection handles).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PickerSpec {
    /// The policy is idle: queue the call and ask the policy to leave IDLE.
    Idle,
    /// Nothing is READY yet: queue the call.
    Queue,
    /// TRANSIENT_FAILURE: fail fail-fast calls with this message (wait-for-ready calls queue).
    Fail(String),
    /// Pick among these READY subchannels.
    Ready(Vec<(SubchannelId, Address)>),
    /// The xDS cluster manager: what picks do for each cluster, by cluster name (the call's
    /// [`PickRequest::cluster`] chooses).
    Clusters(BTreeMap<String, ClusterPickerSpec>),
    /// A policy's own picker.
    Custom(CustomPicker),
}

enum Kind<T> {
    Idle,
    Queue,
    Fail(String),
    Ready(Rotation<T>),
    Clusters(ClustersPicker<T>),
    Custom {
        picker: DropCaught<Arc<dyn SubchannelPicker>>,
        handles: HashMap<SubchannelId, (Address, T)>,
    },
}

/// An immutable picker.
pub struct Picker<T> {
    kind: Kind<T>,
}

impl<T: Clone> Picker<T> {
    /// Builds a picker from a policy's spec; `handle` gives the connection of each READY subchannel, and
    /// `start` the first index (round_robin starts at a random one).
    pub fn new(
        spec: &PickerSpec,
        handle: impl Fn(SubchannelId) -> Option<T>,
        start: usize,
    ) -> Picker<T> {
        Picker::with_cluster_handles(spec, |id, _| handle(id), start)
    }

    /// [`Picker::new`] with handles that may depend on the cluster that picks them: `handle` gets the
    /// name of the xDS cluster (an aggregate's leaf, not the aggregate) whose picks hand the subchannel
    /// out, `None` outside the xDS cluster manager (so that a call's results count in the cluster that
    /// served it, for that cluster's outlier detection).
    pub fn with_cluster_handles(
        spec: &PickerSpec,
        handle: impl Fn(SubchannelId, Option<&str>) -> Option<T>,
        start: usize,
    ) -> Picker<T> {
        let kind = match spec {
            PickerSpec::Idle => Kind::Idle,
            PickerSpec::Queue => Kind::Queue,
            PickerSpec::Fail(m) => Kind::Fail(m.clone()),
            PickerSpec::Ready(list) => {
                let backends: Vec<(Address, T)> = list
                    .iter()
                    .filter_map(|(id, addr)| handle(*id, None).map(|h| (addr.clone(), h)))
                    .collect();
                match Rotation::new(backends, start) {
                    Some(rotation) => Kind::Ready(rotation),
                    None => Kind::Queue,
                }
            }
            PickerSpec::Clusters(clusters) => {
                Kind::Clusters(ClustersPicker::new(clusters, &handle, start))
            }
            PickerSpec::Custom(custom) => Kind::Custom {
                picker: custom.picker.clone(),
                handles: custom
                    .subchannels
                    .iter()
                    .filter_map(|(id, addr)| handle(*id, None).map(|h| (*id, (addr.clone(), h))))
                    .collect(),
            },
        };
        Picker { kind }
    }

    /// Picks: rotating over the READY backends, skipping those the call already used when another is there.
    pub fn pick(&self, request: &PickRequest<'_>) -> PickResult<T> {
        match &self.kind {
            Kind::Idle => PickResult::Queue { exit_idle: true },
            Kind::Queue => PickResult::Queue { exit_idle: false },
            Kind::Fail(m) => PickResult::Fail(m.clone()),
            Kind::Ready(rotation) => {
                let (addr, handle) = rotation.pick(request.avoid);
                PickResult::Pick {
                    handle: handle.clone(),
                    addr: addr.clone(),
                    guard: None,
                }
            }
            Kind::Clusters(clusters) => clusters.pick(request),
            Kind::Custom { picker, handles } => {
                match catch_unwind(AssertUnwindSafe(|| picker.pick(request))) {
                    Ok(CustomPick::Pick { id, guard }) => match handles.get(&id) {
                        Some((addr, handle)) => PickResult::Pick {
                            handle: handle.clone(),
                            addr: addr.clone(),
                            guard,
                        },
                        // Not one of its READY subchannels (or its connection is gone): wait for the next
                        // picker.
                        None => PickResult::Queue { exit_idle: false },
                    },
                    Ok(CustomPick::Queue { exit_idle }) => PickResult::Queue { exit_idle },
                    Ok(CustomPick::Fail(m)) => PickResult::Fail(m),
                    Ok(CustomPick::Drop(m)) => PickResult::Drop(m),
                    Err(panic) => PickResult::Drop(format!(
                        "load-balancing policy picker panicked: {}",
                        panic_message(panic.as_ref())
                    )),
                }
            }
        }
    }

    /// The READY addresses (of every cluster, for the xDS cluster manager's picker).
    pub fn ready_addresses(&self) -> Vec<Address> {
        match &self.kind {
            Kind::Ready(rotation) => rotation.addresses().cloned().collect(),
            Kind::Clusters(clusters) => clusters.ready_addresses(),
            Kind::Custom { handles, .. } => handles.values().map(|(a, _)| a.clone()).collect(),
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn addr(n: u8) -> Address {
        Address::Tcp(SocketAddr::from(([10, 0, 0, n], 1)))
    }

    fn ready(n: u8) -> Picker<u8> {
        let list = (1..=n)
            .map(|i| (SubchannelId(u64::from(i)), addr(i)))
            .collect();
        Picker::new(&PickerSpec::Ready(list), |id| Some(id.0 as u8), 0)
    }

    fn picked(p: &Picker<u8>, avoid: &[Address]) -> u8 {
        match p.pick(&PickRequest {
            method: "/a.B/C",
            avoid,
            cluster: None,
            hash: None,
        }) {
            PickResult::Pick { handle, .. } => handle,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn avoiding_picks_split_evenly_over_many_backends() {
        let p = ready(100);
        // Unsorted, with a duplicate and an address that is not a backend.
        let avoid = [
            addr(70),
            addr(3),
            addr(70),
            Address::Tcp(SocketAddr::from(([192, 0, 2, 1], 1))),
        ];
        let mut counts = [0u32; 101];
        for _ in 0..98 * 5 {
            counts[usize::from(picked(&p, &avoid))] += 1;
        }
        for (backend, count) in counts.iter().enumerate().skip(1) {
            let want = if backend == 3 || backend == 70 { 0 } else { 5 };
            assert_eq!(*count, want, "backend {backend}");
        }
    }

    #[test]
    fn a_long_avoid_list_and_unix_addresses() {
        // More avoided addresses than a pick keeps on the stack, with duplicates, in any order.
        let p = ready(10);
        let avoid = [
            addr(9),
            addr(2),
            addr(9),
            addr(4),
            addr(6),
            addr(2),
            addr(8),
            addr(1),
        ];
        let mut counts = [0u32; 11];
        for _ in 0..4 * 4 {
            counts[usize::from(picked(&p, &avoid))] += 1;
        }
        assert_eq!(counts, [0, 0, 0, 4, 0, 4, 0, 4, 0, 0, 4]);
        // Unix-domain sockets are addresses like any other.
        let unix = |n: u8| Address::unix(format!("/tmp/s{n}"));
        let list = vec![(SubchannelId(1), unix(1)), (SubchannelId(2), unix(2))];
        let p = Picker::new(&PickerSpec::Ready(list), |id| Some(id.0 as u8), 0);
        for _ in 0..3 {
            assert_eq!(picked(&p, &[unix(1)]), 2);
        }
        assert_eq!(p.ready_addresses(), [unix(1), unix(2)]);
    }

    #[test]
    fn rotates_evenly() {
        let p = ready(3);
        let picks: Vec<u8> = (0..6).map(|_| picked(&p, &[])).collect();
        assert_eq!(picks, [1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn avoid_hint_with_one_two_and_three_backends() {
        // One backend: nothing else to go to, so the used one is picked.
        assert_eq!(picked(&ready(1), &[addr(1)]), 1);
        // Two backends: always the other one.
        let two = ready(2);
        for _ in 0..4 {
            assert_eq!(picked(&two, &[addr(1)]), 2);
        }
        // Three backends, one used: the two others, in rotation.
        let three = ready(3);
        let picks: Vec<u8> = (0..4).map(|_| picked(&three, &[addr(2)])).collect();
        assert!(picks.iter().all(|p| *p != 2), "{picks:?}");
        assert!(picks.contains(&1) && picks.contains(&3), "{picks:?}");
        // All used: fall back to the rotation.
        let all = [addr(1), addr(2), addr(3)];
        let picks: Vec<u8> = (0..3).map(|_| picked(&three, &all)).collect();
        assert_eq!(picks.len(), 3);
    }

    #[test]
    fn the_avoid_hint_splits_picks_evenly_over_the_other_backends() {
        for avoided in 1..=3u8 {
            let three = ready(3);
            let mut counts = [0usize; 4];
            for _ in 0..3000 {
                counts[usize::from(picked(&three, &[addr(avoided)]))] += 1;
            }
            assert_eq!(counts[usize::from(avoided)], 0, "{counts:?}");
            for other in (1..=3u8).filter(|o| *o != avoided) {
                let got = counts[usize::from(other)];
                assert!(
                    got.abs_diff(1500) <= 75,
                    "avoiding {avoided}: {counts:?} is not within 5 % of 1500 each"
                );
            }
        }
        // Two of four avoided: the other two share evenly too.
        let four = ready(4);
        let mut counts = [0usize; 5];
        for _ in 0..3000 {
            counts[usize::from(picked(&four, &[addr(1), addr(3)]))] += 1;
        }
        assert_eq!((counts[1], counts[3]), (0, 0), "{counts:?}");
        assert!(
            counts[2].abs_diff(1500) <= 75 && counts[4].abs_diff(1500) <= 75,
            "{counts:?}"
        );
    }

    #[test]
    fn queue_fail_and_idle() {
        let idle: Picker<u8> = Picker::new(&PickerSpec::Idle, |_| None, 0);
        assert_eq!(
            idle.pick(&PickRequest::default()),
            PickResult::Queue { exit_idle: true }
        );
        let q: Picker<u8> = Picker::new(&PickerSpec::Queue, |_| None, 0);
        assert_eq!(
            q.pick(&PickRequest::default()),
            PickResult::Queue { exit_idle: false }
        );
        let f: Picker<u8> = Picker::new(&PickerSpec::Fail("down".into()), |_| None, 0);
        assert_eq!(
            f.pick(&PickRequest::default()),
            PickResult::Fail("down".into())
        );
        let gone: Picker<u8> = Picker::new(
            &PickerSpec::Ready(vec![(SubchannelId(1), addr(1))]),
            |_| None,
            0,
        );
        assert_eq!(
            gone.pick(&PickRequest::default()),
            PickResult::Queue { exit_idle: false }
        );
    }
}
