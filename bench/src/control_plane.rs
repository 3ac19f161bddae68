//! The control plane at fleet scale (issue 32): how long grpc-lb's sans-IO policies take to bring 1,000 and
//! 4,000 endpoints READY, fed as the channel's event loop feeds them (an event, `poll_timeout`, then every
//! action), each new picker built with connection handles as the loop builds it. No I/O and no server:
//! the figure is CPU time on the control plane's task, during which no event of the channel is handled.
//! `grpc-bench control-plane [--quick]` runs this table alone.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use grpc_lb::{
    Address, ClusterConfig, Health, LbAction, LbPolicy, LocalityConfig, Picker, PolicyConfig,
    PriorityConfig, XdsClustersConfig,
};
use grpc_retry::SplitMix64;

use crate::report::{Row, Table};

const SIZES: [usize; 2] = [1_000, 4_000];

fn address(i: usize) -> Address {
    let i = i as u32;
    Address::Tcp(SocketAddr::from((
        [10, (i >> 16) as u8, (i >> 8) as u8, i as u8],
        443,
    )))
}

/// The event loop's side: connection attempts asked for, pickers built.
struct Loop {
    lb: LbPolicy,
    now: Instant,
    connects: VecDeque<(grpc_lb::SubchannelId, Address)>,
    picker: Option<Picker<u64>>,
}

impl Loop {
    fn new(config: PolicyConfig) -> Loop {
        Loop {
            lb: LbPolicy::new(config, Box::new(SplitMix64::new(7))),
            now: Instant::now(),
            connects: VecDeque::new(),
            picker: None,
        }
    }

    fn step(&mut self) {
        let _ = self.lb.poll_timeout();
        let mut spec = None;
        while let Some(action) = self.lb.poll_action() {
            match action {
                LbAction::Connect { id, addr, .. } => self.connects.push_back((id, addr)),
                LbAction::UpdatePicker { picker, .. } => spec = Some(picker),
                _ => {}
            }
        }
        // Only the last picker of a batch is built, as the loop does.
        if let Some(spec) = spec {
            self.picker = Some(Picker::new(&spec, |id| Some(id.0), 0));
        }
    }

    fn ready(&self) -> usize {
        self.picker
            .as_ref()
            .map_or(0, |p| p.ready_addresses().len())
    }
}

/// round_robin: the address list, then each connection READY (and, with health checking, its Watch's
/// first answer, SERVING).
fn round_robin(n: usize, health: bool) -> Result<Duration, String> {
    let start = Instant::now();
    let mut l = Loop::new(PolicyConfig::RoundRobin);
    l.lb.set_health_checking(health, l.now);
    l.lb.update_addresses((0..n).map(address).collect(), l.now);
    l.step();
    while let Some((id, addr)) = l.connects.pop_front() {
        l.lb.subchannel_ready(id, l.now);
        l.step();
        if health {
            l.lb.set_health(&addr, Health::Serving, l.now);
            l.step();
        }
    }
    let took = start.elapsed();
    match l.ready() {
        r if r == n => Ok(took),
        r => Err(format!("round_robin: {r} of {n} backends READY")),
    }
}

/// The xDS cluster manager: one round_robin cluster of four localities, then each connection READY.
fn xds(n: usize) -> Result<Duration, String> {
    let start = Instant::now();
    let mut l = Loop::new(PolicyConfig::XdsClusterManager);
    let localities = (0..4)
        .map(|k| LocalityConfig {
            name: format!("region/zone-{k}/"),
            weight: NonZeroU32::MIN,
            addresses: (0..n).filter(|i| i % 4 == k).map(address).collect(),
            endpoint_weights: Vec::new(),
        })
        .collect();
    let config = XdsClustersConfig {
        clusters: BTreeMap::from([(
            "c".to_owned(),
            ClusterConfig::new(vec![PriorityConfig { localities }]),
        )]),
    };
    l.lb.update_clusters(config, l.now);
    l.step();
    while let Some((id, _)) = l.connects.pop_front() {
        l.lb.subchannel_ready(id, l.now);
        l.step();
    }
    let took = start.elapsed();
    match l.ready() {
        r if r == n => Ok(took),
        r => Err(format!("xDS: {r} of {n} endpoints READY")),
    }
}

/// The table: the best of 3 runs (1 with `quick`) at each size.
pub(crate) fn scale(quick: bool) -> Result<Table, String> {
    let reps = if quick { 1 } else { 3 };
    let mut table = Table::new(
        "Control plane: time to bring endpoints READY (grpc-lb policy and pickers, no I/O)",
        &["1,000 endpoints", "4,000 endpoints"],
    );
    type Scenario = fn(usize) -> Result<Duration, String>;
    let scenarios: [(&str, Scenario); 3] = [
        ("round_robin", |n| round_robin(n, false)),
        ("round_robin, health checked (READY, then SERVING)", |n| {
            round_robin(n, true)
        }),
        ("xDS cluster, round_robin over 4 localities", xds),
    ];
    for (label, scenario) in scenarios {
        let mut best = [f64::MAX; SIZES.len()];
        for _ in 0..reps {
            for (i, n) in SIZES.iter().enumerate() {
                best[i] = best[i].min(scenario(*n)?.as_secs_f64() * 1e3);
            }
        }
        table.rows.push(Row {
            label: label.into(),
            unit: "ms",
            values: best.iter().map(|v| Some(*v)).collect(),
            note: format!(
                "4x the endpoints: {:.1}x the time (a picker per new READY endpoint, O(n) each: 16x; \
                 before issue 32, O(n²) per event: ~64x)",
                best[1] / best[0]
            ),
        });
    }
    Ok(table)
}
