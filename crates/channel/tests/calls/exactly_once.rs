//! Exactly-once calls end to end: a non-idempotent counter (`interop::counter`) behind a `grpc-exactly-once`
//! result tracker, over real loopback sockets on tokio's paused clock. Under a retry policy with failures
//! injected after processing, and under hedging with a slow first backend (two backends sharing one
//! tracker), the counter equals the number of successful calls and no request id runs twice; without
//! exactly-once the same faults do execute calls twice (the test would see it).

use grpc_test_support as support;

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Request};
use grpc_exactly_once::{Config, ResultTracker};
use interop::counter::{CounterServer, Faults, Shared, INCREMENT};
use support::config::{hedging, retry, ServiceConfig};

const COUNTER: &str = "exactly_once.Counter";

/// Up to 5 attempts on UNAVAILABLE, backoff 10 ms, ×2, at most 100 ms.
fn counter_retry() -> ServiceConfig {
    retry(5, &["UNAVAILABLE"])
        .service(COUNTER)
        .initial_backoff("0.01s")
        .max_backoff("0.1s")
}

/// Two attempts over round_robin, the hedge 20 ms after the original.
fn counter_hedging() -> ServiceConfig {
    hedging(2, "0.02s").service(COUNTER).round_robin()
}

fn tracked() -> Shared {
    Shared::new(Some(ResultTracker::new(Config::default(), Bytes::len)))
}

/// A backend of `shared` that fails 20 % of its executions after processing, and a channel to it with a
/// retry policy (exactly-once or not).
async fn failing_after_processing(shared: &Shared, exactly_once: bool) -> (CounterServer, Channel) {
    let faults = Faults {
        fail_after_processing: 0.2,
        seed: 7,
        ..Faults::default()
    };
    let server = CounterServer::start(shared.clone(), faults)
        .await
        .expect("server");
    let channel = Channel::builder(format!("ipv4:{}", server.addr))
        .default_service_config(counter_retry())
        .exactly_once(exactly_once)
        .build()
        .expect("channel");
    (server, channel)
}

/// `calls` increments, `in_flight` at a time; returns how many succeeded.
async fn increments(channel: &Channel, calls: usize, in_flight: usize) -> usize {
    let mut tasks = Vec::new();
    for worker in 0..in_flight {
        let channel = channel.clone();
        let share = calls / in_flight + usize::from(worker < calls % in_flight);
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            for _ in 0..share {
                let request = Request::new(Bytes::new()).with_timeout(Duration::from_secs(30));
                if channel.unary_raw(INCREMENT, request).await.is_ok() {
                    ok += 1;
                }
            }
            ok
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await.expect("task");
    }
    ok
}

#[tokio::test(start_paused = true)]
async fn retries_after_processing_never_execute_twice_over_10000_calls() {
    let shared = tracked();
    let (_server, channel) = failing_after_processing(&shared, true).await;
    let ok = increments(&channel, 10_000, 32).await;
    let stats = shared.tracker().expect("tracker").stats();
    let method = &channel.stats().methods[INCREMENT];
    eprintln!(
        "exactly-once under retries: {ok} successful calls, counter {}, double executions {}, \
         {} attempts ({} retries), {} answers replayed from the tracker, {} responses cached at the end",
        shared.count(),
        shared.double_executions(),
        method.attempts,
        method.retries,
        stats.replayed,
        stats.completed
    );
    assert_eq!(ok, 10_000);
    assert_eq!(shared.count(), 10_000, "one execution per successful call");
    assert_eq!(shared.double_executions(), 0);
    assert!(method.retries > 1_000, "the faults caused retries");
    assert_eq!(stats.replayed, method.retries);
    // The watermark lets the server forget: only the calls in flight at the end stay cached.
    assert!(
        stats.completed <= 64,
        "{} responses still cached",
        stats.completed
    );
}

#[tokio::test(start_paused = true)]
async fn without_exactly_once_the_same_retries_execute_twice() {
    let shared = tracked();
    let (_server, channel) = failing_after_processing(&shared, false).await;
    let ok = increments(&channel, 500, 8).await;
    // A call fails only when all 5 of its executions fail (0.2^5 per call): which calls get which faults
    // depends on how the 8 workers interleave, so now and then one of the 500 does.
    assert!(ok >= 495, "{ok} of 500 calls succeeded");
    assert!(
        shared.count() > ok as u64 + 50,
        "retries after processing run the increment again: counter {} for {ok} successful calls",
        shared.count()
    );
}

#[tokio::test(start_paused = true)]
async fn hedges_to_a_second_backend_share_the_first_ones_result() {
    let shared = tracked();
    let slow = CounterServer::start(
        shared.clone(),
        Faults {
            delay: Duration::from_millis(200),
            ..Faults::default()
        },
    )
    .await
    .expect("slow backend");
    let fast = CounterServer::start(shared.clone(), Faults::default())
        .await
        .expect("fast backend");
    let channel = Channel::builder(format!("ipv4:{},{}", slow.addr, fast.addr))
        .default_service_config(counter_hedging())
        .exactly_once(true)
        .build()
        .expect("channel");
    let ok = increments(&channel, 400, 8).await;
    let method = &channel.stats().methods[INCREMENT];
    eprintln!(
        "exactly-once under hedging: {ok} successful calls, counter {}, double executions {}, {} hedges",
        shared.count(),
        shared.double_executions(),
        method.hedges
    );
    assert_eq!(ok, 400);
    assert!(method.hedges > 50, "calls to the slow backend were hedged");
    assert_eq!(shared.count(), 400);
    assert_eq!(shared.double_executions(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_call_can_opt_in_on_its_own() {
    let shared = tracked();
    let server = CounterServer::start(
        shared.clone(),
        Faults {
            fail_after_processing: 1.0,
            ..Faults::default()
        },
    )
    .await
    .expect("server");
    let channel = Channel::builder(format!("ipv4:{}", server.addr))
        .default_service_config(counter_retry())
        .build()
        .expect("channel");
    // Every execution answers UNAVAILABLE: the retry gets the cached result instead of a second run.
    let response = channel
        .unary_raw(
            INCREMENT,
            Request::new(Bytes::new()).with_exactly_once(true),
        )
        .await
        .expect("the retry is answered from the tracker");
    assert_eq!(response.message().as_ref(), &1u64.to_be_bytes());
    assert_eq!(shared.count(), 1);
}
