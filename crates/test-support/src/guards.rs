//! Bounds that turn a hang into a failure, and waits for a condition.
//!
//! Two clocks, two bounds: [`NO_HANG`] is real time, for tests on the running clock; [`GUARD`] is for tests
//! on tokio's paused clock, where a hang makes the clock jump straight to the guard, so a long guard costs
//! no wall-clock time.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A bound on how long a test's call may take on the running clock: the test fails instead of hanging.
/// (Real time: a guard, not a measurement.)
pub const NO_HANG: Duration = Duration::from_secs(20);

/// How long (on the paused clock) any step of a test may take before the test fails instead of hanging. Far
/// above every timeout, backoff and scripted wait the tests set (the longest is a 300 s sleep), so it only
/// fires on a hang.
pub const GUARD: Duration = Duration::from_secs(600);

/// The step of [`settle`]: short, so loopback I/O keeps up with the paused clock.
pub const SETTLE_STEP: Duration = Duration::from_millis(5);

/// Awaits `f` on the paused clock, failing the test if it takes longer than [`GUARD`].
pub async fn guarded<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(GUARD, f).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: no result within {GUARD:?} of paused time (hang)"),
    }
}

/// Awaits `f`, failing the test if it takes longer than [`NO_HANG`].
pub async fn no_hang<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(NO_HANG, f).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: no result within {NO_HANG:?} (hang)"),
    }
}

/// Waits (10 ms at a time, at most 2 s) until `done` holds.
pub async fn eventually(what: &str, done: impl FnMut() -> bool) {
    eventually_every(Duration::from_millis(10), what, done).await;
}

/// Waits (`step` at a time, at most 2 s) until `done` holds.
pub async fn eventually_every(step: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let tries = Duration::from_secs(2).as_nanos() / step.as_nanos();
    for _ in 0..tries {
        if done() {
            return;
        }
        tokio::time::sleep(step).await;
    }
    panic!("never happened: {what}");
}

/// Lets loopback I/O happen on the paused clock: many short sleeps ([`SETTLE_STEP`]) instead of one long
/// jump.
pub async fn settle(total: Duration) {
    let mut waited = Duration::ZERO;
    while waited < total {
        tokio::time::sleep(SETTLE_STEP).await;
        waited += SETTLE_STEP;
    }
}

/// A real-time watchdog: a busy loop keeps the paused clock from advancing, so only real time can stop it.
/// Ends the process if it is not dropped within its time.
pub struct Watchdog(Arc<AtomicBool>);

/// Starts a [`Watchdog`] that ends the process after `secs` seconds of real time.
pub fn watchdog(what: &'static str, secs: u64) -> Watchdog {
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let until = std::time::Instant::now() + Duration::from_secs(secs);
        while std::time::Instant::now() < until {
            if d.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("watchdog: {what} still running after {secs} s of real time (busy loop?)");
        std::process::exit(101);
    });
    Watchdog(done)
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
