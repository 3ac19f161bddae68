//! The tracker's memory stays bounded under what a client controls, measured as resident memory (VmRSS
//! from `/proc/self/status`, so Linux only; elsewhere the figures are skipped and only the counters are
//! checked). Its own test binary, so that no other test's allocations run in the process meanwhile; its two
//! tests take turns on a lock. Growth is measured after a warm-up that fills the caps, so that it shows what
//! the next calls add, not the caps themselves.
//!
//! * A client that pins its watermark at 1 (a hostile one, or one with a call that never ends) and makes a
//!   million calls with 16-byte responses against a 4 KiB cache: the cache stays at 4 KiB, the tombstones
//!   at their per-client cap (the rest fold into the client's forgotten mark), and memory stays flat.
//! * 50,000 requests each with a fresh 1 KiB client id are refused (INVALID_ARGUMENT) without storing
//!   anything; 50,000 fresh 16-byte client ids past the client cap are refused (RESOURCE_EXHAUSTED).

use std::time::Instant;

use bytes::Bytes;
use grpc_exactly_once::{Config, Decision, Refusal, RequestId, Tracker};
use parking_lot::Mutex;

/// The two tests measure the same process: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// How much resident memory may grow over a measured phase.
const FLAT: u64 = 4 << 20;

/// The process's resident memory in bytes, if the platform says.
fn rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Resident growth between two readings, in bytes (0 when it shrank, `None` without readings).
fn growth(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    Some(after?.saturating_sub(before?))
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or_else(
        || "unmeasured".to_owned(),
        |b| format!("{:.2} MiB", b as f64 / f64::from(1 << 20)),
    )
}

fn request(client_id: Bytes, seq_no: u64) -> RequestId {
    RequestId {
        client_id,
        seq_no,
        first_incomplete_seq_no: 1,
        attempt_no: 1,
    }
}

#[test]
fn a_pinned_watermark_keeps_entries_at_their_caps_and_memory_flat() {
    let _serial = SERIAL.lock();
    let config = Config::default().with_max_cached_bytes(4 << 10);
    let mut tracker: Tracker<Bytes> = Tracker::new(config);
    let now = Instant::now();
    let client = Bytes::from_static(&[7; 16]);
    let response = Bytes::from_static(&[1; 16]);
    // Call 1 never ends: the watermark stays at 1.
    assert_eq!(
        tracker.track(&request(client.clone(), 1), now),
        Decision::New
    );
    let mut next = 2;
    let mut calls = |tracker: &mut Tracker<Bytes>, n: u64| {
        for seq in next..next + n {
            let id = request(client.clone(), seq);
            assert_eq!(tracker.track(&id, now), Decision::New);
            tracker.complete(&id, response.clone(), response.len(), now);
        }
        next += n;
    };
    // Warm-up: the cache and the tombstones reach their caps.
    calls(&mut tracker, 100_000);
    let before = rss();
    calls(&mut tracker, 1_000_000);
    let after = rss();
    let stats = tracker.stats();
    eprintln!(
        "pinned watermark, 1,100,000 calls: {} responses ({} bytes) cached, {} tombstones, {} evicted; \
         resident {} before the last 1,000,000 calls, growth {}",
        stats.completed,
        stats.cached_bytes,
        stats.tombstones,
        stats.tombstones_evicted,
        mib(before),
        mib(growth(before, after)),
    );
    assert_eq!((stats.completed, stats.cached_bytes), (256, 4096));
    assert_eq!(stats.tombstones, config.max_tombstones_per_client);
    assert_eq!(
        stats.tombstones_evicted,
        1_100_000 - 256 - config.max_tombstones_per_client as u64
    );
    assert_eq!((stats.in_progress, stats.clients), (1, 1));
    if let Some(grew) = growth(before, after) {
        assert!(grew < FLAT, "resident memory grew by {grew} bytes");
    }
}

#[test]
fn fresh_client_ids_are_refused_and_memory_stays_flat() {
    let _serial = SERIAL.lock();
    const CAP: usize = 1_000;
    let config = Config::default().with_max_clients(CAP);
    let mut tracker: Tracker<Bytes> = Tracker::new(config);
    let now = Instant::now();
    let response = Bytes::from_static(&[1; 16]);
    let id_of = |len: usize, n: u64| {
        let mut id = vec![0; len];
        id[..8].copy_from_slice(&n.to_be_bytes());
        Bytes::from(id)
    };

    // Client ids of 1 KiB: refused before anything is stored.
    let before = rss();
    for n in 0..50_000 {
        let decision = tracker.track(&request(id_of(1024, n), 1), now);
        assert_eq!(
            decision,
            Decision::Refused(Refusal::InvalidClientId { len: 1024 })
        );
    }
    let after_invalid = rss();
    assert_eq!(tracker.stats().clients, 0);

    // 16-byte ids: the first CAP fill the client records, the others are refused.
    for n in 0..CAP as u64 {
        let id = request(id_of(16, n), 1);
        assert_eq!(tracker.track(&id, now), Decision::New);
        tracker.complete(&id, response.clone(), response.len(), now);
    }
    let full = rss();
    for n in CAP as u64..CAP as u64 + 50_000 {
        let decision = tracker.track(&request(id_of(16, n), 1), now);
        assert_eq!(decision, Decision::Refused(Refusal::TooManyClients));
    }
    let after_refused = rss();
    let stats = tracker.stats();
    eprintln!(
        "fresh client ids: 50,000 of 1 KiB refused, growth {}; {} clients remembered, 50,000 more refused, \
         growth {}",
        mib(growth(before, after_invalid)),
        stats.clients,
        mib(growth(full, after_refused)),
    );
    assert_eq!(stats.clients, CAP);
    assert_eq!(
        (stats.invalid_client_ids, stats.clients_refused),
        (50_000, 50_000)
    );
    assert_eq!(stats.executed, CAP as u64);
    for grew in [growth(before, after_invalid), growth(full, after_refused)]
        .into_iter()
        .flatten()
    {
        assert!(grew < FLAT, "resident memory grew by {grew} bytes");
    }
}
