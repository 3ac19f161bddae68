//! Scheduling-stall probes for the chaos client: a tokio task and an OS thread each sleep 10 ms in a loop
//! and note how late they wake. A call that ends late while both probes also woke late points at the
//! machine (the client's threads were not scheduled), not at the channel; a call that ends late while both
//! woke on time points at the channel.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a probe sleeps.
const TICK: Duration = Duration::from_millis(10);
/// A wake-up later than this is noted.
const NOTED: Duration = Duration::from_millis(50);
/// At most this many stalls are kept.
const KEPT: usize = 32;

#[derive(Default)]
struct Log {
    tokio_worst: Duration,
    thread_worst: Duration,
    stalls: Vec<String>,
}

/// The running probes.
#[derive(Clone)]
pub(super) struct StallProbe {
    start: Instant,
    log: Arc<Mutex<Log>>,
}

impl StallProbe {
    /// Starts both probes (inside a tokio runtime). They run until the process ends.
    pub(super) fn start(start: Instant) -> StallProbe {
        let probe = StallProbe {
            start,
            log: Arc::default(),
        };
        let p = probe.clone();
        tokio::spawn(async move {
            loop {
                let before = Instant::now();
                tokio::time::sleep(TICK).await;
                p.note("tokio task", before.elapsed().saturating_sub(TICK));
            }
        });
        let p = probe.clone();
        std::thread::spawn(move || loop {
            let before = Instant::now();
            std::thread::sleep(TICK);
            p.note("OS thread", before.elapsed().saturating_sub(TICK));
        });
        probe
    }

    fn note(&self, who: &str, late: Duration) {
        let mut log = self.log.lock();
        if who == "OS thread" {
            log.thread_worst = log.thread_worst.max(late);
        } else {
            log.tokio_worst = log.tokio_worst.max(late);
        }
        if late > NOTED && log.stalls.len() < KEPT {
            let at = self.start.elapsed().as_secs_f64();
            log.stalls.push(format!(
                "at {at:.1} s the {who} woke {} ms late",
                late.as_millis()
            ));
        }
    }

    /// Seconds since the soak started, for timestamps.
    pub(super) fn seconds(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// The summary line and the stalls noted.
    pub(super) fn report(&self) -> (String, Vec<String>) {
        let log = self.log.lock();
        (
            format!(
                "scheduling: worst wake-up delay {} ms (tokio task), {} ms (OS thread); {} over {} ms",
                log.tokio_worst.as_millis(),
                log.thread_worst.as_millis(),
                log.stalls.len(),
                NOTED.as_millis()
            ),
            log.stalls.clone(),
        )
    }
}
