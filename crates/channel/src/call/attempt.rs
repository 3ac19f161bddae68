//! One attempt of a call (gRFC A6): a pick, the request HEADERS (with this attempt's `grpc-timeout` and
//! `grpc-previous-rpc-attempts`), the request messages the retry state machine hands it, and the response
//! headers. An attempt is a poll-driven state machine owned by the call's [`super::driver`], which
//! polls every live attempt from one task: no task or channel per attempt.
//!
//! How it ended is reported in A6's failure places: a failed pick is `PickFailed` (`Dropped` for a
//! load-balancer drop); an h2 error is classified by `grpc-transparent` from how far the stream had got
//! ([`Progress`]); trailers (Trailers-Only) are `Processed`, with their pushback.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use grpc_lb::Address;
use grpc_retry::{AttemptEnd, FailurePlace, Pushback};
use grpc_transparent::Progress;
use h2::client::{ResponseFuture, SendRequest};
use h2::RecvStream;
use http::header::{CONTENT_TYPE, TE, USER_AGENT};
use http::{HeaderMap, HeaderValue};
use tokio::time::Instant;

use crate::call::send_stream::{OnError, Outbox, SendHalf, WriteError, Written};
use crate::control::outlier::{AttemptCount, AttemptResult};
use crate::control::{Pick, PickError, Picked};
use crate::wire::compression::{Encoding, EncodingSet, ReceivedEncoding};
use crate::wire::metadata::names::{
    GRPC_ACCEPT_ENCODING, GRPC_ENCODING, GRPC_PREVIOUS_RPC_ATTEMPTS, GRPC_TIMEOUT,
};
use crate::wire::metadata::MetadataMap;
use crate::wire::response::{check_header_list, classify_head, pushback_of, Head};
use crate::wire::status::{code_from_h2_reason, Code, Status};
use crate::wire::timeout;

/// What every attempt of a call sends.
pub(crate) struct AttemptSetup {
    /// The request URI; its path is the method.
    pub(crate) uri: Arc<http::Uri>,
    /// The channel's `user-agent`.
    pub(crate) user_agent: HeaderValue,
    /// The call's `grpc-encoding`, if its messages may be compressed.
    pub(crate) encoding: Option<Encoding>,
    /// What the call advertises in `grpc-accept-encoding` (none: no header).
    pub(crate) accept: EncodingSet,
    /// The application's metadata (custom headers), sent after the protocol's headers.
    pub(crate) metadata: HeaderMap,
    pub(crate) wait_for_ready: bool,
    /// The cluster the call's route chose (xDS), for every attempt's pick.
    pub(crate) cluster: Option<crate::control::resolver_state::RoutedTo>,
    pub(crate) deadline: Option<Instant>,
    /// Hand each message to h2 whole instead of as flow control admits it: for calls whose request is
    /// complete before the first attempt (unary, server-streaming), which need no backpressure.
    pub(crate) eager: bool,
    /// The largest response header list accepted.
    pub(crate) header_limit: usize,
    /// The call's exactly-once id, if it opted in: a request id goes with every attempt.
    pub(crate) exactly_once: Option<Arc<crate::call::exactly_once::CallId>>,
}

/// What polling an attempt reports.
pub(crate) enum AttemptEvent {
    /// The pick chose this address.
    Picked(Address),
    /// Message `index` was handed to h2 whole.
    Sent(usize),
    /// Response headers arrived and messages follow; [`Attempt::take_open`] has them.
    Headers,
    /// The attempt is over.
    Ended(AttemptEnd, Status),
}

/// The parts of an attempt the call keeps once it commits to it.
pub(crate) struct OpenAttempt {
    pub(crate) send: SendHalf,
    /// The response headers, or the future that brings them.
    pub(crate) response: AttemptResponse,
    /// The last message the attempt had queued at the hand-over, which the call now writes (or h2 has): the
    /// state machine frees its replay copies up to it (gRFC A6: a committed call keeps no retry buffer).
    pub(crate) handed_over: Option<usize>,
    /// Where the committed attempt's result counts (outlier detection, the address's stats), if anywhere.
    pub(crate) results: Option<AttemptCount>,
    /// The pick's guard (its place under the cluster's circuit breaker, xDS, or a custom picker's guard),
    /// held until the call ends.
    pub(crate) breaker: Option<grpc_lb::PickGuard>,
}

/// The response side of an open attempt.
pub(crate) enum AttemptResponse {
    Pending(ResponseFuture),
    /// Headers the attempt has checked and read: within the header list limit, opening a message stream.
    Received(ReceivedHead),
}

/// Response headers that open a message stream, as the attempt read them.
pub(crate) struct ReceivedHead {
    /// The messages' `grpc-encoding`.
    pub(crate) encoding: ReceivedEncoding,
    /// The headers' metadata.
    pub(crate) metadata: MetadataMap,
    /// The server's `grpc-retry-pushback-ms`, if it sent one there.
    pub(crate) pushback: Pushback,
    /// The messages and trailers.
    pub(crate) body: RecvStream,
}

enum State {
    /// Waiting for a connection; the messages wait in the outbox.
    Picking(Pick, Outbox),
    Open {
        handle: SendRequest<Bytes>,
        send: SendHalf,
        response: AttemptResponse,
        progress: Progress,
    },
    Done,
}

/// One attempt.
pub(crate) struct Attempt {
    state: State,
    setup: Arc<AttemptSetup>,
    previous_attempts: u32,
    /// The last message written together with the HEADERS, not yet reported.
    flushed_up_front: Option<usize>,
    /// Where the attempt's result counts (outlier detection), from its pick until it is counted.
    results: Option<AttemptCount>,
    /// The pick's guard, held while the attempt lives (and handed to the call if it commits).
    breaker: Option<grpc_lb::PickGuard>,
}

impl Attempt {
    pub(crate) fn new(pick: Pick, setup: Arc<AttemptSetup>, previous_attempts: u32) -> Self {
        Attempt {
            state: State::Picking(pick, Outbox::default()),
            setup,
            previous_attempts,
            flushed_up_front: None,
            results: None,
            breaker: None,
        }
    }

    /// Counts how the attempt ended on the address it picked (outlier detection; once, and only if a pick
    /// gave it a counter).
    pub(crate) fn record_result(&mut self, result: AttemptResult) {
        if let Some(results) = self.results.take() {
            results.record(result);
        }
    }

    /// Whether the attempt is still waiting for a connection (its pick has not answered).
    pub(crate) fn is_picking(&self) -> bool {
        matches!(self.state, State::Picking(..))
    }

    /// Whether the attempt's HEADERS were handed to the connection, as last seen: it may have reached the
    /// server (not still picking, nor held in h2's local queue behind the server's
    /// `MAX_CONCURRENT_STREAMS`).
    pub(crate) fn reached_connection(&self) -> bool {
        matches!(
            self.state,
            State::Open {
                progress: Progress::Opened,
                ..
            }
        )
    }

    /// Queues message `index` for this attempt.
    pub(crate) fn send(&mut self, index: usize, message: Bytes) {
        match &mut self.state {
            State::Picking(_, outbox) => outbox.push(index, message),
            State::Open { send, .. } => send.push(index, message),
            State::Done => {}
        }
    }

    /// Half-closes after the queued messages.
    pub(crate) fn half_close(&mut self) {
        match &mut self.state {
            State::Picking(_, outbox) => outbox.close_after_queue(),
            State::Open { send, .. } => send.close_after_queue(),
            State::Done => {}
        }
    }

    /// Whether every queued message has been handed to h2.
    pub(crate) fn caught_up(&self) -> bool {
        match &self.state {
            State::Picking(_, outbox) => outbox.is_empty(),
            State::Open { send, .. } => send.caught_up(),
            State::Done => true,
        }
    }

    /// Whether the attempt has a stream.
    pub(crate) fn is_open(&self) -> bool {
        matches!(self.state, State::Open { .. })
    }

    /// Cancels the attempt: RST_STREAM(CANCEL) if its stream exists.
    pub(crate) fn cancel(&mut self) {
        if let State::Open { send, .. } = &mut self.state {
            send.reset(h2::Reason::CANCEL);
        }
        self.state = State::Done;
    }

    /// Hands the committed attempt's stream to the call, with what it has not written yet: a streaming
    /// call's writer task writes that under flow control, where it counts toward the sender's bound; a
    /// request known up front goes to h2 whole, as it did with the HEADERS. `None` while the attempt has no
    /// stream yet.
    pub(crate) fn take_open(&mut self) -> Option<OpenAttempt> {
        if !self.is_open() {
            return None;
        }
        let State::Open {
            mut send, response, ..
        } = std::mem::replace(&mut self.state, State::Done)
        else {
            return None;
        };
        let handed_over = if self.setup.eager {
            // An error here reappears on the response side, which reports the stream's end.
            send.flush_all(OnError::Drop)
        } else {
            send.last_queued()
        };
        Some(OpenAttempt {
            send,
            response,
            handed_over,
            results: self.results.take(),
            breaker: self.breaker.take(),
        })
    }

    /// How many attempts preceded this one (its `grpc-previous-rpc-attempts`).
    pub(crate) fn previous_attempts(&self) -> u32 {
        self.previous_attempts
    }

    /// Drives the attempt until it has something to report.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<AttemptEvent> {
        let picked = match &mut self.state {
            State::Done => return Poll::Pending,
            State::Open { .. } => return self.poll_open(cx),
            State::Picking(Pick::Now(picked), _) => match picked.take() {
                Some(picked) => Ok(picked),
                None => return Poll::Pending,
            },
            State::Picking(Pick::Later(pick), _) => match pick.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(result) => result,
            },
        };
        let Picked {
            conn: handle,
            addr,
            results,
            breaker,
        } = match picked {
            Ok(picked) => picked,
            Err(e) => {
                self.state = State::Done;
                let (place, status) = match e {
                    PickError::Failed(status) => (FailurePlace::PickFailed, status),
                    PickError::Dropped(status) => (FailurePlace::Dropped, status),
                };
                return Poll::Ready(ended(place, status));
            }
        };
        self.results = results.map(AttemptCount::start);
        self.breaker = breaker;
        // The time left goes out as `grpc-timeout`, a positive integer: with none left the attempt is
        // never sent, and the call ends here with DEADLINE_EXCEEDED.
        let grpc_timeout = match self.setup.deadline {
            None => None,
            Some(deadline) => {
                match timeout::encode(deadline.saturating_duration_since(Instant::now())) {
                    Some(encoded) => HeaderValue::try_from(encoded).ok(),
                    None => {
                        self.state = State::Done;
                        return Poll::Ready(ended(FailurePlace::Local, Status::deadline_passed()));
                    }
                }
            }
        };
        Poll::Ready(match self.open(handle, grpc_timeout, cx) {
            Ok(()) => AttemptEvent::Picked(addr),
            Err(err) => {
                self.state = State::Done;
                let place = grpc_transparent::classify(&err, Progress::Opening);
                ended(place, status_of(err, place))
            }
        })
    }

    /// Sends the request HEADERS on the picked connection.
    fn open(
        &mut self,
        mut handle: SendRequest<Bytes>,
        grpc_timeout: Option<HeaderValue>,
        cx: &mut Context<'_>,
    ) -> Result<(), h2::Error> {
        let mut request = http::Request::new(());
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = http::Uri::clone(&self.setup.uri);
        *request.version_mut() = http::Version::HTTP_2;
        *request.headers_mut() = attempt_headers(&self.setup, self.previous_attempts, grpc_timeout);
        let (response, stream) = handle.send_request(request, false)?;
        let outbox = match std::mem::replace(&mut self.state, State::Done) {
            State::Picking(_, outbox) => outbox,
            _ => Outbox::default(),
        };
        let mut send = SendHalf::new(stream, outbox);
        // A request known up front goes to h2 with its HEADERS, so they leave in one write.
        if self.setup.eager {
            self.flushed_up_front = send.flush_all(OnError::Keep);
        }
        let mut progress = Progress::Opened;
        // h2 keeps a stream over the server's MAX_CONCURRENT_STREAMS in a local queue; the handle that opened
        // it is not ready until it leaves.
        if handle.poll_ready(cx).is_pending() {
            progress = Progress::QueuedLocally;
        }
        self.state = State::Open {
            handle,
            send,
            response: AttemptResponse::Pending(response),
            progress,
        };
        Ok(())
    }

    fn poll_open(&mut self, cx: &mut Context<'_>) -> Poll<AttemptEvent> {
        let State::Open {
            handle, progress, ..
        } = &mut self.state
        else {
            return Poll::Pending;
        };
        if let Some(index) = self.flushed_up_front.take() {
            return Poll::Ready(AttemptEvent::Sent(index));
        }
        if *progress == Progress::QueuedLocally {
            if let Poll::Ready(Ok(())) = handle.poll_ready(cx) {
                *progress = Progress::Opened;
            }
        }
        if let Poll::Ready(event) = self.poll_write(cx) {
            return Poll::Ready(event);
        }
        // The response is polled once the writes are done or blocked (not before every message): a response
        // that ended the attempt meanwhile is what a failed write reports too.
        self.poll_response(cx)
    }

    /// Writes the queued messages as flow control admits (everything at once for eager calls), then the
    /// half-close: `Ready` once a message is written whole, or when writing failed.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<AttemptEvent> {
        let State::Open { send, .. } = &mut self.state else {
            return Poll::Pending;
        };
        match send.poll_write(cx, self.setup.eager) {
            Poll::Ready(Ok(Written::Message(index))) => Poll::Ready(AttemptEvent::Sent(index)),
            Poll::Ready(Err(WriteError::Stream(err))) => Poll::Ready(self.write_failed(err, cx)),
            // Everything written, flow control holding back, or the stream closed for sending: the response
            // side reports how the attempt goes on or ended.
            Poll::Ready(Ok(Written::CaughtUp))
            | Poll::Ready(Err(WriteError::Closed))
            | Poll::Pending => Poll::Pending,
        }
    }

    /// Polls for the response headers: `Ready` when they ended the attempt or open a message stream.
    fn poll_response(&mut self, cx: &mut Context<'_>) -> Poll<AttemptEvent> {
        let State::Open {
            send,
            response,
            progress,
            ..
        } = &mut self.state
        else {
            return Poll::Pending;
        };
        if let AttemptResponse::Pending(future) = response {
            match Pin::new(future).poll(cx) {
                Poll::Pending => {}
                Poll::Ready(Err(err)) => {
                    let place = grpc_transparent::classify(&err, *progress);
                    self.state = State::Done;
                    return Poll::Ready(ended(place, status_of(err, place)));
                }
                Poll::Ready(Ok(head)) => {
                    let (parts, body) = head.into_parts();
                    let pushback = pushback_of(&parts.headers);
                    if let Err(status) = check_header_list(&parts.headers, self.setup.header_limit)
                    {
                        self.cancel();
                        let end = AttemptEnd::failure(status.code(), FailurePlace::Processed);
                        return Poll::Ready(AttemptEvent::Ended(end, status));
                    }
                    match classify_head(parts.status.as_u16(), parts.headers, body.is_end_stream())
                    {
                        Head::Messages { encoding, metadata } => {
                            *response = AttemptResponse::Received(ReceivedHead {
                                encoding,
                                metadata,
                                pushback,
                                body,
                            });
                            return Poll::Ready(AttemptEvent::Headers);
                        }
                        Head::End(status, _) => {
                            // The server ended the call before the request did: stop sending
                            // (RST_STREAM(NO_ERROR), as after a committed attempt's early trailers).
                            if !send.half_closed() {
                                send.reset(h2::Reason::NO_ERROR);
                            }
                            self.state = State::Done;
                            let end = AttemptEnd::status(status.code(), pushback);
                            return Poll::Ready(AttemptEvent::Ended(end, status));
                        }
                    }
                }
            }
        }
        Poll::Pending
    }

    /// Writing failed: h2 refused the data (a user error such as a frame too large) or the stream is gone.
    /// A stream the server reset meanwhile ends by that reset, not by h2's complaint about writing to it.
    fn write_failed(&mut self, err: h2::Error, cx: &mut Context<'_>) -> AttemptEvent {
        // A response that arrived meanwhile (Trailers-Only, then RST_STREAM(NO_ERROR) because the request
        // was still coming: RFC 9113 §8.1) says how the attempt ended.
        if let Poll::Ready(event) = self.poll_response(cx) {
            return event;
        }
        let (progress, reset) = match &mut self.state {
            State::Open { progress, send, .. } => (*progress, send.poll_reset(cx)),
            _ => (Progress::Opened, Poll::Pending),
        };
        let (place, status) = match reset {
            Poll::Ready(Ok(reason)) => (
                grpc_transparent::classify_reset(reason, progress),
                Status::new(
                    code_from_h2_reason(reason),
                    format!("stream reset by server ({reason:?})"),
                ),
            ),
            Poll::Ready(Err(e)) => {
                let place = grpc_transparent::classify(&e, progress);
                (place, status_of(e, place))
            }
            Poll::Pending => {
                let place = grpc_transparent::classify(&err, progress);
                (place, status_of(err, place))
            }
        };
        self.cancel();
        ended(place, status)
    }
}

/// The request headers of one attempt, built in one map of the right size (names are constants, values
/// static or shared, so only the map itself allocates): `grpc-timeout` first after the pseudo-headers (the
/// time left now), `grpc-previous-rpc-attempts` on retries, then `te`, `content-type`, `user-agent`,
/// `grpc-encoding`, `grpc-accept-encoding`, then the application's metadata.
fn attempt_headers(
    setup: &AttemptSetup,
    previous_attempts: u32,
    grpc_timeout: Option<HeaderValue>,
) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(setup.metadata.len() + 7);
    if let Some(v) = grpc_timeout {
        headers.insert(GRPC_TIMEOUT, v);
    }
    if previous_attempts > 0 {
        headers.insert(
            GRPC_PREVIOUS_RPC_ATTEMPTS,
            HeaderValue::from(previous_attempts),
        );
    }
    headers.insert(TE, HeaderValue::from_static("trailers"));
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(USER_AGENT, setup.user_agent.clone());
    if let Some(enc) = setup.encoding {
        headers.insert(GRPC_ENCODING, HeaderValue::from_static(enc.as_str()));
    }
    if let Some(accept) = setup.accept.header_value() {
        headers.insert(GRPC_ACCEPT_ENCODING, accept);
    }
    if let Some(value) = setup
        .exactly_once
        .as_ref()
        .and_then(|id| id.header(previous_attempts + 1))
    {
        headers.insert(crate::call::exactly_once::HEADER, value);
    }
    for (name, value) in &setup.metadata {
        headers.append(name.clone(), value.clone());
    }
    headers
}

fn ended(place: FailurePlace, status: Status) -> AttemptEvent {
    AttemptEvent::Ended(AttemptEnd::failure(status.code(), place), status)
}

/// The status of an attempt that failed with an h2 error at `place`.
fn status_of(err: h2::Error, place: FailurePlace) -> Status {
    if place == FailurePlace::Local {
        return Status::new(
            Code::Internal,
            format!("the request could not be sent: {err}"),
        )
        .with_source(err);
    }
    Status::from_h2(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::PickFuture;
    use std::time::Duration;

    /// A request h2 refuses to encode (headers that bypass `MetadataMap`'s checks, which refuse them
    /// earlier) ends the attempt at once as a local error with INTERNAL: never sent, never retried.
    #[tokio::test]
    async fn a_request_h2_refuses_ends_the_attempt_as_a_local_internal_error() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.expect("accept");
            let mut conn: h2::server::Connection<_, Bytes> =
                h2::server::handshake(tcp).await.expect("handshake");
            while conn.accept().await.is_some() {}
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (send, conn) = h2::client::handshake(tcp).await.expect("handshake");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut metadata = HeaderMap::new();
        metadata.insert("connection", HeaderValue::from_static("close"));
        let setup = Arc::new(AttemptSetup {
            uri: Arc::new(http::Uri::from_static("http://h/p.S/M")),
            user_agent: HeaderValue::from_static("test"),
            encoding: None,
            accept: EncodingSet::gzip(),
            metadata,
            wait_for_ready: false,
            cluster: None,
            deadline: None,
            eager: true,
            header_limit: 16 << 10,
            exactly_once: None,
        });
        let pick: PickFuture = Box::pin(async move {
            Ok(Picked {
                conn: send,
                addr: grpc_lb::Address::Tcp(([127, 0, 0, 1], 1).into()),
                results: None,
                breaker: None,
            })
        });
        let mut attempt = Attempt::new(Pick::Later(pick), setup, 0);
        attempt.send(0, Bytes::from_static(&[0, 0, 0, 0, 0]));
        attempt.half_close();
        let event = std::future::poll_fn(|cx| attempt.poll(cx)).await;
        match event {
            AttemptEvent::Ended(end, status) => {
                assert_eq!(end.place, FailurePlace::Local);
                assert_eq!(status.code(), Code::Internal, "{status:?}");
            }
            _ => panic!("the attempt must end at once"),
        }
    }

    #[test]
    fn every_attempt_puts_grpc_timeout_first_then_the_attempt_count_then_the_call_headers() {
        let mut metadata = HeaderMap::new();
        metadata.append("x-md", HeaderValue::from_static("1"));
        metadata.append("x-md", HeaderValue::from_static("2"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let _guard = rt.enter();
        let setup = AttemptSetup {
            uri: Arc::new(http::Uri::from_static("http://h/p.S/M")),
            user_agent: HeaderValue::from_static("test/1"),
            encoding: Some(Encoding::Gzip),
            accept: EncodingSet::all(),
            metadata,
            wait_for_ready: false,
            cluster: None,
            deadline: Some(Instant::now() + Duration::from_secs(5)),
            eager: true,
            header_limit: 16 << 10,
            exactly_once: None,
        };
        for previous in [0, 3] {
            let built = attempt_headers(&setup, previous, Some(HeaderValue::from_static("5S")));
            let names: Vec<&str> = built.keys().map(|k| k.as_str()).collect();
            let mut want = vec!["grpc-timeout"];
            if previous > 0 {
                want.push("grpc-previous-rpc-attempts");
            }
            want.extend([
                "te",
                "content-type",
                "user-agent",
                "grpc-encoding",
                "grpc-accept-encoding",
                "x-md",
            ]);
            assert_eq!(names, want);
            assert_eq!(built["grpc-timeout"], "5S");
            assert_eq!(built["te"], "trailers");
            assert_eq!(built["content-type"], "application/grpc");
            assert_eq!(built["user-agent"], "test/1");
            assert_eq!(built["grpc-encoding"], "gzip");
            assert_eq!(built["grpc-accept-encoding"], "gzip,deflate,zstd");
            assert_eq!(built.get_all("x-md").iter().count(), 2);
            if previous > 0 {
                assert_eq!(built["grpc-previous-rpc-attempts"], "3");
            }
        }
    }
}
