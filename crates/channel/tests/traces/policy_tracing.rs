//! Which retry policy a call runs shows in its tracing events (`retry.policy`).
//!
//! Runs alone, as every test of this binary does: `tracing` caches each callsite's interest, and a test
//! running in parallel that reaches the same callsite first, while this test installs its subscriber,
//! can leave the callsite disabled for it (a race in callsite registration). With one test at a time
//! (`tracing_capture::install` takes a process-wide lock) there is no such race.

use grpc_test_support as support;

use bytes::Bytes;
use grpc_channel::{Channel, NoRetry, Request};
use interop::faulty::methods;
use support::config::retry;
use support::flaky::{channel_with, flaky_request};
use support::guards::guarded;
use support::tracing_capture;

#[tokio::test(start_paused = true)]
async fn the_policy_source_shows_in_tracing() {
    let (capture, _installed) = tracing_capture::install().await;
    let server = support::faulty_server().await;
    let target = format!("ipv4:{}", server.addr);
    let config = retry(3, &["UNAVAILABLE"])
        .max_backoff("0.1s")
        .backoff_multiplier(1);
    let with_config = channel_with(&target, Some(&config.to_string()), |b| b);
    let plain = Channel::builder(target).build().expect("channel");
    let call = |ch: &Channel, key: &str, no_retry: bool| {
        let mut req = flaky_request(Request::new(Bytes::new()), key, &[]);
        if no_retry {
            req = req.with_retry_policy(NoRetry);
        }
        let ch = ch.clone();
        async move { guarded("flaky call", ch.unary_raw(methods::FLAKY, req)).await }
    };
    call(&with_config, "a", false).await.expect("ok");
    call(&with_config, "b", true).await.expect("ok");
    call(&plain, "c", false).await.expect("ok");
    assert_eq!(
        capture.values_of("retry.policy"),
        ["service_config", "application", "none"]
    );
}
