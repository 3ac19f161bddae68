//! [`OutlierDetectors`]: per-cluster scopes, their ejections merged by address, with an injected clock.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use grpc_base::{Address, SplitMix64};

use crate::{
    CallCounts, FailurePercentageEjection, OutlierDetectionConfig, OutlierDetectors, OutlierEvent,
    OutlierScope, Percentage,
};

fn addr(n: u8) -> Address {
    Address::Tcp(SocketAddr::from(([10, 0, 0, n], 443)))
}

/// Failure percentage over 2 hosts with 10 calls, any share ejectable, 1 s sweeps.
fn failing(threshold: u32) -> OutlierDetectionConfig {
    OutlierDetectionConfig {
        interval: Duration::from_secs(1),
        max_ejection_percent: Percentage::HUNDRED,
        failure_percentage: Some(FailurePercentageEjection {
            threshold: Percentage::new(threshold).expect("a percentage"),
            minimum_hosts: 2,
            request_volume: 10,
            ..FailurePercentageEjection::default()
        }),
        ..OutlierDetectionConfig::default()
    }
}

fn scope(name: &str, config: OutlierDetectionConfig, addresses: &[u8]) -> OutlierScope {
    OutlierScope::new(
        name.to_owned(),
        config,
        addresses.iter().copied().map(addr).collect(),
    )
}

fn events(d: &mut OutlierDetectors) -> Vec<String> {
    std::iter::from_fn(|| d.poll_event())
        .map(|e| match e {
            OutlierEvent::Ejected { address, .. } => format!("eject {address}"),
            OutlierEvent::Unejected { address, reason } => format!("uneject {address} {reason:?}"),
        })
        .collect()
}

/// Ten calls to each address: `failing` fail them all, the others succeed.
fn round(d: &mut OutlierDetectors, addresses: &[u8], failing: &[u8]) {
    for n in addresses {
        let counts = if failing.contains(n) {
            CallCounts {
                successes: 0,
                failures: 10,
            }
        } else {
            CallCounts {
                successes: 10,
                failures: 0,
            }
        };
        d.record_counts(&addr(*n), counts);
    }
}

#[test]
fn each_cluster_judges_its_own_addresses_and_a_cluster_without_config_ejects_nothing() {
    let t0 = Instant::now();
    let mut rng = SplitMix64::new(7);
    let mut d = OutlierDetectors::new();
    // Cluster "a" has detection over .1 and .2; cluster "b" (.3, .4) has none: no scope.
    d.update(vec![scope("a", failing(50), &[1, 2])], t0);
    assert!(d.is_enabled());
    assert_eq!(d.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    round(&mut d, &[1, 2, 3, 4], &[1, 3]);
    d.handle_timeout(t0 + Duration::from_secs(1), &mut rng);
    assert_eq!(events(&mut d), ["eject 10.0.0.1:443"]);
    assert!(d.is_ejected(&addr(1)) && !d.is_ejected(&addr(3)));
    // The cluster goes: what it ejected returns.
    d.update(Vec::new(), t0 + Duration::from_secs(2));
    assert_eq!(events(&mut d), ["uneject 10.0.0.1:443 Removed"]);
    assert!(d.is_empty() && !d.is_enabled());
}

#[test]
fn a_shared_address_stays_ejected_while_any_cluster_ejects_it() {
    let t0 = Instant::now();
    let mut rng = SplitMix64::new(7);
    let mut d = OutlierDetectors::new();
    // .2 is in both clusters; "strict" ejects at > 40% failures, "lax" at > 90%.
    d.update(
        vec![
            scope("strict", failing(40), &[1, 2]),
            scope("lax", failing(90), &[2, 3]),
        ],
        t0,
    );
    // .2 fails half its calls: only "strict" ejects it.
    d.record_counts(
        &addr(2),
        CallCounts {
            successes: 5,
            failures: 5,
        },
    );
    round(&mut d, &[1, 3], &[]);
    d.handle_timeout(t0 + Duration::from_secs(1), &mut rng);
    assert_eq!(events(&mut d), ["eject 10.0.0.2:443"]);
    // Now every call fails: "lax" ejects it too, and no second event is reported.
    round(&mut d, &[1, 2, 3], &[2]);
    d.handle_timeout(t0 + Duration::from_secs(2), &mut rng);
    assert_eq!(events(&mut d), Vec::<String>::new());
    // "strict" drops .2 from its list: "lax" still ejects it.
    d.update(
        vec![
            scope("strict", failing(40), &[1]),
            scope("lax", failing(90), &[2, 3]),
        ],
        t0 + Duration::from_secs(3),
    );
    assert_eq!(events(&mut d), Vec::<String>::new());
    assert!(d.is_ejected(&addr(2)));
    // "lax" loses its algorithm: the last ejection ends.
    d.update(
        vec![
            scope("strict", failing(40), &[1]),
            scope("lax", OutlierDetectionConfig::default(), &[2, 3]),
        ],
        t0 + Duration::from_secs(4),
    );
    assert_eq!(events(&mut d), ["uneject 10.0.0.2:443 Disabled"]);
    assert_eq!(d.ejected().count(), 0);
}

fn scoped_events(d: &mut OutlierDetectors) -> Vec<String> {
    std::iter::from_fn(|| d.poll_scoped_event())
        .map(|e| {
            let what = if e.ejected { "eject" } else { "uneject" };
            format!("{} {what} {}", e.scope, e.address)
        })
        .collect()
}

#[test]
fn each_scope_counts_its_own_calls_and_reports_its_own_ejections() {
    let t0 = Instant::now();
    let mut rng = SplitMix64::new(7);
    let mut d = OutlierDetectors::new();
    // .2 is in both clusters, and fails only the calls of "other".
    d.update(
        vec![
            scope("od", failing(40), &[1, 2]),
            scope("other", failing(40), &[2, 3]),
        ],
        t0,
    );
    let ok = CallCounts {
        successes: 10,
        failures: 0,
    };
    let bad = CallCounts {
        successes: 0,
        failures: 10,
    };
    d.record_scope_counts("od", &addr(1), ok);
    d.record_scope_counts("od", &addr(2), ok);
    d.record_scope_counts("other", &addr(2), bad);
    d.record_scope_counts("other", &addr(3), ok);
    // An unknown scope counts nowhere.
    d.record_scope_counts("gone", &addr(1), bad);
    d.handle_timeout(t0 + Duration::from_secs(1), &mut rng);
    assert_eq!(scoped_events(&mut d), ["other eject 10.0.0.2:443"]);
    assert_eq!(events(&mut d), ["eject 10.0.0.2:443"]);
    // "other" goes: its ejection ends, in its scope and merged.
    d.update(
        vec![scope("od", failing(40), &[1, 2])],
        t0 + Duration::from_secs(2),
    );
    assert_eq!(scoped_events(&mut d), ["other uneject 10.0.0.2:443"]);
    assert_eq!(events(&mut d), ["uneject 10.0.0.2:443 Removed"]);
    let names: Vec<&str> = d.scopes().map(|(n, _)| n).collect();
    assert_eq!(names, ["od"]);
}
