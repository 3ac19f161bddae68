//! Client-side health checking (gRFC A17), the part that does I/O: the `grpc.health.v1.Health/Watch` stream
//! the control plane runs on each READY connection while its policy health checks, and what
//! `Channel::stats()` shows of the answers.
//!
//! One watch is a task per connection ([`run`]): it opens the Watch stream on that connection (not through
//! the picker: the check is about this connection), reads each `HealthCheckResponse` and gives the health
//! it means to a [`WatchSink`]. When the stream ends, `grpc_lb::WatchRetry` decides: UNIMPLEMENTED means
//! the server has no health service (healthy, and the watch stops); any other end is NOT_SERVING until the
//! next Watch starts (unknown until it answers), at once if the ended one had been answered, else after
//! the connection backoff. A stream that ends because the connection did ends the watch quietly: losing
//! the connection is the connection's event, not a health answer. The control plane aborts the task
//! (which resets the stream, as A17's "cancel without waiting for the status") when the connection leaves
//! READY, drains, or the policy or service name changes.
//!
//! The Watch is not a user call: no deadline, no retry policy, no retry throttle, no call metrics, no
//! compression (it advertises none, so a compressed answer is a protocol error), and it does not keep the
//! channel out of IDLE. It is a stream, though: while it is open, keepalive pings its connection as it
//! would for a call (`crate::conn::keepalive`), so a backend that goes silent is found out with only its
//! Watch open. The channel's interceptors do run for each Watch (method
//! `/grpc.health.v1.Health/Watch`): they are how an application adds credentials, which A17 sends on the
//! Watch too; their metadata goes with it, their call options are ignored, and one that fails the call
//! fails that Watch. Each answer is bounded ([`MAX_ANSWER`]); a malformed one fails the stream, which is
//! then restarted like any failure.
//!
//! Not here: which policies health check and what a subchannel's health does to picks
//! (`grpc_lb::Health`), the service name (`grpc-service-config`'s `healthCheckConfig`).

use std::collections::BTreeSet;

use bytes::{Bytes, BytesMut};
use grpc_lb::{health_of_serving_status, Health, WatchEnd, WatchNext, WatchRetry};
use grpc_retry::Rng;
use h2::client::SendRequest;
use http::header::{CONTENT_TYPE, TE, USER_AGENT};
use http::{HeaderValue, Method, Request};
use parking_lot::Mutex;
use prost::Message;

use crate::conn::keepalive::OpenStreams;
use crate::request::interceptor::Interceptors;
use crate::request::CallOptions;
use crate::wire::framing::{put_header, Deframer, FrameError};
use crate::wire::metadata::MetadataMap;
use crate::wire::response::{check_header_list, classify_head, status_from_trailers, Head};
use crate::wire::status::{Code, Status};

/// The Watch method's path.
pub(crate) const WATCH_PATH: &str = "/grpc.health.v1.Health/Watch";

/// The largest health answer accepted (a `HealthCheckResponse` is a few bytes).
pub(crate) const MAX_ANSWER: usize = 16 << 10;

/// The largest response header list accepted on the Watch stream.
const HEADER_LIMIT: usize = 16 << 10;

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

/// What every Watch of a channel sends: the request URI (the channel's scheme and authority, the Watch
/// path), the channel's `user-agent`, and the channel's interceptors.
#[derive(Clone, Debug)]
pub(crate) struct WatchSetup {
    pub(crate) uri: http::Uri,
    pub(crate) user_agent: HeaderValue,
    pub(crate) interceptors: Interceptors,
}

/// Where a watch's findings go: the health of the connection each time it changes meaning (a new Watch
/// starts: unknown; an answer; a failure: not serving), and, once, that the server has no health service.
pub(crate) trait WatchSink {
    /// The connection's health is now `health`.
    fn health(&self, health: Health);
    /// The Watch was UNIMPLEMENTED: the connection counts as healthy (reported just before) and the watch
    /// has ended.
    fn unimplemented(&self, status: Status);
}

/// How one Watch stream ended.
enum Ended {
    /// With this status (from the server, or a failure of this stream alone).
    Status(Status),
    /// With the connection: not a health answer.
    ConnectionLost,
}

/// Watches `service` on the connection `conn` to `addr` until aborted (or until the server turns out to
/// have no health service, or the connection is lost), telling `sink` what it finds. Each Watch stream
/// counts in `streams` (the connection's, for its keepalive) while it is open.
pub(crate) async fn run(
    conn: SendRequest<Bytes>,
    streams: OpenStreams,
    setup: WatchSetup,
    service: String,
    addr: String,
    mut rng: Box<dyn Rng + Send>,
    sink: impl WatchSink,
) {
    let mut retry = WatchRetry::default();
    let request = request_frame(&service);
    let mut first = true;
    loop {
        // A connection's first Watch starts unknown already (the control plane made it so); a restart
        // after a failure is unknown again until it answers.
        if !first {
            sink.health(Health::Unknown);
        }
        first = false;
        let mut answered = false;
        // An open Watch keeps the connection's keepalive pinging, as a call does.
        let open = streams.open();
        let ended = watch_once(conn.clone(), &setup, request.clone(), |health| {
            answered = true;
            sink.health(health);
        })
        .await;
        drop(open);
        let status = match ended {
            Ended::Status(status) => status,
            Ended::ConnectionLost => return,
        };
        let end = if status.code() == Code::Unimplemented {
            WatchEnd::Unimplemented
        } else {
            WatchEnd::Failed { answered }
        };
        let now = tokio::time::Instant::now();
        match retry.ended(end, now.into_std(), &mut *rng) {
            WatchNext::Stop => {
                sink.health(Health::Serving);
                sink.unimplemented(status);
                return;
            }
            WatchNext::RetryAt(at) => {
                let at = tokio::time::Instant::from_std(at);
                let retry_in = at.saturating_duration_since(now);
                tracing::debug!(%addr, service, %status, ?retry_in, "the health Watch failed: the address is not used until a new Watch answers SERVING");
                sink.health(Health::NotServing);
                tokio::time::sleep_until(at).await;
            }
        }
    }
}

/// The status of an h2 error on the Watch stream, or [`Ended::ConnectionLost`] when it is the
/// connection's (an I/O error, or a GOAWAY the connection's task also sees).
fn ended_by(e: h2::Error) -> Ended {
    if e.is_io() || e.is_go_away() {
        Ended::ConnectionLost
    } else {
        Ended::Status(Status::from_h2(e))
    }
}

/// The request message, framed (uncompressed).
fn request_frame(service: &str) -> Bytes {
    let message = HealthCheckRequest {
        service: service.to_owned(),
    };
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(crate::wire::framing::HEADER_LEN + len);
    // A service name longer than 4 GiB cannot come from a service config a resolver accepted.
    put_header(&mut buf, false, u32::try_from(len).unwrap_or(u32::MAX));
    message.encode_raw(&mut buf);
    buf.freeze()
}

/// One Watch stream: calls `on_answer` for each answer; returns how it ended.
async fn watch_once(
    conn: SendRequest<Bytes>,
    setup: &WatchSetup,
    request: Bytes,
    on_answer: impl FnMut(Health),
) -> Ended {
    match watch_stream(conn, setup, request, on_answer).await {
        Ok(status) => Ended::Status(status),
        Err(ended) => ended,
    }
}

/// [`watch_once`], with `?` for the ends that are h2 errors.
async fn watch_stream(
    conn: SendRequest<Bytes>,
    setup: &WatchSetup,
    request: Bytes,
    mut on_answer: impl FnMut(Health),
) -> Result<Status, Ended> {
    let mut metadata = MetadataMap::new();
    let mut options = CallOptions::default();
    if let Err(status) = setup
        .interceptors
        .run(WATCH_PATH, &mut metadata, &mut options)
    {
        return Ok(status);
    }
    let mut conn = conn.ready().await.map_err(ended_by)?;
    let mut head = Request::new(());
    *head.method_mut() = Method::POST;
    *head.uri_mut() = setup.uri.clone();
    let headers = head.headers_mut();
    headers.insert(TE, HeaderValue::from_static("trailers"));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(USER_AGENT, setup.user_agent.clone());
    for (name, value) in &metadata.into_headers() {
        headers.append(name.clone(), value.clone());
    }
    let (response, mut send) = conn.send_request(head, false).map_err(ended_by)?;
    // A few bytes: h2 buffers them whatever the window, and END_STREAM follows.
    send.send_data(request, true).map_err(ended_by)?;
    let response = response.await.map_err(ended_by)?;
    let (parts, mut body) = response.into_parts();
    if let Err(status) = check_header_list(&parts.headers, HEADER_LIMIT) {
        return Ok(status);
    }
    match classify_head(parts.status.as_u16(), parts.headers, body.is_end_stream()) {
        Head::End(status, _) => return Ok(status),
        Head::Messages { .. } => {}
    }
    let mut deframer = Deframer::new(MAX_ANSWER);
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(ended_by)?;
        let _ = body.flow_control().release_capacity(chunk.len());
        deframer.push(chunk);
        loop {
            match deframer.next_frame() {
                Ok(None) => break,
                Ok(Some(frame)) if frame.compressed => {
                    return Ok(Status::new(
                        Code::Internal,
                        "a compressed health answer, though the Watch advertised no compression",
                    ))
                }
                Ok(Some(frame)) => match HealthCheckResponse::decode(frame.payload) {
                    Ok(answer) => on_answer(health_of_serving_status(answer.status)),
                    Err(e) => {
                        return Ok(Status::new(
                            Code::Internal,
                            format!("an unparseable health answer: {e}"),
                        ))
                    }
                },
                Err(e) => return Ok(frame_error(e)),
            }
        }
    }
    Ok(match body.trailers().await.map_err(ended_by)? {
        Some(trailers) => match check_header_list(&trailers, HEADER_LIMIT) {
            Err(status) => status,
            Ok(()) => status_from_trailers(trailers).0,
        },
        None => Status::new(Code::Internal, "the Watch stream ended without trailers"),
    })
}

fn frame_error(e: FrameError) -> Status {
    Status::new(Code::Internal, format!("a malformed health answer: {e}"))
}

/// The addresses whose connection is READY but whose health check does not say SERVING (with the
/// watched service), as `Channel::stats()` shows them; written by the control plane.
#[derive(Debug, Default)]
pub(crate) struct HealthStats {
    not_serving: Mutex<BTreeSet<String>>,
}

impl HealthStats {
    /// `address`'s health is now `serving` or not.
    pub(crate) fn set(&self, address: String, serving: bool) {
        let mut set = self.not_serving.lock();
        if serving {
            set.remove(&address);
        } else {
            set.insert(address);
        }
    }

    /// `address` is no longer health checked (its connection is gone, or checking stopped).
    pub(crate) fn forget(&self, address: &str) {
        self.not_serving.lock().remove(address);
    }

    /// Nothing is health checked.
    pub(crate) fn clear(&self) {
        self.not_serving.lock().clear();
    }

    /// The addresses not serving now, in order.
    pub(crate) fn snapshot(&self) -> Vec<String> {
        self.not_serving.lock().iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_frame_is_an_uncompressed_health_check_request() {
        let frame = request_frame("grpc.testing.TestService");
        assert_eq!(frame[0], 0, "not compressed");
        let len = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize;
        assert_eq!(len, frame.len() - 5);
        let decoded = HealthCheckRequest::decode(&frame[5..]).expect("a request");
        assert_eq!(decoded.service, "grpc.testing.TestService");
        assert_eq!(
            request_frame("").len(),
            5,
            "the whole server: an empty message"
        );
    }

    #[test]
    fn stats_list_the_addresses_not_serving() {
        let stats = HealthStats::default();
        stats.set("b".into(), false);
        stats.set("a".into(), false);
        stats.set("c".into(), true);
        assert_eq!(stats.snapshot(), ["a", "b"]);
        stats.set("a".into(), true);
        stats.forget("b");
        assert!(stats.snapshot().is_empty());
    }
}
