//! Helpers for the tests that drive the faulty server's `Flaky*` methods (streaming_retry.rs,
//! transparent_retry.rs): channels with a service config, requests with the Flaky headers, and readers of
//! what the servers recorded per attempt.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, ChannelBuilder, Request};
use interop::faulty::{AttemptOutcome, Event, FaultyServer, FlakyMessage};

/// How long (on the paused clock) any step of a test may take before the test fails instead of hanging. Far
/// above every timeout the tests set, so it only fires on a hang.
pub const GUARD: Duration = Duration::from_secs(120);

/// The timeout of calls that are not about deadlines.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Awaits `f`, failing the test if it takes longer than [`GUARD`].
pub async fn guarded<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(GUARD, f).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: no result within {GUARD:?} (hang)"),
    }
}

/// Waits (on the paused clock, 10 ms at a time, at most 2 s) until `done` holds.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// A `retryPolicy` for every method of `fault.Faulty`: backoff 0.1 s, ×2, at most 1 s.
pub fn retry_config(max_attempts: u32, codes: &[&str]) -> String {
    let codes: Vec<String> = codes.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        r#"{{"methodConfig":[{{"name":[{{"service":"fault.Faulty"}}],"retryPolicy":{{"maxAttempts":{max_attempts},"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[{}]}}}}]}}"#,
        codes.join(",")
    )
}

/// A `hedgingPolicy` for every method of `fault.Faulty`, over round_robin, non-fatal on UNAVAILABLE.
pub fn hedging_config(max_attempts: u32, delay: &str) -> String {
    format!(
        r#"{{"loadBalancingConfig":[{{"round_robin":{{}}}}],"methodConfig":[{{"name":[{{"service":"fault.Faulty"}}],"hedgingPolicy":{{"maxAttempts":{max_attempts},"hedgingDelay":"{delay}","nonFatalStatusCodes":["UNAVAILABLE"]}}}}]}}"#
    )
}

/// A channel to `target` with `config` as its service config (no DNS lookups), after `tweak`.
pub fn channel_with(
    target: &str,
    config: Option<&str>,
    tweak: impl FnOnce(ChannelBuilder) -> ChannelBuilder,
) -> Channel {
    let mut b = Channel::builder(target).service_config_lookup(false);
    if let Some(config) = config {
        b = b.default_service_config(config);
    }
    tweak(b).build().expect("channel")
}

/// The `ipv4:` target of several servers.
pub fn target_of(servers: &[&FaultyServer]) -> String {
    let list: Vec<String> = servers.iter().map(|s| s.addr.to_string()).collect();
    format!("ipv4:{}", list.join(","))
}

/// `req` with `x-test-key: key`, the given Flaky headers, and [`CALL_TIMEOUT`].
pub fn flaky_request<T>(req: Request<T>, key: &str, headers: &[(&str, &str)]) -> Request<T> {
    let mut req = req.with_timeout(CALL_TIMEOUT);
    req.metadata_mut().append("x-test-key", key).expect("key");
    for (k, v) in headers {
        req.metadata_mut().append(k, v).expect("header");
    }
    req
}

/// Request messages with these payload sizes, and the bytes the server will count for them.
pub fn messages(sizes: &[usize]) -> (Vec<FlakyMessage>, u64) {
    let messages: Vec<FlakyMessage> = sizes
        .iter()
        .map(|n| FlakyMessage {
            payload: Bytes::from(vec![7; *n]),
        })
        .collect();
    let bytes = messages
        .iter()
        .map(|m| prost::Message::encoded_len(m) as u64)
        .sum();
    (messages, bytes)
}

/// The attempts the servers saw for `key`: (server's attempt number, `grpc-previous-rpc-attempts`), sorted.
pub fn attempts(servers: &[&FaultyServer], key: &str) -> Vec<(u32, Option<String>)> {
    let mut out: Vec<(u32, Option<String>)> = servers
        .iter()
        .flat_map(|s| s.events())
        .filter_map(|e| match e {
            Event::Attempt {
                key: k,
                number,
                previous_attempts,
            } if k == key => Some((number, previous_attempts)),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

/// How one attempt ended on its server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    /// The server's attempt number for the key.
    pub number: u32,
    /// Request messages received.
    pub messages: u32,
    /// Their bytes.
    pub bytes: u64,
    /// How it ended.
    pub outcome: AttemptOutcome,
}

/// The ends of `key`'s attempts on `server`, in the server's order.
pub fn ended(server: &FaultyServer, key: &str) -> Vec<Ended> {
    server
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::AttemptEnded {
                key: k,
                number,
                messages,
                bytes,
                outcome,
                ..
            } if k == key => Some(Ended {
                number,
                messages,
                bytes,
                outcome,
            }),
            _ => None,
        })
        .collect()
}

/// A failure the server sent as Trailers-Only.
pub fn failed(code: &str) -> AttemptOutcome {
    AttemptOutcome::Failed {
        code: code.into(),
        after_response: false,
    }
}

/// A `Stream` over an iterator, for `client_streaming`.
pub struct IterStream<I>(pub I);

impl<I: Iterator + Unpin> futures_core::Stream for IterStream<I> {
    type Item = I::Item;
    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<I::Item>> {
        Poll::Ready(self.0.next())
    }
}

/// A Unix socket path for one test.
pub fn socket_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("grpc-channel-{}-{name}.sock", std::process::id()))
}
