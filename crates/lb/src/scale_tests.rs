//! Complexity tests at fleet scale: the work a policy does to bring 1,000, 2,000 and 4,000 endpoints up,
//! counted (`work.rs`: entries looked at, and picker entries built), never timed. Work per event that does
//! not grow with the endpoints beyond O(log n) makes the total for 4,000 endpoints about 4 times the total
//! for 1,000 (up to ~5 with a logarithm); one linear lookup per event makes it 16 times, a linear lookup
//! inside a loop over the endpoints 64 times. The tests allow 8 times. A picker is rebuilt whole (every
//! READY entry) on a real change only: the tests bound how many pickers are published, and report the
//! entries built apart.
//!
//! Each run drives the policy as the channel's event loop does: an event, then `poll_timeout`, then every
//! action. A run that passes its budget of visits stops there (the code before the fix would take minutes).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Instant;

use grpc_base::{Address, SplitMix64};

use crate::work;
use crate::{
    ClusterConfig, ClusterLbConfig, ClusterPick, ConnectivityState, Health, LbAction, LbPolicy,
    LocalityConfig, PickerSpec, PolicyConfig, PriorityConfig, SubchannelId, XdsClustersConfig,
};

/// The sizes compared, and the growth allowed from the first to the last (4 times the endpoints).
const SIZES: [usize; 3] = [1000, 2000, 4000];
const MAX_GROWTH: u64 = 8;

fn address(i: usize) -> Address {
    let i = i as u32;
    Address::Tcp(SocketAddr::from((
        [10, (i >> 16) as u8, (i >> 8) as u8, i as u8],
        443,
    )))
}

fn addresses(n: usize) -> Vec<Address> {
    (0..n).map(address).collect()
}

/// What a run cost.
#[derive(Clone, Copy, Debug, Default)]
struct Cost {
    /// Events fed to the policy.
    events: u64,
    /// Entries looked at.
    visits: u64,
    /// Pickers published.
    pickers: u64,
    /// Entries of the pickers built.
    rebuilt: u64,
}

/// The channel's side of a run: the policy, the connection attempts it asked for, the last picker.
struct Driver {
    lb: LbPolicy,
    now: Instant,
    connects: VecDeque<(SubchannelId, Address)>,
    last: Option<(ConnectivityState, PickerSpec)>,
    cost: Cost,
    budget: Option<u64>,
}

impl Driver {
    fn new(config: PolicyConfig, budget: Option<u64>) -> Driver {
        work::take();
        Driver {
            lb: LbPolicy::new(config, Box::new(SplitMix64::new(7))),
            now: Instant::now(),
            connects: VecDeque::new(),
            last: None,
            cost: Cost::default(),
            budget,
        }
    }

    /// After an event: the timer, the actions, and the count. `Err` once the budget is spent.
    fn step(&mut self) -> Result<(), String> {
        self.cost.events += 1;
        let _ = self.lb.poll_timeout();
        while let Some(action) = self.lb.poll_action() {
            match action {
                LbAction::Connect { id, addr, .. } => self.connects.push_back((id, addr)),
                LbAction::UpdatePicker { state, picker } => {
                    self.cost.pickers += 1;
                    self.last = Some((state, picker));
                }
                LbAction::Disconnect { .. } | LbAction::ResolveNow => {}
            }
        }
        let (visits, rebuilt) = work::take();
        self.cost.visits += visits;
        self.cost.rebuilt += rebuilt;
        match self.budget {
            Some(budget) if self.cost.visits > budget => Err(format!(
                "{} visits after {} events, past the budget of {budget}",
                self.cost.visits, self.cost.events
            )),
            _ => Ok(()),
        }
    }

    fn state(&self) -> Option<ConnectivityState> {
        self.last.as_ref().map(|(s, _)| *s)
    }

    /// How many entries the last READY picker has (every cluster's for the xDS cluster manager).
    fn ready_entries(&self) -> usize {
        match self.last.as_ref().map(|(_, p)| p) {
            Some(PickerSpec::Ready(list)) => list.len(),
            Some(PickerSpec::Clusters(clusters)) => clusters
                .values()
                .map(|c| match &c.state {
                    ClusterPick::Ready(localities) => {
                        localities.iter().map(|l| l.subchannels.len()).sum()
                    }
                    ClusterPick::Ring(ring) => ring
                        .endpoints()
                        .iter()
                        .filter(|(_, _, s)| *s == ConnectivityState::Ready)
                        .count(),
                    _ => 0,
                })
                .sum(),
            _ => 0,
        }
    }
}

/// round_robin with health checking: the address list, then for each backend its connection READY and
/// its health Watch's first answer, SERVING.
fn round_robin_up(n: usize, budget: Option<u64>) -> Result<Cost, String> {
    let mut d = Driver::new(PolicyConfig::RoundRobin, budget);
    d.lb.set_health_checking(true, d.now);
    d.lb.update_addresses(addresses(n), d.now);
    d.step()?;
    while let Some((id, addr)) = d.connects.pop_front() {
        d.lb.subchannel_ready(id, d.now);
        d.step()?;
        d.lb.set_health(&addr, Health::Serving, d.now);
        d.step()?;
    }
    assert_eq!(d.state(), Some(ConnectivityState::Ready));
    assert_eq!(d.ready_entries(), n, "every backend takes picks");
    Ok(d.cost)
}

/// pick_first over addresses that all refuse: a whole Happy Eyeballs pass, each failure starting the next
/// attempt at once, to the sticky TRANSIENT_FAILURE.
fn pick_first_pass(n: usize, budget: Option<u64>) -> Result<Cost, String> {
    let mut d = Driver::new(
        PolicyConfig::PickFirst {
            shuffle_address_list: false,
        },
        budget,
    );
    d.lb.update_addresses(addresses(n), d.now);
    d.step()?;
    let mut failures = 0;
    while let Some((id, _)) = d.connects.pop_front() {
        d.lb.subchannel_failed(id, "connection refused".to_owned(), d.now);
        d.step()?;
        failures += 1;
        if failures == n {
            break;
        }
    }
    assert_eq!(failures, n, "every address was tried");
    assert_eq!(d.state(), Some(ConnectivityState::TransientFailure));
    Ok(d.cost)
}

fn one_cluster(n: usize, lb: ClusterLbConfig) -> XdsClustersConfig {
    // Four localities, the endpoints spread over them.
    let localities = (0..4)
        .map(|l| LocalityConfig {
            name: format!("region/zone-{l}/"),
            weight: NonZeroU32::MIN,
            addresses: (0..n).filter(|i| i % 4 == l).map(address).collect(),
            endpoint_weights: Vec::new(),
        })
        .collect();
    let mut cluster = ClusterConfig::new(vec![PriorityConfig { localities }]);
    cluster.lb = lb;
    XdsClustersConfig {
        clusters: BTreeMap::from([("c".to_owned(), cluster)]),
    }
}

/// The xDS cluster manager, one round_robin cluster of four localities: the config, then each endpoint's
/// connection READY.
fn xds_round_robin_up(n: usize, budget: Option<u64>) -> Result<Cost, String> {
    let mut d = Driver::new(PolicyConfig::XdsClusterManager, budget);
    d.lb.update_clusters(one_cluster(n, ClusterLbConfig::RoundRobin), d.now);
    d.step()?;
    while let Some((id, _)) = d.connects.pop_front() {
        d.lb.subchannel_ready(id, d.now);
        d.step()?;
    }
    assert_eq!(d.state(), Some(ConnectivityState::Ready));
    assert_eq!(d.ready_entries(), n, "every endpoint takes picks");
    Ok(d.cost)
}

/// The xDS cluster manager, one ring_hash cluster: the config and a wake-up; every endpoint refuses its
/// first connection (each failure makes the ring connect the next IDLE endpoint), then, as the backoffs
/// end, each reconnects and is READY.
fn xds_ring_hash_up(n: usize, budget: Option<u64>) -> Result<Cost, String> {
    let mut d = Driver::new(PolicyConfig::XdsClusterManager, budget);
    let ring = ClusterLbConfig::RingHash {
        min_ring_size: 1024,
        max_ring_size: 8 * 1024 * 1024,
    };
    d.lb.update_clusters(one_cluster(n, ring), d.now);
    d.step()?;
    d.lb.exit_idle(d.now);
    d.step()?;
    let mut failed = 0;
    let mut ready = 0;
    // Bounded: n failures, n successes, and the backoff timers in between.
    for _ in 0..10 * n {
        if let Some((id, _)) = d.connects.pop_front() {
            if failed < n {
                d.lb.subchannel_failed(id, "connection refused".to_owned(), d.now);
                failed += 1;
            } else {
                d.lb.subchannel_ready(id, d.now);
                ready += 1;
            }
        } else {
            let Some(at) = d.lb.poll_timeout() else {
                break;
            };
            d.now = d.now.max(at);
            d.lb.handle_timeout(d.now);
        }
        d.step()?;
        if ready == n {
            break;
        }
    }
    assert_eq!((failed, ready), (n, n));
    assert_eq!(d.state(), Some(ConnectivityState::Ready));
    assert_eq!(d.ready_entries(), n, "every endpoint is READY in the ring");
    Ok(d.cost)
}

/// Runs `scenario` at each size; the larger sizes get a budget of `MAX_GROWTH` times the smallest's
/// visits (a run past it fails at once). Checks the growth of the visits and that pickers are published
/// at most `pickers(n)` times.
fn check_growth(
    name: &str,
    scenario: fn(usize, Option<u64>) -> Result<Cost, String>,
    pickers: fn(usize) -> u64,
) {
    let mut costs: Vec<(usize, Cost)> = Vec::new();
    let mut budget = None;
    for n in SIZES {
        let cost = match scenario(n, budget) {
            Ok(cost) => cost,
            Err(e) => panic!(
                "{name}: bringing {n} endpoints up does more than {MAX_GROWTH} times the work of {}: {e} \
                 (so far: {costs:?})",
                SIZES[0]
            ),
        };
        eprintln!(
            "{name}: {n} endpoints: {} events, {} visits ({:.1} per event), {} pickers of {} entries in all",
            cost.events,
            cost.visits,
            cost.visits as f64 / cost.events as f64,
            cost.pickers,
            cost.rebuilt
        );
        assert!(
            cost.pickers <= pickers(n),
            "{name}: {n} endpoints: {} pickers published, more than the {} real changes",
            cost.pickers,
            pickers(n)
        );
        budget.get_or_insert(cost.visits * MAX_GROWTH);
        costs.push((n, cost));
    }
    let (first, last) = (costs[0].1, costs[costs.len() - 1].1);
    assert!(
        last.visits < MAX_GROWTH * first.visits,
        "{name}: {} visits for {} endpoints, {:.1} times the {} for {}",
        last.visits,
        SIZES[2],
        last.visits as f64 / first.visits as f64,
        first.visits,
        SIZES[0]
    );
}

/// Defect 8 of issue 32: round_robin did O(n²) work per subchannel event or health answer (a linear
/// `Subchannels::get` for each backend in `recompute`), O(n³) to bring n backends up.
#[test]
fn round_robin_work_per_event_does_not_grow_with_the_backends() {
    // A picker when the first backend connects, and one per backend that becomes SERVING.
    check_growth("round_robin", round_robin_up, |n| n as u64 + 2);
}

#[test]
fn pick_first_work_per_failure_does_not_grow_with_the_addresses() {
    // CONNECTING, then TRANSIENT_FAILURE once the pass is over (and its error refreshed per failure
    // after that): at most one per event.
    check_growth("pick_first", pick_first_pass, |n| n as u64 + 2);
}

#[test]
fn xds_round_robin_work_per_event_does_not_grow_with_the_endpoints() {
    check_growth("xds round_robin", xds_round_robin_up, |n| n as u64 + 2);
}

#[test]
fn xds_ring_hash_work_per_event_does_not_grow_with_the_endpoints() {
    // The ring's picker shows each endpoint's state: a picker per state change (failing, backing off,
    // connecting, READY: a few per endpoint).
    check_growth("xds ring_hash", xds_ring_hash_up, |n| 6 * n as u64 + 4);
}
