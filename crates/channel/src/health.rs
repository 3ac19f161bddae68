//! Client-side health checking (gRFC A17), the part that does I/O: the `grpc.health.v1.Health/Watch` stream
//! the control plane runs on each READY connection while its policy health checks, and what
//! `Channel::stats()` shows of the answers.
//!
//! One watch is a task per connection ([`run`]): it opens the Watch stream on that connection (not through
//! the picker: the check is about this connection), reads each `HealthCheckResponse` and reports it to the
//! control plane as a [`Report`]. When the stream ends, `grpc_lb::WatchRetry` decides: UNIMPLEMENTED means
//! the server has no health service (healthy, and the watch stops); any other end is NOT_SERVING until the
//! next Watch starts, at once if the ended one had been answered, else after the connection backoff. The
//! control plane aborts the task (which resets the stream, as A17's "cancel without waiting for the status")
//! when the connection leaves READY, drains, or the policy or service name changes.
//!
//! The Watch is not a user call: no deadline, no retry policy, no retry throttle, no call metrics, no
//! interceptors, no compression (it advertises none, so a compressed answer is a protocol error), and it
//! does not keep the channel out of IDLE. Each answer is bounded ([`MAX_ANSWER`]); a malformed one fails
//! the stream, which is then restarted like any failure.
//!
//! Not here: which policies health check and what a subchannel's health does to picks
//! (`grpc_lb::Health`), the service name (`grpc-service-config`'s `healthCheckConfig`).

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use grpc_lb::{health_of_serving_status, Health, WatchEnd, WatchNext, WatchRetry};
use grpc_retry::Rng;
use h2::client::SendRequest;
use http::header::{CONTENT_TYPE, TE, USER_AGENT};
use http::{HeaderValue, Method, Request};
use parking_lot::Mutex;
use prost::Message;

use crate::framing::{put_header, Deframer, FrameError};
use crate::response::{check_header_list, classify_head, status_from_trailers, Head};
use crate::status::{Code, Status};

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
/// path) and the channel's `user-agent`.
#[derive(Clone, Debug)]
pub(crate) struct WatchSetup {
    pub(crate) uri: http::Uri,
    pub(crate) user_agent: HeaderValue,
}

/// What a watch tells the control plane.
#[derive(Clone, Debug)]
pub(crate) enum Report {
    /// A Watch stream is starting: health is unknown until it answers.
    Starting,
    /// The server answered.
    Answer(Health),
    /// The server has no health service (the Watch was UNIMPLEMENTED): healthy, and the watch stopped.
    Unimplemented(Status),
    /// The Watch stream failed (NOT_SERVING until the next one, which starts in `retry_in`).
    Failed { status: Status, retry_in: Duration },
}

/// Watches `service` on the connection `conn` until aborted (or until the server turns out to have no
/// health service), giving every [`Report`] to `report`.
pub(crate) async fn run(
    conn: SendRequest<Bytes>,
    setup: WatchSetup,
    service: String,
    mut rng: Box<dyn Rng + Send>,
    report: impl Fn(Report),
) {
    let mut retry = WatchRetry::default();
    let request = request_frame(&service);
    let mut first = true;
    loop {
        // A connection's first Watch starts from the health it has (unknown on a new connection; the
        // last answers when the service name changed); a restart after a failure is unknown until answered.
        if !first {
            report(Report::Starting);
        }
        first = false;
        let mut answered = false;
        let status = watch_once(conn.clone(), &setup, request.clone(), |health| {
            answered = true;
            report(Report::Answer(health));
        })
        .await;
        let end = if status.code() == Code::Unimplemented {
            WatchEnd::Unimplemented
        } else {
            WatchEnd::Failed { answered }
        };
        let now = tokio::time::Instant::now();
        match retry.ended(end, now.into_std(), &mut *rng) {
            WatchNext::Stop => {
                report(Report::Unimplemented(status));
                return;
            }
            WatchNext::RetryAt(at) => {
                let at = tokio::time::Instant::from_std(at);
                report(Report::Failed {
                    status,
                    retry_in: at.saturating_duration_since(now),
                });
                tokio::time::sleep_until(at).await;
            }
        }
    }
}

/// The request message, framed (uncompressed).
fn request_frame(service: &str) -> Bytes {
    let message = HealthCheckRequest {
        service: service.to_owned(),
    };
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(crate::framing::HEADER_LEN + len);
    // A service name longer than 4 GiB cannot come from a service config a resolver accepted.
    put_header(&mut buf, false, u32::try_from(len).unwrap_or(u32::MAX));
    message.encode_raw(&mut buf);
    buf.freeze()
}

/// One Watch stream: calls `on_answer` for each answer; returns the status it ended with.
async fn watch_once(
    conn: SendRequest<Bytes>,
    setup: &WatchSetup,
    request: Bytes,
    mut on_answer: impl FnMut(Health),
) -> Status {
    let mut conn = match conn.ready().await {
        Ok(conn) => conn,
        Err(e) => return Status::from_h2(e),
    };
    let mut head = Request::new(());
    *head.method_mut() = Method::POST;
    *head.uri_mut() = setup.uri.clone();
    let headers = head.headers_mut();
    headers.insert(TE, HeaderValue::from_static("trailers"));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(USER_AGENT, setup.user_agent.clone());
    let (response, mut send) = match conn.send_request(head, false) {
        Ok(pair) => pair,
        Err(e) => return Status::from_h2(e),
    };
    // A few bytes: h2 buffers them whatever the window, and END_STREAM follows.
    if let Err(e) = send.send_data(request, true) {
        return Status::from_h2(e);
    }
    let response = match response.await {
        Ok(response) => response,
        Err(e) => return Status::from_h2(e),
    };
    let (parts, mut body) = response.into_parts();
    if let Err(status) = check_header_list(&parts.headers, HEADER_LIMIT) {
        return status;
    }
    match classify_head(parts.status.as_u16(), parts.headers, body.is_end_stream()) {
        Head::End(status, _) => return status,
        Head::Messages { .. } => {}
    }
    let mut deframer = Deframer::new(MAX_ANSWER);
    while let Some(chunk) = body.data().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(e) => return Status::from_h2(e),
        };
        let _ = body.flow_control().release_capacity(chunk.len());
        deframer.push(chunk);
        loop {
            match deframer.next_frame() {
                Ok(None) => break,
                Ok(Some(frame)) if frame.compressed => {
                    return Status::new(
                        Code::Internal,
                        "a compressed health answer, though the Watch advertised no compression",
                    )
                }
                Ok(Some(frame)) => match HealthCheckResponse::decode(frame.payload) {
                    Ok(answer) => on_answer(health_of_serving_status(answer.status)),
                    Err(e) => {
                        return Status::new(
                            Code::Internal,
                            format!("an unparseable health answer: {e}"),
                        )
                    }
                },
                Err(e) => return frame_error(e),
            }
        }
    }
    match body.trailers().await {
        Ok(Some(trailers)) => {
            if let Err(status) = check_header_list(&trailers, HEADER_LIMIT) {
                return status;
            }
            status_from_trailers(trailers).0
        }
        Ok(None) => Status::new(Code::Internal, "the Watch stream ended without trailers"),
        Err(e) => Status::from_h2(e),
    }
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
