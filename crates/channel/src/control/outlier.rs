//! Outlier detection (gRFC A50), the part calls touch: each address's call results, counted with atomics that
//! the picked connection's handle shares with the control plane, what `Channel::stats()` shows of the
//! ejections, and the DEBUG event that says why a sweep left an address with failures in service. The
//! decisions are `grpc_lb::OutlierDetector`'s, run by the control plane's event loop, which takes these
//! counts into it before each sweep (`control/event_loop.rs`): a call never messages the loop, and counting
//! costs it a few relaxed atomic adds per attempt, no allocation.
//!
//! Which results count (A50: "OK is a success, anything else a failure"): every attempt that got a
//! connection from a pick counts once, when it ends, on the address it picked: the committed attempt with
//! the call's final status, and every retry or hedge attempt that ended before commit with its own status
//! (a transparent retry's unprocessed attempt included: the address did refuse it). A deadline the client
//! enforced counts as a failure (DEADLINE_EXCEEDED), as in C-core, where the status the call finishes
//! with is what the picker's call tracker sees: for the committed attempt, and for every attempt the
//! deadline cut before commit (a unary call to a backend that never answers commits on nothing, and still
//! counts). An attempt cut by its own `perAttemptRecvTimeout` (gRFC A44), a retry attempt or a hedge,
//! counts as a failure too (CANCELLED, the status C-core's call tracker sees for it) once its HEADERS left
//! for the server: a backend that takes calls and never answers is ejected even when retries save every
//! call, instead of costing each call that lands there the timeout and a throttle token for as long as it
//! stays silent. An attempt the timeout cut while h2 still held it in its local queue (the server's
//! `MAX_CONCURRENT_STREAMS` reached, by this channel's own long streams) does not count: it never reached
//! the backend (C-core counts it; ejecting a healthy backend because the client filled it would be wrong).
//!
//! Not counted: attempts whose pick failed (no address); a committed attempt the client itself cancelled
//! (the application's cancel or a dropped call: nothing the backend did); and a hedge cancelled because
//! another attempt won the call (the call committed elsewhere). That last one departs from C-core, which
//! counts every cancelled attempt as a failure: a hedge that lost the race says nothing about its backend
//! (hedging exists to race healthy backends against each other, and counting the losers would eject the
//! slower half of a healthy fleet), and a backend that never answers is still found out by the hedges
//! `perAttemptRecvTimeout` cuts there, or by the deadlines it causes. The detector takes these counts
//! only while it has an algorithm configured, and starts from zero when it gets one.
//!
//! The same atomics also count each address's attempts for `Channel::stats()` (`address_stats.rs`) by
//! channelz's rule, which is simpler: every attempt that got a connection from a pick is started, and ends
//! succeeded (OK) or failed (anything else, cancelled hedges and the application's cancels included).
//!
//! Ejection state does not survive IDLE: a channel that goes IDLE (no call for its idle timeout) drops
//! its policy and its `OutlierDetector` with its connections, and the policy it builds when it leaves IDLE
//! starts with every address in service, its multipliers at zero and its counters empty (only the
//! ejection counts `Channel::stats()` shows are kept). grpc-go and C-core do the same: their IDLE shuts
//! the whole LB policy tree down, outlier detection included, and leaving it builds a new one. A backend
//! still failing is ejected again after the first interval with enough calls.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use grpc_lb::{CallCounts, NotEjected, NotEjectedReason};
use parking_lot::Mutex;

use crate::wire::status::Code;

/// One address's call results: what outlier detection counts since the control plane last took them, and
/// the attempts `Channel::stats()` shows for the address (started, succeeded, failed; never reset). Each
/// address in the list has one, shared by the handles of its READY connections; an attempt reaches it
/// through its pick ([`AttemptCount`]), so counting takes no lock and no map lookup.
#[derive(Debug, Default)]
pub(crate) struct CallResults {
    successes: AtomicU64,
    failures: AtomicU64,
    /// Attempts that got a connection to the address from a pick.
    started: AtomicU64,
    /// Of those, the attempts that ended OK.
    succeeded: AtomicU64,
    /// Of those, the attempts that ended otherwise (cancelled ones included, as channelz counts them).
    failed: AtomicU64,
    /// Set: one xDS cluster's results on the address (its outlier detection's counts, A50's xDS mapping),
    /// whose attempts count for the stats in the address's own results (this one's stay zero).
    stats_in: Option<Arc<CallResults>>,
}

/// One attempt's place in its address's [`CallResults`], from its pick to its end: counted as started
/// when made, as succeeded or failed once ([`AttemptCount::record`]), and as failed if dropped unrecorded
/// (an attempt cancelled, or cut before it was counted).
#[derive(Debug)]
pub(crate) struct AttemptCount {
    results: Option<Arc<CallResults>>,
}

impl AttemptCount {
    /// An attempt picked a connection to the address of `results`: one more started.
    pub(crate) fn start(results: Arc<CallResults>) -> AttemptCount {
        results.stats().started.fetch_add(1, Ordering::Relaxed);
        AttemptCount {
            results: Some(results),
        }
    }

    /// The attempt ended: counted for outlier detection by its rules ([`CallResults::record`]) and in
    /// the address's stats (OK a success, anything else, a cancel included, a failure).
    pub(crate) fn record(mut self, result: AttemptResult) {
        if let Some(results) = self.results.take() {
            results.record(result);
            let counter = match result {
                AttemptResult::Ended(Code::Ok) => &results.stats().succeeded,
                _ => &results.stats().failed,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for AttemptCount {
    fn drop(&mut self) {
        if let Some(results) = self.results.take() {
            results.stats().failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Why an attempt ended, as far as counting goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AttemptResult {
    /// The attempt ended with this status (from the server, the connection, or the client's deadline).
    Ended(Code),
    /// The client cancelled it (the application, a dropped call): not counted.
    Cancelled,
}

impl CallResults {
    /// One xDS cluster's results on the address whose results are `address`: outlier detection counts
    /// there, the stats in `address`.
    pub(crate) fn in_cluster(address: Arc<CallResults>) -> CallResults {
        CallResults {
            stats_in: Some(address),
            ..CallResults::default()
        }
    }

    /// Where the stats of attempts counted here go.
    fn stats(&self) -> &CallResults {
        self.stats_in.as_deref().unwrap_or(self)
    }

    /// Counts one attempt's end for outlier detection.
    fn record(&self, result: AttemptResult) {
        let counter = match result {
            AttemptResult::Ended(Code::Ok) => &self.successes,
            AttemptResult::Ended(_) => &self.failures,
            AttemptResult::Cancelled => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The attempts started, succeeded and failed on the address, as `Channel::stats()` shows them.
    pub(crate) fn attempts(&self) -> (u64, u64, u64) {
        (
            self.started.load(Ordering::Relaxed),
            self.succeeded.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    /// Takes the counts so far, leaving zero.
    pub(crate) fn take(&self) -> CallCounts {
        CallCounts {
            successes: self.successes.swap(0, Ordering::Relaxed),
            failures: self.failures.swap(0, Ordering::Relaxed),
        }
    }
}

/// What the control plane publishes of outlier detection for [`crate::Channel::stats`]: the addresses
/// ejected now, and how often each address was ejected since the channel started (addresses shown as
/// text: `ip:port`, or `unix:` and a Unix socket's path, as the address displays).
#[derive(Debug, Default)]
pub(crate) struct EjectionStats {
    inner: Mutex<EjectionCounts>,
}

#[derive(Debug, Default)]
struct EjectionCounts {
    ejected: Vec<String>,
    ejections: BTreeMap<String, u64>,
}

/// The most addresses whose ejection counts are kept: a channel whose address list keeps changing does
/// not grow this without bound (the counts of addresses beyond it are not kept).
const MAX_COUNTED_ADDRESSES: usize = 1024;

impl EjectionStats {
    /// The control plane ejected `address`.
    pub(crate) fn ejected(&self, address: String) {
        let mut inner = self.inner.lock();
        let known = inner.ejections.len();
        match inner.ejections.get_mut(&address) {
            Some(count) => *count += 1,
            None if known < MAX_COUNTED_ADDRESSES => {
                inner.ejections.insert(address.clone(), 1);
            }
            None => {}
        }
        if !inner.ejected.contains(&address) {
            inner.ejected.push(address);
        }
    }

    /// `address` is back in service.
    pub(crate) fn unejected(&self, address: &str) {
        self.inner.lock().ejected.retain(|a| a != address);
    }

    /// Nothing is ejected (detection off, or the channel idle).
    pub(crate) fn clear(&self) {
        self.inner.lock().ejected.clear();
    }

    /// The ejected addresses, and the ejection count of each address ever ejected.
    pub(crate) fn snapshot(&self) -> (Vec<String>, BTreeMap<String, u64>) {
        let inner = self.inner.lock();
        (inner.ejected.clone(), inner.ejections.clone())
    }
}

/// Logs (DEBUG) why a sweep left an address with failures in service: one event per address per sweep,
/// naming each configured algorithm's reason (`grpc_lb::NotEjectedReason`), so that a backend failing
/// every call that stays in service has an explanation (most often: `requestVolume` is per address per
/// interval, and the address carried fewer calls than that).
pub(crate) fn trace_not_ejected(note: &NotEjected) {
    // The words cost allocations: built only for a subscriber that wants the event.
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let why = |algorithm: &str, reason: &Option<NotEjectedReason>| {
        reason
            .as_ref()
            .map(|r| format!("{algorithm}: {}", explain(r)))
    };
    let reasons: Vec<String> = [
        why("successRateEjection", &note.success_rate),
        why("failurePercentageEjection", &note.failure_percentage),
    ]
    .into_iter()
    .flatten()
    .collect();
    tracing::debug!(
        address = %note.address,
        failures = note.counts.failures,
        calls = note.counts.total(),
        "outlier detection did not eject the address: {}",
        reasons.join("; ")
    );
}

/// One algorithm's reason, in words.
fn explain(reason: &NotEjectedReason) -> String {
    match reason {
        NotEjectedReason::BelowRequestVolume {
            calls,
            request_volume,
        } => format!(
            "{calls} calls in the interval, below requestVolume {request_volume} (requestVolume counts \
             one address's calls per interval)"
        ),
        NotEjectedReason::BelowMinimumHosts {
            hosts,
            minimum_hosts,
        } => format!(
            "{hosts} addresses had requestVolume calls in the interval, fewer than minimumHosts \
             {minimum_hosts}: the algorithm did not run"
        ),
        NotEjectedReason::MaxEjectionPercent {
            ejected,
            total,
            max_ejection_percent,
        } => format!(
            "an outlier, but {ejected} of {total} addresses are ejected: maxEjectionPercent \
             {max_ejection_percent} reached"
        ),
        NotEjectedReason::EnforcementDraw {
            enforcement_percentage,
        } => format!(
            "an outlier, spared by the random draw against enforcementPercentage \
             {enforcement_percentage}"
        ),
        NotEjectedReason::SuccessRateNotBelowThreshold {
            threshold: Some(threshold),
        } => format!("its success rate is not below the sweep's threshold {threshold:.3}"),
        NotEjectedReason::SuccessRateNotBelowThreshold { threshold: None } => {
            "every address with enough calls has the same success rate: no outlier".to_owned()
        }
        NotEjectedReason::FailurePercentageNotAboveThreshold { threshold } => {
            format!("its failures are not above threshold {threshold} % of its calls")
        }
        // A reason this channel does not know yet.
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_is_a_success_any_other_status_a_failure_and_a_cancel_nothing() {
        let results = CallResults::default();
        results.record(AttemptResult::Ended(Code::Ok));
        results.record(AttemptResult::Ended(Code::Ok));
        results.record(AttemptResult::Ended(Code::Unavailable));
        results.record(AttemptResult::Ended(Code::DeadlineExceeded));
        results.record(AttemptResult::Ended(Code::NotFound));
        results.record(AttemptResult::Cancelled);
        assert_eq!(
            results.take(),
            CallCounts {
                successes: 2,
                failures: 3
            }
        );
        assert_eq!(results.take(), CallCounts::default(), "taken");
    }

    #[test]
    fn attempt_counts_start_at_the_pick_and_end_once() {
        let results = Arc::new(CallResults::default());
        AttemptCount::start(results.clone()).record(AttemptResult::Ended(Code::Ok));
        AttemptCount::start(results.clone()).record(AttemptResult::Ended(Code::Unavailable));
        AttemptCount::start(results.clone()).record(AttemptResult::Cancelled);
        drop(AttemptCount::start(results.clone()));
        let in_flight = AttemptCount::start(results.clone());
        assert_eq!(results.attempts(), (5, 1, 3));
        assert_eq!(
            results.take(),
            CallCounts {
                successes: 1,
                failures: 1
            },
            "outlier detection counts neither the cancel nor the drop"
        );
        drop(in_flight);
        assert_eq!(results.attempts(), (5, 1, 4));
    }

    #[test]
    fn ejection_stats_list_the_ejected_and_count_every_ejection() {
        let stats = EjectionStats::default();
        stats.ejected("10.0.0.1:443".into());
        stats.ejected("10.0.0.2:443".into());
        stats.unejected("10.0.0.1:443");
        stats.ejected("10.0.0.1:443".into());
        let (ejected, counts) = stats.snapshot();
        assert_eq!(ejected, ["10.0.0.2:443", "10.0.0.1:443"]);
        assert_eq!(counts.get("10.0.0.1:443"), Some(&2));
        assert_eq!(counts.get("10.0.0.2:443"), Some(&1));
        stats.clear();
        assert!(stats.snapshot().0.is_empty());
        assert_eq!(stats.snapshot().1.len(), 2, "counts stay");
    }
}
