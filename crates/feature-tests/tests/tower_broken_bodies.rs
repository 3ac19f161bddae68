//! `grpc_channel::tower::ChannelService` never half-closes a broken request: a request body with one valid
//! message and then a failure (a bad compressed-flag byte, a message cut short, a body error, a message over
//! the send limit, a gzip bomb) must end its call with RST_STREAM(CANCEL), so the server never sees a
//! clean END_STREAM after a partial request (which it would run, while the client is told the call failed,
//! and an application retry would run it twice). And the client must get the failure's status.
//!
//! Each kind runs [`RUNS`] times against one h2 server on a loopback socket that records, for every stream,
//! whether the request ended with END_STREAM or with a reset (and answers OK after a clean END_STREAM, as
//! a real server would). Three shapes of call: one still uncommitted when the body fails (the retry driver
//! holds the attempt: the server answers only after the request), one committed to its attempt (the server
//! sends response headers at once, and the body fails only after the client has them), and one whose body
//! fails while the response headers commit the call.

use grpc_test_support as support;

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::future::Future as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use grpc_channel::tower::{ChannelService, ResponseBody};
use grpc_channel::{framing, Channel};
use h2::server::SendResponse;
use h2::RecvStream;
use http::{HeaderMap, HeaderValue};
use http_body::{Body, Frame};
use support::frames::frame;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tower_service::Service as _;

/// Runs of each broken-body kind.
const RUNS: usize = 1000;
/// The channel's send limit.
const LIMIT: usize = 16 << 10;
/// How long one broken call, and the server's record of its end, may take before the run counts it as
/// never ended (real time: a guard, not a measurement).
const CALL_BOUND: Duration = Duration::from_secs(10);

/// The method whose server waits for the whole request before answering.
const ANSWER_AFTER_REQUEST: &str = "/test.Broken/AnswerAfterRequest";
/// The method whose server sends response headers at once (the call commits to its attempt).
const HEADERS_AT_ONCE: &str = "/test.Broken/HeadersAtOnce";

/// How a request stream ended at the server.
#[derive(Debug)]
enum RequestEnd {
    /// END_STREAM: the server took the request as whole (and answered OK).
    HalfClosed,
    /// RST_STREAM with this reason.
    Reset(h2::Reason),
    /// Anything else (a connection error).
    Other(String),
}

/// The recording server: its address, and how each request stream ended, in the order they ended.
struct Server {
    addr: SocketAddr,
    ends: mpsc::Receiver<RequestEnd>,
}

impl Server {
    async fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, ends) = mpsc::channel(16);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(tcp).await else {
                        return;
                    };
                    while let Some(Ok((request, respond))) = conn.accept().await {
                        tokio::spawn(serve(request, respond, tx.clone()));
                    }
                });
            }
        });
        Server { addr, ends }
    }

    /// How the next request stream ended.
    async fn next_end(&mut self) -> Option<RequestEnd> {
        tokio::time::timeout(CALL_BOUND, self.ends.recv())
            .await
            .ok()
            .flatten()
    }
}

/// Reads a request to its end, records how it ended, and answers OK if it ended with END_STREAM.
async fn serve(
    request: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    ends: mpsc::Sender<RequestEnd>,
) {
    let headers_at_once = request.uri().path() == HEADERS_AT_ONCE;
    let mut send = if headers_at_once {
        respond.send_response(response_headers(None), false).ok()
    } else {
        None
    };
    let mut body = request.into_body();
    let end = loop {
        match body.data().await {
            Some(Ok(chunk)) => {
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            Some(Err(e)) => match e.reason() {
                Some(reason) if e.is_reset() => break RequestEnd::Reset(reason),
                _ => break RequestEnd::Other(e.to_string()),
            },
            None => break RequestEnd::HalfClosed,
        }
    };
    if let RequestEnd::HalfClosed = end {
        // The request looked whole: a real server would have run it.
        let mut ok = HeaderMap::new();
        ok.insert("grpc-status", HeaderValue::from_static("0"));
        match send.as_mut() {
            Some(send) => {
                let _ = send.send_trailers(ok);
            }
            None => {
                let _ = respond.send_response(response_headers(Some(ok)), true);
            }
        }
    }
    let _ = ends.send(end).await;
}

fn response_headers(status: Option<HeaderMap>) -> http::Response<()> {
    let mut response = http::Response::new(());
    let h = response.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/grpc"));
    h.extend(status.unwrap_or_default());
    response
}

/// The ways a request body breaks after one valid message.
#[derive(Clone, Copy, Debug)]
enum Broken {
    /// A message prefix whose compressed-flag byte is 2.
    BadFlag,
    /// The body ends inside a message.
    Truncated,
    /// The body fails.
    BodyError,
    /// A prefix declaring a message over the send limit; the body then yields nothing more (the call must
    /// end at the prefix, not wait to buffer the message).
    Oversize,
    /// A compressed message far under the limit that decompresses far over it.
    GzipBomb,
}

impl Broken {
    const ALL: [Broken; 5] = [
        Broken::BadFlag,
        Broken::Truncated,
        Broken::BodyError,
        Broken::Oversize,
        Broken::GzipBomb,
    ];

    /// The `grpc-status` the client must get.
    fn status(self) -> &'static str {
        match self {
            Broken::BadFlag | Broken::Truncated => "13",
            Broken::BodyError => "1",
            Broken::Oversize | Broken::GzipBomb => "8",
        }
    }

    /// What follows the valid message.
    fn parts(self, bomb: &Bytes) -> Vec<Part> {
        match self {
            Broken::BadFlag => vec![Part::Data(Bytes::from_static(&[2, 0, 0, 0, 1, 9]))],
            Broken::Truncated => vec![Part::Data(frame(false, &[1; 10]).slice(..8))],
            Broken::BodyError => vec![Part::Error],
            Broken::Oversize => {
                let mut prefix = BytesMut::new();
                framing::put_header(&mut prefix, false, LIMIT as u32 + 1);
                vec![Part::Data(prefix.freeze()), Part::Stall]
            }
            Broken::GzipBomb => vec![Part::Data(bomb.clone())],
        }
    }
}

/// One step of a [`TestBody`].
enum Part {
    Data(Bytes),
    Error,
    /// Nothing until the receiver fires.
    Gate(oneshot::Receiver<()>),
    /// Nothing, ever (the adapter drops the body when the call ends).
    Stall,
}

/// A request body that plays its parts.
struct TestBody(VecDeque<Part>);

#[derive(Debug)]
struct BodyError;

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request source failed")
    }
}

impl std::error::Error for BodyError {}

impl Body for TestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let parts = &mut self.0;
        // Each part is looked at once, a gate until it opens: bounded by the parts.
        while let Some(part) = parts.front_mut() {
            match part {
                Part::Data(data) => {
                    let data = std::mem::take(data);
                    parts.pop_front();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Part::Error => {
                    parts.pop_front();
                    return Poll::Ready(Some(Err(BodyError)));
                }
                Part::Gate(gate) => match Pin::new(gate).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(_) => {
                        parts.pop_front();
                    }
                },
                Part::Stall => return Poll::Pending,
            }
        }
        Poll::Ready(None)
    }
}

/// A framed gzip message of a few KiB that decompresses to 64 times the send limit.
fn gzip_bomb() -> Bytes {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(&vec![0; 64 * LIMIT]).expect("gzip");
    let compressed = e.finish().expect("gzip");
    assert!(compressed.len() < LIMIT / 4, "{} bytes", compressed.len());
    frame(true, &compressed)
}

/// Reads a whole response: the `grpc-status` from the Trailers-Only headers or the trailers.
async fn status_of(response: http::Response<ResponseBody>) -> Option<String> {
    let (parts, body) = response.into_parts();
    let mut status = parts.headers.get("grpc-status").cloned();
    let mut body = std::pin::pin!(body);
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let Ok(frame) = frame else { break };
        if let Ok(trailers) = frame.into_trailers() {
            status = status.or_else(|| trailers.get("grpc-status").cloned());
        }
    }
    status.and_then(|v| v.to_str().ok().map(str::to_owned))
}

/// What the runs of one kind came to.
#[derive(Debug, Default)]
struct Tally {
    half_closed: usize,
    cancelled: usize,
    other_end: Vec<String>,
    wrong_status: Vec<Option<String>>,
    never_ended: usize,
}

impl Tally {
    fn clean(&self) -> bool {
        self.half_closed == 0
            && self.cancelled == RUNS
            && self.other_end.is_empty()
            && self.wrong_status.is_empty()
            && self.never_ended == 0
    }
}

/// When the request body breaks, for the call.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// Before the call commits: the server answers only after the request.
    Uncommitted,
    /// Once the call has committed: the server sends response headers at once, and the body breaks only
    /// after the client has them.
    Committed,
    /// While the call commits: the server sends response headers at once, and the body breaks at once.
    Committing,
}

impl Shape {
    fn path(self) -> &'static str {
        match self {
            Shape::Uncommitted => ANSWER_AFTER_REQUEST,
            Shape::Committed | Shape::Committing => HEADERS_AT_ONCE,
        }
    }
}

/// One broken call through the adapter: the client's status, or `None` if the call did not end.
async fn broken_call(
    service: &mut ChannelService,
    shape: Shape,
    broken: Broken,
    bomb: &Bytes,
) -> Option<Option<String>> {
    let path = shape.path();
    let mut parts = vec![Part::Data(frame(false, b"a valid message"))];
    let gate = matches!(shape, Shape::Committed).then(|| {
        let (open, gate) = oneshot::channel();
        parts.push(Part::Gate(gate));
        open
    });
    parts.extend(broken.parts(bomb));
    let mut request = http::Request::builder()
        .method("POST")
        .uri(format!("http://example.invalid{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Broken::GzipBomb = broken {
        request = request.header("grpc-encoding", "gzip");
    }
    let request = request.body(TestBody(parts.into())).expect("request");
    tokio::time::timeout(CALL_BOUND, async {
        let response = service.call(request).await.expect("the adapter answers");
        if let Some(open) = gate {
            assert!(
                response.headers().get("grpc-status").is_none(),
                "the server's headers came first: {:?}",
                response.headers()
            );
            let _ = open.send(());
        }
        status_of(response).await
    })
    .await
    .ok()
}

/// Runs every broken-body kind [`RUNS`] times on calls of `shape`, one server and one channel for all.
async fn run_all(shape: Shape) {
    let mut server = Server::start().await;
    let channel = Channel::builder(format!("ipv4:{}", server.addr))
        .max_send_message_size(LIMIT)
        .build()
        .expect("channel");
    let mut service = ChannelService::new(channel);
    let bomb = gzip_bomb();
    let mut tallies = Vec::new();
    for broken in Broken::ALL {
        let mut tally = Tally::default();
        for _ in 0..RUNS {
            let Some(status) = broken_call(&mut service, shape, broken, &bomb).await else {
                // A call that does not end will not end the next time either. Given up on, it was
                // dropped: its stream's end is this run's.
                tally.never_ended += 1;
                let _ = server.next_end().await;
                break;
            };
            if status.as_deref() != Some(broken.status()) {
                tally.wrong_status.push(status);
            }
            match server.next_end().await {
                Some(RequestEnd::HalfClosed) => tally.half_closed += 1,
                Some(RequestEnd::Reset(h2::Reason::CANCEL)) => tally.cancelled += 1,
                Some(RequestEnd::Reset(reason)) => tally.other_end.push(format!("reset {reason}")),
                Some(RequestEnd::Other(e)) => tally.other_end.push(e),
                None => tally.other_end.push("no end at the server".to_owned()),
            }
        }
        tallies.push((broken, tally));
    }
    if tallies.iter().all(|(_, tally)| tally.clean()) {
        return;
    }
    let mut report = String::new();
    for (broken, tally) in &tallies {
        let mut statuses: Vec<_> = tally.wrong_status.iter().take(3).collect();
        statuses.dedup();
        let _ = writeln!(
            report,
            "{broken:?}: {} of {RUNS} half-closed (END_STREAM), {} reset CANCEL, {} never ended, other ends {:?}, \
             {} wrong statuses (want {}; e.g. {statuses:?})",
            tally.half_closed,
            tally.cancelled,
            tally.never_ended,
            tally.other_end.iter().take(3).collect::<Vec<_>>(),
            tally.wrong_status.len(),
            broken.status(),
        );
    }
    panic!("broken request bodies, {shape:?}:\n{report}");
}

/// Broken bodies on calls still uncommitted (the retry driver holds the attempt): every one reset, none
/// half-closed, each with its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_request_bodies_reset_uncommitted_calls_and_never_half_close() {
    run_all(Shape::Uncommitted).await;
}

/// Broken bodies on calls committed to their attempt (response headers in): every one reset, none
/// half-closed, each with its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_request_bodies_reset_committed_calls_and_never_half_close() {
    run_all(Shape::Committed).await;
}

/// Broken bodies on calls committing to their attempt as the body breaks (response headers arriving):
/// every one reset, none half-closed, each with its status, none left waiting for a handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_request_bodies_reset_committing_calls_and_never_half_close() {
    run_all(Shape::Committing).await;
}
