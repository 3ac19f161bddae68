//! Helpers for the tests that drive the faulty server's `Flaky*` methods: channels with a service config,
//! requests with the Flaky headers, readers of what the servers recorded per attempt, and one call retried
//! twice ([`retried_call`], for the spans and metrics it leaves).

use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, ChannelBuilder, Request, Response, Status};
use interop::faulty::{methods, AttemptOutcome, Event, FaultyServer, FlakyMessage, FlakyTotals};

use crate::guards::guarded;
use crate::IterStream;

/// The timeout of calls that are not about deadlines.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

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
    let addrs: Vec<_> = servers.iter().map(|s| s.addr).collect();
    crate::ipv4_target(&addrs)
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

/// A unary call to `Flaky` with `x-test-key: key` and the given Flaky headers (see [`flaky_request`]).
pub async fn flaky_unary(
    ch: &Channel,
    key: &str,
    headers: &[(&str, &str)],
) -> Result<Response<Bytes>, Status> {
    ch.unary_raw(
        methods::FLAKY,
        flaky_request(Request::new(Bytes::new()), key, headers),
    )
    .await
}

/// A guarded client-streaming call to `FlakyClientStream` (one 10-byte message) whose first attempt fails
/// UNAVAILABLE.
pub async fn one_failing_client_stream(
    ch: &Channel,
    key: &str,
) -> Result<Response<FlakyTotals>, Status> {
    let (msgs, _) = messages(&[10]);
    guarded(
        "client streaming",
        ch.client_streaming::<FlakyMessage, FlakyTotals, _>(
            methods::FLAKY_CLIENT_STREAM,
            flaky_request(
                Request::new(IterStream(msgs.into_iter())),
                key,
                &[("x-fail-times", "1")],
            ),
        ),
    )
    .await
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

/// A `Flaky` call under `config::retry_config(4, &["UNAVAILABLE"])` whose first two attempts fail, on a new
/// channel to `server`; the channel, after the third attempt succeeded.
pub async fn retried_call(server: &FaultyServer) -> Channel {
    let channel = Channel::builder(format!("ipv4:{}", server.addr))
        .default_service_config(crate::config::retry_config(4, &["UNAVAILABLE"]))
        .build()
        .expect("channel");
    let mut request = Request::new(Bytes::new());
    request
        .metadata_mut()
        .append("x-test-key", "observed")
        .expect("key");
    request
        .metadata_mut()
        .append("x-fail-times", "2")
        .expect("header");
    let response = channel
        .unary_raw(methods::FLAKY, request)
        .await
        .expect("the third attempt succeeds");
    assert_eq!(response.trailers().get("x-attempt"), Some("3"));
    channel
}
