//! ResultTracker under concurrency: many attempts of the same requests racing on a multi-threaded runtime
//! run each handler once and all get its response; a cancelled or failed first attempt lets a waiting
//! duplicate run it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_exactly_once::{Config, ExecuteError, RequestId, ResultTracker, Source};

fn id(client: u8, seq: u64, attempt: u32) -> RequestId {
    RequestId {
        client_id: Bytes::from(vec![client; 16]),
        seq_no: seq,
        first_incomplete_seq_no: 1,
        attempt_no: attempt,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_attempts_run_each_request_once() {
    let tracker: ResultTracker<u64> = ResultTracker::new(Config::default(), |_| 8);
    let runs: Arc<Vec<AtomicU64>> = Arc::new((0..200).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for attempt in 1..=5u32 {
        for client in 0..4u8 {
            for seq in 1..=50u64 {
                let (tracker, runs) = (tracker.clone(), runs.clone());
                tasks.push(tokio::spawn(async move {
                    let index = usize::from(client) * 50 + seq as usize - 1;
                    let answer = tracker
                        .execute(&id(client, seq, attempt), || async {
                            runs[index].fetch_add(1, Ordering::SeqCst);
                            tokio::task::yield_now().await;
                            Ok::<_, ()>(index as u64 * 10)
                        })
                        .await;
                    (index, answer)
                }));
            }
        }
    }
    let mut sources: HashMap<Source, usize> = HashMap::new();
    for t in tasks {
        let (index, answer) = t.await.expect("task");
        let (value, source) = answer.expect("answered");
        assert_eq!(
            value,
            index as u64 * 10,
            "every attempt gets the one result"
        );
        *sources.entry(source).or_default() += 1;
    }
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r.load(Ordering::SeqCst), 1, "request {i} ran once");
    }
    assert_eq!(sources.get(&Source::Executed), Some(&200));
    assert_eq!(sources.get(&Source::Replayed), Some(&800));
    let stats = tracker.stats();
    assert_eq!(
        (stats.executed, stats.replayed, stats.in_progress),
        (200, 800, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_first_attempt_lets_a_waiting_duplicate_run() {
    let tracker: ResultTracker<&'static str> = ResultTracker::new(Config::default(), |_| 1);
    let runs = Arc::new(AtomicU64::new(0));
    let first = {
        let (tracker, runs) = (tracker.clone(), runs.clone());
        tokio::spawn(async move {
            tracker
                .execute(&id(1, 1, 1), || async {
                    runs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok::<_, ()>("first")
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = {
        let (tracker, runs) = (tracker.clone(), runs.clone());
        tokio::spawn(async move {
            tracker
                .execute(&id(1, 1, 2), || async {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, ()>("second")
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the duplicate waits");
    first.abort();
    let answer = second.await.expect("task");
    assert_eq!(answer, Ok(("second", Source::Executed)));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_attempt_is_not_cached_and_the_waiter_runs_it() {
    let tracker: ResultTracker<u32> = ResultTracker::new(Config::default(), |_| 4);
    let first = {
        let tracker = tracker.clone();
        tokio::spawn(async move {
            tracker
                .execute(&id(1, 7, 1), || async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Err::<u32, _>("unavailable")
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second_id = id(1, 7, 2);
    let second = tracker.execute(&second_id, || async { Ok::<_, &str>(7) });
    assert_eq!(second.await, Ok((7, Source::Executed)));
    assert_eq!(
        first.await.expect("task"),
        Err(ExecuteError::Handler("unavailable"))
    );
    assert_eq!(
        tracker
            .execute(&id(1, 7, 3), || async { Ok::<_, &str>(99) })
            .await,
        Ok((7, Source::Replayed))
    );
}
