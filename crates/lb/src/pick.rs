//! What a pick is: the call's [`PickRequest`] and the [`PickResult`] a picker answers, the [`Rotation`] over
//! READY backends that honours the request's avoid hint (round_robin's picks and each xDS locality's), and
//! the xDS circuit breaker's claim that a pick hands out ([`InFlightCounter`], [`BreakerClaim`], gRFC A32).
//! Every picker (`picker.rs`, `cluster_picker.rs`, `ring_pick.rs`) builds on these; they use nothing else
//! of the crate.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use grpc_base::Address;

use crate::panics::DropCaught;

/// What a call wants from a pick (made with [`PickRequest::new`] and its `with_` methods; it may grow).
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
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

impl<'a> PickRequest<'a> {
    /// A pick for a call of `method` (the full method name), with no hints.
    pub fn new(method: &'a str) -> PickRequest<'a> {
        PickRequest {
            method,
            ..PickRequest::default()
        }
    }

    /// This request avoiding `avoid` (the addresses the call already used).
    pub fn with_avoid(mut self, avoid: &'a [Address]) -> PickRequest<'a> {
        self.avoid = avoid;
        self
    }

    /// This request for the xDS cluster `cluster`.
    pub fn with_cluster(mut self, cluster: Option<&'a str>) -> PickRequest<'a> {
        self.cluster = cluster;
        self
    }

    /// This request with the request hash `hash` (gRFC A42).
    pub fn with_hash(mut self, hash: Option<u64>) -> PickRequest<'a> {
        self.hash = hash;
        self
    }
}

/// The result of a pick.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PickResult<T> {
    /// Use this connection.
    Pick {
        /// The connection handle.
        handle: T,
        /// Its address.
        addr: Address,
        /// What the attempt this pick is for keeps until it ends, then drops (see [`PickGuard`]): the xDS
        /// cluster manager's claim on its cluster's in-flight count (circuit breaking, gRFC A32), or a
        /// custom picker's guard (e.g. a count of calls in flight). `None` from the other built-in pickers.
        guard: Option<PickGuard>,
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

/// A cluster's count of calls in flight, shared by the policy and its pickers. Two counters are equal when
/// they are the same counter.
#[derive(Clone, Default)]
pub struct InFlightCounter(Arc<AtomicU64>);

impl InFlightCounter {
    /// A claim with no limit: counted until dropped (e.g. a custom picker's count of a subchannel's calls
    /// in flight, handed out as a [`PickGuard`]).
    pub fn claim(&self) -> BreakerClaim {
        self.0.fetch_add(1, Ordering::AcqRel);
        BreakerClaim(self.0.clone())
    }

    /// The calls in flight now.
    pub fn in_flight(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// A claim, unless `limit` calls are in flight already.
    pub fn try_claim(&self, limit: u32) -> Option<BreakerClaim> {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < u64::from(limit)).then_some(n + 1)
            })
            .ok()
            .map(|_| BreakerClaim(self.0.clone()))
    }
}

impl PartialEq for InFlightCounter {
    fn eq(&self, other: &InFlightCounter) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for InFlightCounter {}

impl fmt::Debug for InFlightCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InFlightCounter({})", self.in_flight())
    }
}

/// One call's claim on its cluster's in-flight count: held for the life of the call, released on drop. A
/// clone is a second claim (counted at once, released by its own drop).
pub struct BreakerClaim(Arc<AtomicU64>);

impl Drop for BreakerClaim {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Clone for BreakerClaim {
    fn clone(&self) -> BreakerClaim {
        self.0.fetch_add(1, Ordering::AcqRel);
        BreakerClaim(self.0.clone())
    }
}

impl PartialEq for BreakerClaim {
    fn eq(&self, other: &BreakerClaim) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for BreakerClaim {}

impl fmt::Debug for BreakerClaim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BreakerClaim")
    }
}

/// What a pick hands the attempt it is for, dropped when that attempt ends: a [`BreakerClaim`] (the xDS
/// circuit breaker's, or any [`InFlightCounter`]'s), or any value a custom picker wants dropped then
/// ([`PickGuard::new`]). Each attempt of a call picks (a retry or a hedge picks again, and gets its own
/// guard): an attempt that fails, loses a hedge or is never sent drops its guard when it ends; the attempt
/// that commits keeps its guard until the call ends (its status received, or the call cancelled or
/// dropped). A panic in the value's `Drop` is caught and forgotten, never the caller's. Two guards are
/// equal when they are the same claim or value.
#[derive(Clone)]
pub struct PickGuard(GuardKind);

#[derive(Clone)]
enum GuardKind {
    Claim(BreakerClaim),
    /// The application's value, whose `Drop` (when the attempt ends) may panic: caught, never the call's.
    Custom(DropCaught<Arc<dyn Send + Sync>>),
}

impl PickGuard {
    /// A guard holding `value` until the attempt ends (a clone of the guard shares it: it is dropped with
    /// the last clone).
    pub fn new<T: Send + Sync + 'static>(value: T) -> PickGuard {
        PickGuard(GuardKind::Custom(DropCaught::new(Arc::new(value))))
    }

    /// The in-flight claim this guard is, if it is one.
    pub fn claim(&self) -> Option<&BreakerClaim> {
        match &self.0 {
            GuardKind::Claim(c) => Some(c),
            GuardKind::Custom(_) => None,
        }
    }
}

impl From<BreakerClaim> for PickGuard {
    fn from(claim: BreakerClaim) -> PickGuard {
        PickGuard(GuardKind::Claim(claim))
    }
}

impl PartialEq for PickGuard {
    fn eq(&self, other: &PickGuard) -> bool {
        match (&self.0, &other.0) {
            (GuardKind::Claim(a), GuardKind::Claim(b)) => a == b,
            (GuardKind::Custom(a), GuardKind::Custom(b)) => std::ptr::eq(
                Arc::as_ptr(&**a) as *const u8,
                Arc::as_ptr(&**b) as *const u8,
            ),
            _ => false,
        }
    }
}

impl Eq for PickGuard {}

impl fmt::Debug for PickGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            GuardKind::Claim(_) => f.write_str("PickGuard(BreakerClaim)"),
            GuardKind::Custom(_) => f.write_str("PickGuard(..)"),
        }
    }
}
