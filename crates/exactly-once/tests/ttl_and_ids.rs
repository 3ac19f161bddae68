//! The result tracker never lets a request execute twice or untracked: a call that ran longer than
//! `client_ttl` keeps its client (and cached response) for its duplicates, and a request id with an empty
//! client id is refused, not run without tracking.

use std::time::{Duration, Instant};

use bytes::Bytes;
use grpc_exactly_once::{Config, Decision, RequestId, ResultTracker, Source, Tracker};

fn id(client: u8, seq_no: u64, first_incomplete: u64) -> RequestId {
    RequestId {
        client_id: Bytes::from(vec![client; 16]),
        seq_no,
        first_incomplete_seq_no: first_incomplete,
        attempt_no: 1,
    }
}

/// A client whose one call runs longer than `client_ttl` (a long batch job, well within its deadline):
/// the call completes and its response is cached, then the first duplicate (the client's retry after the
/// connection dropped under the answer) arrives at once. The client was never silent for `client_ttl`
/// (its call was in progress the whole time) and the response is 0 s old, far below `response_ttl`; yet
/// the duplicate's own arrival runs gc, which forgets the client with its fresh response, and the
/// duplicate executes a second time.
#[tokio::test(start_paused = true)]
async fn a_call_that_ran_longer_than_client_ttl_is_not_executed_again_by_its_retry() {
    let config = Config::default()
        .with_client_ttl(Duration::from_secs(3600))
        .with_response_ttl(Duration::from_secs(600));
    let tracker: ResultTracker<u64> = ResultTracker::new(config, |_| 8);
    let runs = std::sync::atomic::AtomicU32::new(0);
    let request = id(9, 1, 1);
    let first = tracker
        .execute(&request, || async {
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(3700)).await;
            Ok::<u64, ()>(42)
        })
        .await;
    assert_eq!(first, Ok((42, Source::Executed)));
    // The retry, a moment later.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let retry = tracker
        .execute(&request, || async {
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<u64, ()>(43)
        })
        .await;
    assert_eq!(
        runs.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the request executed twice; the retry got {retry:?}"
    );
    assert_eq!(retry, Ok((42, Source::Replayed)));
}

/// "Client id exactly 16 bytes, else INVALID_ARGUMENT": a request id header whose client id is empty is
/// not parsed at all, so a server (the interop counter does so) runs it untracked, every attempt again,
/// instead of refusing it. `from_bytes` keeps other wrong lengths for the tracker to refuse, but not 0.
#[test]
fn a_request_id_with_an_empty_client_id_is_refused_not_run_untracked() {
    let header = RequestId {
        client_id: Bytes::new(),
        seq_no: 1,
        first_incomplete_seq_no: 1,
        attempt_no: 1,
    }
    .to_bytes();
    let parsed = RequestId::from_bytes(&header);
    let Some(parsed) = parsed else {
        panic!("a request id with a 0-byte client id parses to None: the server treats it as no id and executes it untracked");
    };
    let mut tracker: Tracker<u64> = Tracker::new(Config::default());
    assert!(matches!(
        tracker.track(&parsed, Instant::now()),
        Decision::Refused(_)
    ));
}
