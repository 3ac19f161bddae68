//! Pickers: an immutable snapshot of where calls go, built by the control plane and swapped in whole, so a
//! pick takes no lock the control plane holds. A pick may be asked to avoid addresses the call already used
//! (its earlier attempts and hedges); round_robin honours that when another READY backend exists.
//!
//! The xDS cluster manager's picker ([`PickerSpec::Clusters`], built in `cluster_picker.rs`) dispatches on
//! the call's cluster ([`PickRequest::cluster`]) and may drop calls ([`PickResult::Drop`]) or hand out an
//! in-flight claim with the pick ([`PickResult::Pick::guard`], a [`CallGuard`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};

use grpc_base::Address;

use crate::cluster_picker::{CallGuard, ClusterPickerSpec, ClustersPicker};
use crate::subchannel::SubchannelId;

/// What a policy wants picks to do (the channel turns it into a [`Picker`] with connection handles).
#[derive(Clone, Debug, PartialEq, Eq)]
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
}

/// What a call wants from a pick.
#[derive(Clone, Copy, Debug, Default)]
pub struct PickRequest<'a> {
    /// The full method name.
    pub method: &'a str,
    /// Addresses this call already used; prefer others.
    pub avoid: &'a [Address],
    /// The xDS cluster the call's route chose (gRFC A28), fixed for all its attempts; only the xDS
    /// cluster manager's picker looks at it (`None` elsewhere).
    pub cluster: Option<&'a str>,
    /// The call's request hash (gRFC A42), fixed for all its attempts: from the xDS route's hash policies
    /// (or random); only a ring_hash cluster's picker looks at it, and draws a random one when `None`.
    pub hash: Option<u64>,
}

/// The result of a pick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PickResult<T> {
    /// Use this connection.
    Pick {
        /// The connection handle.
        handle: T,
        /// Its address.
        addr: Address,
        /// The call's claim on its cluster's in-flight count (xDS circuit breaking, gRFC A32): the caller
        /// keeps it until the call ends, and dropping it releases the claim. `None` from every picker but
        /// the xDS cluster manager's.
        guard: Option<CallGuard>,
    },
    /// Wait for the next picker (and, if `exit_idle`, ask the policy to connect).
    Queue {
        /// The policy is IDLE and must be woken.
        exit_idle: bool,
    },
    /// Fail a fail-fast call (UNAVAILABLE) with this message; a wait-for-ready call queues instead.
    Fail(String),
    /// Drop the call: fail it at once with UNAVAILABLE and this message, even if it is wait-for-ready, and
    /// never retry it. The xDS cluster manager drops calls for its clusters' EDS `drop_overloads` and when a
    /// cluster's circuit breaker is full (gRFC A32).
    Drop(String),
}

enum Kind<T> {
    Idle,
    Queue,
    Fail(String),
    Ready(Rotation<T>),
    Clusters(ClustersPicker<T>),
}

/// A rotation over READY backends that honours a call's avoid hint.
pub(crate) struct Rotation<T> {
    backends: Vec<(Address, T)>,
    /// Each address's index in `backends`, so that a pick that avoids k addresses costs O(k²), not
    /// O(n·k): hedges and retries cost the same with 3 backends or 1,000.
    index: HashMap<Address, usize>,
    next: AtomicUsize,
}

impl<T> Rotation<T> {
    /// A rotation starting at index `start` (modulo the length); `None` without backends.
    pub(crate) fn new(backends: Vec<(Address, T)>, start: usize) -> Option<Rotation<T>> {
        if backends.is_empty() {
            return None;
        }
        let start = start % backends.len();
        let mut index = HashMap::with_capacity(backends.len());
        for (i, (addr, _)) in backends.iter().enumerate() {
            index.entry(addr.clone()).or_insert(i);
        }
        Some(Rotation {
            backends,
            index,
            next: AtomicUsize::new(start),
        })
    }

    /// The next backend, skipping those in `avoid` when another is there.
    pub(crate) fn pick(&self, avoid: &[Address]) -> &(Address, T) {
        let Rotation {
            backends,
            index,
            next,
        } = self;
        let n = backends.len();
        let turn = next.fetch_add(1, Ordering::Relaxed);
        // Rotate over the backends the call has not used, so that they share its picks evenly
        // (skipping to the next one after an avoided backend would give that one a double share):
        // the r-th allowed backend is r plus the avoided indices at or before it.
        let mut few = [0usize; FEW];
        let mut many = Vec::new();
        let avoided = match avoid {
            [] => &[],
            avoid => avoided_indices(avoid, index, &mut few, &mut many),
        };
        let allowed = n - avoided.len();
        let chosen = if avoided.is_empty() || allowed == 0 {
            turn % n
        } else {
            let mut r = turn % allowed;
            for a in avoided {
                if *a <= r {
                    r += 1;
                } else {
                    break;
                }
            }
            r
        };
        &backends[chosen]
    }

    /// The backends' addresses.
    pub(crate) fn addresses(&self) -> impl Iterator<Item = &Address> {
        self.backends.iter().map(|(a, _)| a)
    }
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
        let kind = match spec {
            PickerSpec::Idle => Kind::Idle,
            PickerSpec::Queue => Kind::Queue,
            PickerSpec::Fail(m) => Kind::Fail(m.clone()),
            PickerSpec::Ready(list) => {
                let backends: Vec<(Address, T)> = list
                    .iter()
                    .filter_map(|(id, addr)| handle(*id).map(|h| (addr.clone(), h)))
                    .collect();
                match Rotation::new(backends, start) {
                    Some(rotation) => Kind::Ready(rotation),
                    None => Kind::Queue,
                }
            }
            PickerSpec::Clusters(clusters) => {
                Kind::Clusters(ClustersPicker::new(clusters, &handle, start))
            }
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
        }
    }

    /// The READY addresses (of every cluster, for the xDS cluster manager's picker).
    pub fn ready_addresses(&self) -> Vec<Address> {
        match &self.kind {
            Kind::Ready(rotation) => rotation.addresses().cloned().collect(),
            Kind::Clusters(clusters) => clusters.ready_addresses(),
            _ => Vec::new(),
        }
    }
}

/// How many avoided addresses a pick handles without allocating: a call's retries and hedges use at most 5
/// (A6's cap on maxAttempts); only transparent retries to ever new addresses could use more.
const FEW: usize = 5;

/// The indices in `backends` of the addresses in `avoid` that are backends, sorted and without duplicates:
/// in `few` when `avoid` is that short (the usual case, no allocation), else in `many`.
fn avoided_indices<'a>(
    avoid: &[Address],
    index: &HashMap<Address, usize>,
    few: &'a mut [usize; FEW],
    many: &'a mut Vec<usize>,
) -> &'a [usize] {
    if avoid.len() > FEW {
        many.extend(avoid.iter().filter_map(|a| index.get(a).copied()));
        many.sort_unstable();
        many.dedup();
        return many;
    }
    let mut len = 0;
    for i in avoid.iter().filter_map(|a| index.get(a).copied()) {
        few[len] = i;
        len += 1;
    }
    let found = &mut few[..len];
    found.sort_unstable();
    // Dedup in place: keep each index the first time it appears in the sorted run.
    let mut kept = 0;
    for i in 0..found.len() {
        if kept == 0 || found[kept - 1] != found[i] {
            found[kept] = found[i];
            kept += 1;
        }
    }
    &few[..kept]
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
