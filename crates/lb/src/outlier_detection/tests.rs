//! Timelines of the detector with an injected clock: a harness sends a round of calls to every included
//! address, moves `now` to the next sweep and shows the events as short strings (`eject 10.0.0.3:443 x1
//! failure(0/20) until 40s`, `uneject 10.0.0.3:443 expired`). Times are seconds since the start.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use grpc_base::{Address, Rng, SplitMix64};

use super::*;

fn addr(n: u8) -> Address {
    Address::Tcp(SocketAddr::from(([10, 0, 0, n], 443)))
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn pct(value: u32) -> Percentage {
    Percentage::new(value).expect("a percentage")
}

/// A failure-percentage config for small address lists: 3 hosts, 10 calls, the A50 defaults otherwise.
fn failure_percentage() -> OutlierDetectionConfig {
    OutlierDetectionConfig {
        failure_percentage: Some(FailurePercentageEjection {
            minimum_hosts: 3,
            request_volume: 10,
            ..FailurePercentageEjection::default()
        }),
        ..OutlierDetectionConfig::default()
    }
}

/// Scripted draws for the enforcement percentage; running out is a test failure.
struct Draws(VecDeque<u64>);

impl Rng for Draws {
    fn next_u64(&mut self) -> u64 {
        self.0.pop_front().expect("a scripted draw")
    }
}

struct Sim {
    od: OutlierDetector,
    start: Instant,
    now: Instant,
    rng: Box<dyn Rng>,
}

impl Sim {
    /// Addresses 10.0.0.1 ..= 10.0.0.`n`.
    fn new(config: OutlierDetectionConfig, n: u8) -> Sim {
        let start = Instant::now();
        let mut od = OutlierDetector::new(config, start);
        od.update_addresses((1..=n).map(addr));
        Sim {
            od,
            start,
            now: start,
            rng: Box::new(SplitMix64::new(7)),
        }
    }

    /// `calls` calls to every included address, of which address `k` fails `failures` for each `(k,
    /// failures)` in `failing` (the picker sends nothing to an ejected address).
    fn round(&mut self, calls: u64, failing: &[(u8, u64)]) {
        for n in 1..=u8::MAX {
            let a = addr(n);
            if self.od.stats(&a).is_none() || self.od.is_ejected(&a) {
                continue;
            }
            let failures = failing.iter().find(|(k, _)| *k == n).map_or(0, |(_, f)| *f);
            for i in 0..calls {
                self.od.record(&a, i >= failures);
            }
        }
    }

    /// Moves to the next sweep and runs it; its events.
    fn sweep(&mut self) -> Vec<String> {
        let due = self.od.poll_timeout().expect("a sweep is scheduled");
        self.now = due.max(self.now);
        self.od.handle_timeout(self.now, self.rng.as_mut());
        self.events()
    }

    /// A round of calls, then the sweep; its events.
    fn interval(&mut self, calls: u64, failing: &[(u8, u64)]) -> Vec<String> {
        self.round(calls, failing);
        self.sweep()
    }

    fn events(&mut self) -> Vec<String> {
        let start = self.start;
        let at = |t: Instant| format!("{}s", (t - start).as_secs());
        std::iter::from_fn(|| self.od.poll_event())
            .map(|e| match e {
                OutlierEvent::Ejected {
                    address,
                    cause,
                    multiplier,
                    until,
                } => {
                    let why = match cause {
                        EjectionCause::SuccessRate { counts, threshold } => format!(
                            "success({}/{} < {threshold:.3})",
                            counts.successes,
                            counts.total()
                        ),
                        EjectionCause::FailurePercentage { counts } => {
                            format!("failure({}/{})", counts.successes, counts.total())
                        }
                    };
                    let until = until.map_or("never".to_owned(), at);
                    format!("eject {address} x{multiplier} {why} until {until}")
                }
                OutlierEvent::Unejected { address, reason } => {
                    format!("uneject {address} {reason:?}").to_lowercase()
                }
            })
            .collect()
    }

    fn ejected(&self) -> Vec<String> {
        self.od.ejected().map(ToString::to_string).collect()
    }

    fn multiplier(&self, n: u8) -> u32 {
        self.od.stats(&addr(n)).expect("a known address").multiplier
    }

    fn elapsed(&self) -> u64 {
        (self.now - self.start).as_secs()
    }
}

#[test]
fn a_failing_address_is_ejected_returns_and_is_ejected_twice_as_long() {
    let mut s = Sim::new(failure_percentage(), 3);
    assert_eq!(s.od.poll_timeout(), Some(s.start + secs(10)));
    // 10 s: 10.0.0.3 failed all 20 calls (100 % > 85 %): ejected for base × 1 = 30 s.
    assert_eq!(
        s.interval(20, &[(3, 20)]),
        ["eject 10.0.0.3:443 x1 failure(0/20) until 40s"]
    );
    assert_eq!(s.ejected(), ["10.0.0.3:443"]);
    assert!(s.od.is_ejected(&addr(3)) && !s.od.is_ejected(&addr(1)));
    // 20 s, 30 s: still out (it gets no calls meanwhile).
    assert!(s.interval(20, &[(3, 20)]).is_empty());
    assert!(s.interval(20, &[(3, 20)]).is_empty());
    // 40 s: 10 + 30 s reached. The multiplier stays 1: it only decays while the address is included.
    assert_eq!(s.interval(20, &[(3, 20)]), ["uneject 10.0.0.3:443 expired"]);
    assert_eq!(s.elapsed(), 40);
    assert_eq!(s.multiplier(3), 1);
    // 50 s: failing again, ejected for base × 2 = 60 s.
    assert_eq!(
        s.interval(20, &[(3, 20)]),
        ["eject 10.0.0.3:443 x2 failure(0/20) until 110s"]
    );
    // 60 s to 100 s: still out.
    for _ in 0..5 {
        assert!(s.interval(20, &[]).is_empty());
    }
    assert_eq!(s.interval(20, &[]), ["uneject 10.0.0.3:443 expired"]);
    assert_eq!(s.elapsed(), 110);
    // Healthy now: the multiplier decays by one per sweep.
    assert_eq!(s.multiplier(3), 2);
    assert!(s.interval(20, &[]).is_empty());
    assert_eq!(s.multiplier(3), 1);
    assert!(s.interval(20, &[]).is_empty());
    assert_eq!(s.multiplier(3), 0);
    assert!(s.interval(20, &[]).is_empty());
    assert_eq!(s.multiplier(3), 0);
    // 150 s: back to x1 when it fails once more.
    assert_eq!(
        s.interval(20, &[(3, 20)]),
        ["eject 10.0.0.3:443 x1 failure(0/20) until 180s"]
    );
}

#[test]
fn max_ejection_time_caps_the_growing_ejection() {
    let config = OutlierDetectionConfig {
        max_ejection_time: secs(45),
        max_ejection_percent: Percentage::HUNDRED,
        ..failure_percentage()
    };
    let mut s = Sim::new(config, 3);
    assert_eq!(
        s.interval(20, &[(3, 20)]),
        ["eject 10.0.0.3:443 x1 failure(0/20) until 40s"]
    );
    while s.interval(20, &[]).is_empty() {}
    assert_eq!(s.elapsed(), 40);
    // min(30 × 2, max(30, 45)) = 45 s.
    assert_eq!(
        s.interval(20, &[(3, 20)]),
        ["eject 10.0.0.3:443 x2 failure(0/20) until 95s"]
    );
    while s.interval(20, &[]).is_empty() {}
    assert_eq!(s.elapsed(), 100, "the first sweep at or after 95 s");
}

#[test]
fn an_ejection_lasts_until_a_later_sweep_even_with_zero_base_time() {
    let config = OutlierDetectionConfig {
        base_ejection_time: Duration::ZERO,
        ..failure_percentage()
    };
    let mut s = Sim::new(config, 3);
    assert_eq!(
        s.interval(20, &[(3, 20)]),
        ["eject 10.0.0.3:443 x1 failure(0/20) until 10s"]
    );
    assert_eq!(s.interval(20, &[]), ["uneject 10.0.0.3:443 expired"]);
    assert_eq!(s.elapsed(), 20);
}

#[test]
fn success_rate_ejects_the_address_below_mean_minus_stdevs() {
    // Five addresses (minimumHosts 5) with 100 calls each (requestVolume 100): rates 1, 1, 0.7, 1, 1;
    // mean 0.94, stdev 0.12, threshold 0.94 − 1.9 × 0.12 = 0.712.
    let config = OutlierDetectionConfig {
        success_rate: Some(SuccessRateEjection::default()),
        ..OutlierDetectionConfig::default()
    };
    let mut s = Sim::new(config, 5);
    assert_eq!(
        s.interval(100, &[(3, 30)]),
        ["eject 10.0.0.3:443 x1 success(70/100 < 0.712) until 40s"]
    );
    // 99 calls each is below requestVolume: no candidates, no ejection.
    let mut s = Sim::new(s.od.config().clone(), 5);
    assert!(s.interval(99, &[(3, 30)]).is_empty());
}

#[test]
fn success_rate_with_three_addresses_needs_a_smaller_factor() {
    // With three addresses one outlier is at most √2 standard deviations from the mean: the default factor
    // of 1.9 can never eject it, a factor of 1.0 does (rates 1, 1, 0.7: threshold 0.9 − 0.141 = 0.759).
    let config = |stdev_factor| OutlierDetectionConfig {
        success_rate: Some(SuccessRateEjection {
            stdev_factor,
            minimum_hosts: 3,
            request_volume: 10,
            ..SuccessRateEjection::default()
        }),
        ..OutlierDetectionConfig::default()
    };
    let mut s = Sim::new(config(1900), 3);
    assert!(s.interval(100, &[(3, 30)]).is_empty());
    let mut s = Sim::new(config(1000), 3);
    assert_eq!(
        s.interval(100, &[(3, 30)]),
        ["eject 10.0.0.3:443 x1 success(70/100 < 0.759) until 40s"]
    );
}

#[test]
fn both_algorithms_eject_an_address_once() {
    let config = OutlierDetectionConfig {
        success_rate: Some(SuccessRateEjection {
            request_volume: 10,
            ..SuccessRateEjection::default()
        }),
        failure_percentage: Some(FailurePercentageEjection {
            request_volume: 10,
            ..FailurePercentageEjection::default()
        }),
        ..OutlierDetectionConfig::default()
    };
    let mut s = Sim::new(config, 5);
    // Rates 1, 1, 1, 1, 0: mean 0.8, stdev 0.4, threshold 0.04. Failure percentage skips it then.
    assert_eq!(
        s.interval(20, &[(5, 20)]),
        ["eject 10.0.0.5:443 x1 success(0/20 < 0.040) until 40s"]
    );
}

#[test]
fn max_ejection_percent_allows_the_first_ejection_and_stops_at_the_limit() {
    let all_failing = [(1, 20), (2, 20), (3, 20), (4, 20)];
    let ejected_with = |max: u32, n: u8| {
        let config = OutlierDetectionConfig {
            max_ejection_percent: pct(max),
            ..failure_percentage()
        };
        let mut s = Sim::new(config, n);
        s.interval(20, &all_failing);
        s.ejected().len()
    };
    // 3 addresses at 10 %: the first ejection starts from 0 % and passes; then 33 % ≥ 10 %.
    assert_eq!(ejected_with(10, 3), 1);
    // 3 at 50 %: 0 % and 33 % are below 50 %, so two (67 %); the check precedes each ejection.
    assert_eq!(ejected_with(50, 3), 2);
    // 4 at 50 %: two, and 50 % is the limit.
    assert_eq!(ejected_with(50, 4), 2);
    assert_eq!(ejected_with(100, 3), 3);
    assert_eq!(ejected_with(0, 3), 0, "0 % ejects nothing");

    // Across sweeps: with one of three out at 10 %, nobody else is ejected, in address-list order.
    let mut s = Sim::new(failure_percentage(), 3);
    assert_eq!(
        s.interval(20, &all_failing),
        ["eject 10.0.0.1:443 x1 failure(0/20) until 40s"]
    );
    assert!(s.interval(20, &all_failing).is_empty());
    assert_eq!(s.ejected(), ["10.0.0.1:443"]);
}

#[test]
fn enforcement_percentage_zero_never_ejects_and_fifty_draws() {
    let config = |enforcement| OutlierDetectionConfig {
        max_ejection_percent: Percentage::HUNDRED,
        failure_percentage: Some(FailurePercentageEjection {
            enforcement_percentage: pct(enforcement),
            minimum_hosts: 3,
            request_volume: 10,
            ..FailurePercentageEjection::default()
        }),
        ..OutlierDetectionConfig::default()
    };
    let mut s = Sim::new(config(0), 4);
    for _ in 0..5 {
        assert!(s.interval(20, &[(2, 20), (4, 20)]).is_empty());
    }
    // 50 %: one draw per outlier, in address order: 50 (not below 50: kept), then 49 (ejected).
    let mut s = Sim::new(config(50), 4);
    s.rng = Box::new(Draws(VecDeque::from([50, 49])));
    assert_eq!(
        s.interval(20, &[(2, 20), (4, 20)]),
        ["eject 10.0.0.4:443 x1 failure(0/20) until 40s"]
    );
    // Next sweep: 10.0.0.2 is still an outlier; a draw of 0 ejects it, and the only draw taken.
    s.rng = Box::new(Draws(VecDeque::from([0])));
    assert_eq!(
        s.interval(20, &[(2, 20), (4, 20)]),
        ["eject 10.0.0.2:443 x1 failure(0/20) until 50s"]
    );
}

#[test]
fn request_volume_and_minimum_hosts_gate_the_algorithm() {
    let config = OutlierDetectionConfig {
        failure_percentage: Some(FailurePercentageEjection {
            minimum_hosts: 3,
            request_volume: 50,
            ..FailurePercentageEjection::default()
        }),
        ..OutlierDetectionConfig::default()
    };
    let mut s = Sim::new(config, 3);
    // 49 calls each: below requestVolume, nobody is a candidate.
    assert!(s.interval(49, &[(3, 49)]).is_empty());
    // 50 calls each: all three are candidates, 10.0.0.3 fails 100 %.
    assert_eq!(
        s.interval(50, &[(3, 50)]),
        ["eject 10.0.0.3:443 x1 failure(0/50) until 50s"]
    );

    // Only two addresses reach the volume (10.0.0.2 gets 10 calls): fewer than minimumHosts, no run.
    let mut s = Sim::new(s.od.config().clone(), 3);
    for _ in 0..50 {
        s.od.record(&addr(1), true);
        s.od.record(&addr(3), false);
    }
    for _ in 0..10 {
        s.od.record(&addr(2), true);
    }
    assert!(s.sweep().is_empty());
    assert_eq!(
        s.od.stats(&addr(3)).map(|st| st.last_interval),
        Some(CallCounts {
            successes: 0,
            failures: 50
        })
    );
}

#[test]
fn failure_threshold_is_strictly_exceeded() {
    let mut s = Sim::new(failure_percentage(), 3);
    // 17 of 20 = 85 %: not above the threshold.
    assert!(s.interval(20, &[(3, 17)]).is_empty());
    assert_eq!(
        s.interval(20, &[(3, 18)]),
        ["eject 10.0.0.3:443 x1 failure(2/20) until 50s"]
    );
}

#[test]
fn neither_algorithm_counts_nothing_and_never_ejects() {
    let mut s = Sim::new(OutlierDetectionConfig::default(), 3);
    assert!(!s.od.is_enabled());
    assert_eq!(s.od.poll_timeout(), None);
    s.round(20, &[(3, 20)]);
    assert_eq!(
        s.od.stats(&addr(3)).map(|st| st.current),
        Some(CallCounts::default())
    );
    s.od.handle_timeout(s.now + secs(3600), s.rng.as_mut());
    assert!(s.events().is_empty() && s.ejected().is_empty());
}

#[test]
fn a_config_without_algorithms_unejects_everything_and_resets_multipliers() {
    let mut s = Sim::new(failure_percentage(), 3);
    assert_eq!(s.interval(20, &[(3, 20)]).len(), 1);
    let now = s.now + secs(1);
    s.od.update_config(OutlierDetectionConfig::default(), now);
    assert_eq!(s.events(), ["uneject 10.0.0.3:443 disabled"]);
    assert_eq!(s.multiplier(3), 0);
    assert_eq!(s.od.poll_timeout(), None);
    // Re-enabled later: the timer starts then, with empty counters.
    let later = s.now + secs(100);
    s.od.update_config(failure_percentage(), later);
    assert_eq!(s.od.poll_timeout(), Some(later + secs(10)));
    assert_eq!(
        s.od.stats(&addr(1)).map(|st| st.current),
        Some(CallCounts::default())
    );
}

#[test]
fn a_new_interval_counts_from_the_last_sweep() {
    let mut s = Sim::new(failure_percentage(), 3);
    s.round(5, &[]);
    let with_interval = |i| OutlierDetectionConfig {
        interval: i,
        ..failure_percentage()
    };
    // 4 s: interval 5 s → due at 5 s; counters are kept (the timer was running).
    s.od.update_config(with_interval(secs(5)), s.start + secs(4));
    assert_eq!(s.od.poll_timeout(), Some(s.start + secs(5)));
    assert_eq!(s.od.stats(&addr(1)).map(|st| st.current.total()), Some(5));
    // 8 s: interval 2 s → due at 2 s, already past: the channel fires at once.
    s.now = s.start + secs(8);
    s.od.update_config(with_interval(secs(2)), s.now);
    assert_eq!(s.od.poll_timeout(), Some(s.start + secs(2)));
    s.od.handle_timeout(s.now, s.rng.as_mut());
    assert_eq!(s.od.poll_timeout(), Some(s.start + secs(10)));
    assert_eq!(
        s.od.stats(&addr(1)).map(|st| st.last_interval.total()),
        Some(5)
    );
    // Early calls of handle_timeout do nothing.
    s.od.handle_timeout(s.start + secs(9), s.rng.as_mut());
    assert_eq!(s.od.poll_timeout(), Some(s.start + secs(10)));
    // An interval of zero sweeps at most once a millisecond.
    s.od.update_config(with_interval(Duration::ZERO), s.now);
    assert_eq!(
        s.od.poll_timeout(),
        Some(s.start + secs(8) + MIN_SWEEP_INTERVAL)
    );
}

#[test]
fn addresses_that_stay_keep_their_state_and_removed_ones_lose_it() {
    let mut s = Sim::new(failure_percentage(), 3);
    assert_eq!(s.interval(20, &[(3, 20)]).len(), 1);
    // Reordered, 10.0.0.3 kept: still ejected, multiplier 1, no event.
    s.od.update_addresses([addr(3), addr(2), addr(1), addr(2)]);
    assert!(s.events().is_empty());
    assert!(s.od.is_ejected(&addr(3)));
    assert_eq!(s.multiplier(3), 1);
    let order: Vec<String> = s.od.addresses().map(|(a, _)| a.to_string()).collect();
    assert_eq!(order, ["10.0.0.3:443", "10.0.0.2:443", "10.0.0.1:443"]);
    // Removed: un-ejected and forgotten; calls to it are ignored.
    s.od.update_addresses([addr(1), addr(2)]);
    assert_eq!(s.events(), ["uneject 10.0.0.3:443 removed"]);
    assert!(!s.od.is_ejected(&addr(3)));
    assert_eq!(s.od.stats(&addr(3)), None);
    s.od.record(&addr(3), false);
    // Back: a fresh entry.
    s.od.update_addresses([addr(1), addr(2), addr(3)]);
    assert!(s.events().is_empty());
    assert_eq!(
        s.od.stats(&addr(3)),
        Some(AddressStats {
            current: CallCounts::default(),
            last_interval: CallCounts::default(),
            multiplier: 0,
            ejected_since: None,
        })
    );
    // And it is judged again like any other.
    assert_eq!(s.interval(20, &[(3, 20)]).len(), 1);
    assert_eq!(s.multiplier(3), 1);
}

#[test]
fn stats_show_both_buckets_and_the_ejection() {
    let mut s = Sim::new(failure_percentage(), 3);
    s.round(20, &[(3, 20)]);
    s.od.record(&addr(1), false);
    assert_eq!(
        s.od.stats(&addr(1)).map(|st| st.current),
        Some(CallCounts {
            successes: 20,
            failures: 1
        })
    );
    s.sweep();
    let st = s.od.stats(&addr(3)).expect("known");
    assert_eq!(st.current, CallCounts::default());
    assert_eq!(
        st.last_interval,
        CallCounts {
            successes: 0,
            failures: 20
        }
    );
    assert_eq!(st.ejected_since, Some(s.start + secs(10)));
    assert_eq!(st.multiplier, 1);
}

#[test]
fn record_counts_is_record_repeated_and_counts_only_while_enabled() {
    let mut one_by_one = Sim::new(failure_percentage(), 3);
    let mut at_once = Sim::new(failure_percentage(), 3);
    for _ in 0..7 {
        one_by_one.od.record(&addr(2), true);
    }
    for _ in 0..5 {
        one_by_one.od.record(&addr(2), false);
    }
    let counts = CallCounts {
        successes: 7,
        failures: 5,
    };
    at_once.od.record_counts(&addr(2), counts);
    at_once.od.record_counts(&addr(9), counts);
    assert_eq!(one_by_one.od.stats(&addr(2)), at_once.od.stats(&addr(2)));
    assert_eq!(
        at_once.od.stats(&addr(2)).map(|st| st.current),
        Some(counts)
    );
    assert_eq!(at_once.od.stats(&addr(9)), None, "not in the list");

    let mut disabled = Sim::new(OutlierDetectionConfig::default(), 3);
    disabled.od.record_counts(&addr(1), counts);
    assert_eq!(
        disabled.od.stats(&addr(1)).map(|st| st.current),
        Some(CallCounts::default())
    );
}

impl Sim {
    /// The last sweep's addresses left in service with failures, as `address sr=… fp=…`.
    fn not_ejected(&mut self) -> Vec<String> {
        std::iter::from_fn(|| self.od.poll_not_ejected())
            .map(|n| {
                format!(
                    "{} {}/{} sr={:?} fp={:?}",
                    n.address,
                    n.counts.failures,
                    n.counts.total(),
                    n.success_rate,
                    n.failure_percentage
                )
            })
            .collect()
    }
}

#[test]
fn a_sweep_says_why_an_address_with_failures_stayed() {
    // requestVolume is per address per interval: 5 calls each, all failing on .1, under 10.
    let mut sim = Sim::new(failure_percentage(), 3);
    assert!(sim.interval(5, &[(1, 5)]).is_empty());
    assert_eq!(
        sim.not_ejected(),
        ["10.0.0.1:443 5/5 sr=None fp=Some(BelowRequestVolume { calls: 5, request_volume: 10 })"]
    );
    assert!(sim.not_ejected().is_empty(), "drained");

    // Enough calls on .1 only (.2 and .3 idle): one host with volume, three needed.
    let mut sim = Sim::new(failure_percentage(), 3);
    for _ in 0..20 {
        sim.od.record(&addr(1), false);
    }
    assert!(sim.sweep().is_empty());
    assert_eq!(
        sim.not_ejected(),
        ["10.0.0.1:443 20/20 sr=None fp=Some(BelowMinimumHosts { hosts: 1, minimum_hosts: 3 })"]
    );

    // Two failing outliers, the default 10 % limit: the first is ejected, the second is refused; a third
    // address with a few failures is below the threshold.
    let mut sim = Sim::new(failure_percentage(), 4);
    assert_eq!(sim.interval(20, &[(1, 20), (2, 20), (3, 2)]).len(), 1);
    assert_eq!(
        sim.not_ejected(),
        [
            "10.0.0.2:443 20/20 sr=None fp=Some(MaxEjectionPercent { ejected: 1, total: 4, max_ejection_percent: 10 })",
            "10.0.0.3:443 2/20 sr=None fp=Some(FailurePercentageNotAboveThreshold { threshold: 85 })",
        ]
    );

    // The draw against enforcementPercentage: 50 %, and a draw of 70 spares it.
    let mut config = failure_percentage();
    if let Some(fp) = &mut config.failure_percentage {
        fp.enforcement_percentage = pct(50);
    }
    let mut sim = Sim::new(config, 3);
    sim.rng = Box::new(Draws(VecDeque::from([70])));
    assert!(sim.interval(20, &[(1, 20)]).is_empty());
    assert_eq!(
        sim.not_ejected(),
        ["10.0.0.1:443 20/20 sr=None fp=Some(EnforcementDraw { enforcement_percentage: 50 })"]
    );
}

#[test]
fn both_algorithms_give_their_reason_in_one_note_per_address() {
    let config = OutlierDetectionConfig {
        success_rate: Some(SuccessRateEjection {
            minimum_hosts: 3,
            request_volume: 10,
            ..SuccessRateEjection::default()
        }),
        ..failure_percentage()
    };
    let mut sim = Sim::new(config, 3);
    assert!(sim.interval(4, &[(1, 4)]).is_empty());
    assert_eq!(
        sim.not_ejected(),
        ["10.0.0.1:443 4/4 sr=Some(BelowRequestVolume { calls: 4, request_volume: 10 }) fp=Some(BelowRequestVolume { calls: 4, request_volume: 10 })"]
    );
    // Every address fails alike: no success-rate outlier (no threshold), and 50 % is not above 85 %.
    assert!(sim.interval(20, &[(1, 10), (2, 10), (3, 10)]).is_empty());
    let notes = sim.not_ejected();
    assert_eq!(notes.len(), 3, "one per address: {notes:#?}");
    assert_eq!(
        notes[0],
        "10.0.0.1:443 10/20 sr=Some(SuccessRateNotBelowThreshold { threshold: None }) fp=Some(FailurePercentageNotAboveThreshold { threshold: 85 })"
    );
}

#[test]
fn not_ejected_notes_are_bounded_by_the_address_list() {
    let mut sim = Sim::new(failure_percentage(), 200);
    for _ in 0..3 {
        // Never drained: each sweep replaces the last one's notes.
        let _ = sim.interval(5, &[(1, 5), (2, 5), (3, 5)]);
        let _ = sim.events();
    }
    let mut all: Vec<(u8, u64)> = (1..=200).map(|n| (n, 1)).collect();
    all.push((1, 1));
    let _ = sim.interval(5, &all);
    assert_eq!(
        sim.not_ejected().len(),
        200,
        "one per address, the last sweep's only"
    );
}

#[test]
fn a_fleet_of_10_000_addresses_gets_at_most_one_note_each_per_sweep_and_none_carried_over() {
    // Fleet size: every address had one failing call, far below requestVolume. A sweep notes each at most
    // once, the notes of one sweep replace the last one's (never accumulate), and an address without
    // failures is not noted.
    let fleet: Vec<Address> = (0..10_000u32)
        .map(|i| {
            let [_, _, hi, lo] = i.to_be_bytes();
            Address::Tcp(SocketAddr::from(([10, 1, hi, lo], 443)))
        })
        .collect();
    let start = Instant::now();
    let mut od = OutlierDetector::new(failure_percentage(), start);
    od.update_addresses(fleet.iter().cloned());
    let mut rng = SplitMix64::new(7);
    let mut now = start;
    for sweep in 0..3 {
        for address in &fleet {
            od.record(address, false);
        }
        now = od.poll_timeout().expect("a sweep is scheduled").max(now);
        od.handle_timeout(now, &mut rng);
        assert!(std::iter::from_fn(|| od.poll_event()).next().is_none());
        let notes: Vec<NotEjected> = std::iter::from_fn(|| od.poll_not_ejected()).collect();
        assert_eq!(
            notes.len(),
            fleet.len(),
            "sweep {sweep}: one note per address"
        );
        assert!(notes.iter().all(|n| matches!(
            n.failure_percentage,
            Some(NotEjectedReason::BelowRequestVolume {
                calls: 1,
                request_volume: 10
            })
        )));
    }
    // A sweep after an interval without failures notes nothing.
    now = od.poll_timeout().expect("a sweep is scheduled").max(now);
    od.handle_timeout(now, &mut rng);
    assert_eq!(std::iter::from_fn(|| od.poll_not_ejected()).count(), 0);
}
