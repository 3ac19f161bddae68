//! Review attacks on the tower adapter's body pump after commit (feature `tower`): a request body that
//! streams behind flow control after the server's response headers committed the call, then ends, fails,
//! or ends after the server already answered. Against the scriptable h2 server on tokio's paused clock.
#![cfg(feature = "tower")]

mod support;

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::tower::{ChannelService, ResponseBody};
use h2::Reason;
use http_body::{Body, Frame};
use support::channel_with_config;
use support::frames::{grpc_message, payloads};
use support::guards::{guarded, settle};
use support::h2_server::{handler, small_window, trailers, Event, H2Server, Stream};
use tower_service::Service as _;

/// A request body the test feeds: DATA chunks, or an error.
struct FedBody(tokio::sync::mpsc::UnboundedReceiver<Result<Bytes, std::io::Error>>);

impl Body for FedBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|item| item.map(|r| r.map(Frame::data)))
    }
}

type Feed = tokio::sync::mpsc::UnboundedSender<Result<Bytes, std::io::Error>>;

/// Message `i`, framed: its index (4 bytes, big-endian), then 1000 bytes.
fn numbered(i: u32) -> Vec<u8> {
    let mut m = i.to_be_bytes().to_vec();
    m.resize(1004, (i % 251) as u8);
    m
}

/// Starts a call through the adapter on `server`, with a body the test feeds; the response once its head
/// is in (the call has committed: every server here answers response headers at once), and the service
/// (its channel must outlive the call).
async fn start(server: &H2Server) -> (ChannelService, Feed, http::Response<ResponseBody>) {
    let ch = channel_with_config(&server.target(), "{}");
    let mut service = ChannelService::new(ch);
    let (feed, fed) = tokio::sync::mpsc::unbounded_channel();
    let request = http::Request::builder()
        .method("POST")
        .uri("http://test/t.S/Bidi")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(FedBody(fed))
        .expect("request");
    let response = guarded("call", service.call(request))
        .await
        .expect("infallible");
    (service, feed, response)
}

/// The response body's frames, to its end: the payloads of its messages, and `grpc-status`.
async fn read_response(response: http::Response<ResponseBody>) -> (Vec<u8>, Option<String>) {
    let mut body = std::pin::pin!(response.into_body());
    let mut data = Vec::new();
    let mut status = None;
    while let Some(frame) = guarded(
        "frame",
        std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)),
    )
    .await
    {
        let frame = frame.expect("frame");
        if let Some(t) = frame.trailers_ref() {
            status = t
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
        } else if let Ok(d) = frame.into_data() {
            data.extend_from_slice(&d);
        }
    }
    (data, status)
}

/// How stream 1 ended at the server: END_STREAMs and reset reasons.
fn ends(server: &H2Server) -> (usize, Vec<Reason>) {
    let events = server.events();
    let ends = events
        .iter()
        .filter(|e| matches!(e, Event::End { id: 1, .. }))
        .count();
    let resets = events
        .iter()
        .filter_map(|e| match e {
            Event::Reset(r) if r.id == 1 => Some(r.reason),
            _ => None,
        })
        .collect();
    (ends, resets)
}

/// Committed at once, the body streams 150 messages behind a 1000-byte window the server reads only after
/// 2 s, then ends: the server gets them all, whole and in order, then one END_STREAM, and answers OK.
#[tokio::test(start_paused = true)]
async fn a_body_streamed_after_commit_ends_once_after_its_backlog() {
    let server = H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            let Some(mut send) = s.headers() else { return };
            tokio::time::sleep(Duration::from_secs(2)).await;
            if s.read_to_end().await.is_ok() {
                let _ = send.send_data(grpc_message(b"done"), false);
                let _ = send.send_trailers(trailers("0", &[]));
            }
        }),
    )
    .await;
    let (_service, feed, response) = start(&server).await;
    let messages: Vec<Vec<u8>> = (0..150).map(numbered).collect();
    for m in &messages {
        feed.send(Ok(grpc_message(m))).expect("feed");
    }
    drop(feed);
    let (data, status) = read_response(response).await;
    assert_eq!(status.as_deref(), Some("0"));
    assert_eq!(payloads(&data), vec![b"done".to_vec()]);
    let (body, ends) = server.body_of_id(1);
    assert_eq!(payloads(&body), messages);
    assert_eq!(ends, 1);
}

/// Committed at once, the body streams 100 messages (most held behind the window) and then fails: the
/// stream is reset with CANCEL and never half-closed, and the response says CANCELLED.
#[tokio::test(start_paused = true)]
async fn a_body_failing_after_commit_with_a_backlog_resets_and_never_half_closes() {
    let server = H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            let Some(_send) = s.headers() else { return };
            tokio::time::sleep(Duration::from_secs(2)).await;
            let _ = s.read_to_end().await;
        }),
    )
    .await;
    let (_service, feed, response) = start(&server).await;
    for i in 0..60 {
        feed.send(Ok(grpc_message(&numbered(i)))).expect("feed");
    }
    settle(Duration::from_millis(100)).await;
    feed.send(Err(std::io::Error::other("broken body")))
        .expect("feed");
    let (_, status) = read_response(response).await;
    assert_eq!(status.as_deref(), Some("1"), "CANCELLED");
    settle(Duration::from_secs(3)).await;
    assert_eq!(ends(&server), (0, vec![Reason::CANCEL]));
}

// Fails on this branch, passes before the change (review): "the server answered OK; the adapter's response
// says grpc-status Some(\"1\")" (CANCELLED): as with the bidi pump, `finish` failed and the sender's
// `cancel_on_drop` drop made CANCELLED the call's status.
/// The server answers the whole response (a message, then OK) without reading the request while the
/// body's messages wait behind flow control; h2 then resets the request stream with NO_ERROR. The body
/// ends afterwards, and only then is the response read: it is the server's message and OK, not a
/// CANCELLED made up by the pump's drop.
#[tokio::test(start_paused = true)]
async fn a_body_ending_after_an_early_ok_response_does_not_cancel_it() {
    let server = H2Server::tcp(
        small_window,
        handler(|mut s: Stream| async move {
            let Some(mut send) = s.headers() else { return };
            tokio::time::sleep(Duration::from_millis(500)).await;
            let _ = send.send_data(grpc_message(b"early"), false);
            let _ = send.send_trailers(trailers("0", &[]));
        }),
    )
    .await;
    let (_service, feed, response) = start(&server).await;
    for i in 0..40 {
        feed.send(Ok(grpc_message(&numbered(i)))).expect("feed");
    }
    settle(Duration::from_secs(1)).await;
    drop(feed);
    settle(Duration::from_millis(100)).await;
    let (data, status) = read_response(response).await;
    assert_eq!(payloads(&data), vec![b"early".to_vec()]);
    assert_eq!(
        status.as_deref(),
        Some("0"),
        "the server answered OK; the adapter's response says grpc-status {status:?}"
    );
}
