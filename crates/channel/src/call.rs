//! One call on the wire: the request HEADERS, the request messages (the [`RequestSender`] half), and the
//! response headers, messages and trailers (the [`Streaming`] half), per `doc/PROTOCOL-HTTP2.md`.
//!
//! The two halves share the h2 send stream, because only it can send RST_STREAM: the receiving half resets the
//! stream with CANCEL when the call is cancelled, dropped, past its deadline, or the response is malformed.
//!
//! How a response becomes a status: the response headers and trailers as `response.rs` says; no trailers at
//! all: INTERNAL;
//! * a stream reset or a dead connection: [`Status::from_h2`];
//! * a bad message prefix or a truncated message: INTERNAL; a message over the limit: RESOURCE_EXHAUSTED;
//!   a compressed message under `identity`: INTERNAL, under an encoding we lack: UNIMPLEMENTED.
//!
//! A call cancelled locally ends CANCELLED, or DEADLINE_EXCEEDED once its deadline has passed.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};

use bytes::Bytes;
use h2::client::ResponseFuture;
use h2::{RecvStream, SendStream};
use parking_lot::Mutex;
use tokio::time::{Instant, Sleep};

use grpc_retry::{AttemptEnd, AttemptId, FailurePlace, Pushback, RetryCall};

use crate::attempt::{OpenAttempt, Response};
use crate::codec::Codec;
use crate::compression::{Encoding, ReceivedEncoding};
use crate::framing::{self, Deframer, Frame, FrameError};
use crate::metadata::names::GRPC_ENCODING;
use crate::metadata::MetadataMap;
use crate::request::MessageOptions;
use crate::response::{check_header_list, classify_head, pushback_of, status_from_trailers, Head};
use crate::retry_driver::Committed;
use crate::status::{Code, Status};
use crate::telemetry::{AttemptTelemetry, CallTelemetry};

/// What both halves of a call share: the sending side (the retry driver before the call commits, the
/// committed attempt's stream after), the call's end, and what the driver hands over at commit.
pub(crate) struct Shared {
    side: Side,
    /// The application half-closed (finished or dropped the sender).
    half_closed: bool,
    /// Set when the call ended locally (cancel, deadline, malformed response) or the response is complete.
    ended: Option<Ended>,
    /// What the driver handed over for the receiving half: the committed attempt's response, or the
    /// call's status when it finished before committing.
    handed: Option<Result<Response, Status>>,
    /// An attempt has opened its stream (the request HEADERS went to h2).
    started: bool,
    /// The receiving half, or the caller waiting for the call to start.
    receiver: Option<Waker>,
    /// The call's retry state machine after commit, told how the committed attempt ended (throttle).
    retry: Option<(RetryCall, AttemptId)>,
    /// A task pumping an application stream into the call, waiting for the call to end.
    end_watcher: Option<Waker>,
    /// The status a failed send ended the call with (e.g. an oversize message), which the receiving half
    /// reports instead of the reset it sees.
    sender_failure: Option<Status>,
    /// Counts the call as active for the channel's idle timeout while either half lives.
    _active: Option<crate::control::CallGuard>,
    /// The call's span and metrics.
    pub(crate) telemetry: CallTelemetry,
    /// The committed attempt's, once handed over.
    attempt: Option<AttemptTelemetry>,
    /// An exactly-once call's id: in flight until the call ends (its status is known).
    exactly_once: Option<Arc<crate::exactly_once::CallId>>,
    /// How many attempts preceded the committed one once the call committed; before, the most any started
    /// attempt had (what a status the client makes reports).
    previous_attempts: u32,
}

/// How the call ended, for the sending half.
enum Ended {
    /// Sending stops with this status.
    With(Status),
    /// The call finished with this status: sending stops with INTERNAL "the call has ended", caused by it
    /// (made only if the application sends again).
    Finished(Status),
}

impl Ended {
    /// The status a send after the end returns.
    fn status(&self) -> Status {
        match self {
            Ended::With(status) => status.clone(),
            Ended::Finished(status) => {
                Status::new(Code::Internal, "the call has ended").with_source(status.clone())
            }
        }
    }
}

/// Where the application's messages go.
enum Side {
    /// Before commit: the inbox the retry driver takes messages from (one at a time), writing each to every
    /// live attempt.
    Driving(Inbox),
    /// After commit: the committed attempt's stream.
    Direct(SendStream<Bytes>),
}

/// The most bytes of application messages an uncommitted call holds for its retry driver (a larger message is
/// taken alone). The sender runs ahead of the driver task by up to this much, so the driver takes a batch
/// per wake-up instead of the two tasks handing over one message per task switch.
pub(crate) const INBOX_LIMIT: usize = 64 << 10;

/// The driver's side of a call that has not committed yet.
#[derive(Default)]
struct Inbox {
    /// The messages the application sent, in order, until the driver takes them (one at a time, when an
    /// open attempt has written the previous ones).
    queue: VecDeque<Bytes>,
    /// The bytes in `queue`, at most [`INBOX_LIMIT`] unless it holds a single larger message.
    queued: usize,
    /// The sender, waiting for room in `queue`.
    sender: Option<Waker>,
    driver: Option<Waker>,
    /// The application cancelled (or the receiving half ended the call) before commit.
    cancelled: bool,
}

pub(crate) type SharedRef = Arc<Mutex<Shared>>;

/// What the retry driver may see of the application's side of an uncommitted call.
pub(crate) enum Input {
    /// A message to send.
    Message(Bytes),
    /// The application half-closed after its last message.
    HalfClose,
    /// The call was cancelled.
    Cancel,
}

impl Shared {
    /// A call whose attempts the retry driver runs until it commits.
    pub(crate) fn driving(
        active: Option<crate::control::CallGuard>,
        telemetry: CallTelemetry,
    ) -> SharedRef {
        Arc::new(Mutex::new(Shared {
            side: Side::Driving(Inbox::default()),
            half_closed: false,
            ended: None,
            handed: None,
            started: false,
            receiver: None,
            retry: None,
            end_watcher: None,
            sender_failure: None,
            _active: active,
            telemetry,
            attempt: None,
            exactly_once: None,
            previous_attempts: 0,
        }))
    }

    /// For the driver: the next application input, if `accept_message` allows taking a message now.
    /// Registers the driver's waker otherwise.
    pub(crate) fn poll_input(
        &mut self,
        cx: &Context<'_>,
        accept_message: bool,
        half_close_sent: bool,
    ) -> Option<Input> {
        let Side::Driving(inbox) = &mut self.side else {
            return None;
        };
        if inbox.cancelled {
            return Some(Input::Cancel);
        }
        if !inbox
            .driver
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            inbox.driver = Some(cx.waker().clone());
        }
        if accept_message {
            if let Some(message) = inbox.queue.pop_front() {
                inbox.queued -= message.len();
                // A waiting sender goes on once half the inbox is free, not after every message.
                if inbox.queued <= INBOX_LIMIT / 2 {
                    if let Some(w) = inbox.sender.take() {
                        w.wake();
                    }
                }
                return Some(Input::Message(message));
            }
        }
        (inbox.queue.is_empty() && self.half_closed && !half_close_sent).then_some(Input::HalfClose)
    }

    /// For the driver: an attempt opened its stream.
    pub(crate) fn mark_started(&mut self) {
        if !self.started {
            self.started = true;
            if let Some(w) = self.receiver.take() {
                w.wake();
            }
        }
    }

    /// Ready once an attempt has opened its stream, or with the call's status if it ended before any did.
    pub(crate) fn poll_started(&mut self, cx: &Context<'_>) -> Poll<Result<(), Status>> {
        match &self.handed {
            _ if self.started => Poll::Ready(Ok(())),
            Some(Err(status)) => Poll::Ready(Err(status.clone())),
            Some(Ok(_)) => Poll::Ready(Ok(())),
            None => {
                self.receiver = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }

    /// For the driver: the call committed (the attempt's stream, after the messages it had queued), or
    /// finished before committing.
    pub(crate) fn hand_over(&mut self, result: Result<Committed, Status>) {
        let inbox = match std::mem::replace(&mut self.side, Side::Driving(Inbox::default())) {
            Side::Driving(inbox) => inbox,
            Side::Direct(send) => {
                self.side = Side::Direct(send);
                return;
            }
        };
        for w in [inbox.sender, inbox.driver].into_iter().flatten() {
            w.wake();
        }
        match result {
            Ok(committed) => {
                let OpenAttempt {
                    mut send, response, ..
                } = committed.open;
                self.attempt = committed.telemetry;
                if let Some(ended) = &self.ended {
                    // The call ended (cancelled, or aborted by its sender) while the driver committed: the
                    // stream is reset, and a receiving half still waiting hears how the call ended.
                    send.send_reset(h2::Reason::CANCEL);
                    self.handed = Some(Err(ended.status()));
                    if let Some(w) = self.receiver.take() {
                        w.wake();
                    }
                    return;
                }
                // The messages the driver had not taken yet follow the replayed ones; errors reappear on the
                // response side.
                let mut half_closed = committed.half_closed;
                for message in inbox.queue {
                    let _ = send.send_data(message, false);
                }
                if self.half_closed && !half_closed {
                    let _ = send.send_data(Bytes::new(), true);
                    half_closed = true;
                }
                self.half_closed |= half_closed;
                self.side = Side::Direct(send);
                self.retry = Some((committed.call, committed.attempt));
                self.previous_attempts = committed.previous_attempts;
                self.handed = Some(Ok(response));
            }
            Err(status) => {
                self.previous_attempts = status.previous_rpc_attempts();
                if self.ended.is_none() {
                    // Sending stops with the call's status, or a plain "ended" when that is OK.
                    self.ended = Some(if status.code() == Code::Ok {
                        Ended::Finished(status.clone())
                    } else {
                        Ended::With(status.clone())
                    });
                    self.wake_end_watcher();
                }
                self.handed = Some(Err(status));
            }
        }
        if let Some(w) = self.receiver.take() {
            w.wake();
        }
    }

    /// For the driver: an attempt with `previous_attempts` before it started.
    pub(crate) fn attempt_started(&mut self, previous_attempts: u32) {
        self.previous_attempts = self.previous_attempts.max(previous_attempts);
    }

    /// Cancels the call (the application gave up before it had both halves).
    pub(crate) fn cancel(&mut self) {
        self.end(&Status::cancelled(), h2::Reason::CANCEL);
    }

    /// Ends the call locally with `status`, resetting the stream with `reason` (or cancelling the driver).
    fn end(&mut self, status: &Status, reason: h2::Reason) {
        if self.ended.is_none() {
            self.ended = Some(Ended::With(status.clone()));
            self.wake_end_watcher();
            match &mut self.side {
                Side::Direct(send) => send.send_reset(reason),
                Side::Driving(inbox) => {
                    inbox.cancelled = true;
                    if let Some(w) = inbox.driver.take() {
                        w.wake();
                    }
                }
            }
        }
    }

    /// Keeps an exactly-once call's id (counted in flight) until the call ends.
    pub(crate) fn keep_exactly_once(&mut self, id: Arc<crate::exactly_once::CallId>) {
        self.exactly_once = Some(id);
    }

    fn wake_end_watcher(&mut self) {
        if let Some(w) = self.end_watcher.take() {
            w.wake();
        }
    }

    /// Tells the retry state machine how the committed attempt ended: from the server (a success refills
    /// the throttle, a qualifying failure or a "don't retry" pushback costs a token), or locally (a cancel,
    /// the deadline, a malformed response: nobody's failure, which the throttle never counts).
    fn report_end(&mut self, status: &Status, end: CommittedEnd) {
        if let Some((mut call, attempt)) = self.retry.take() {
            let end = match end {
                CommittedEnd::Remote(pushback) => AttemptEnd::status(status.code(), pushback),
                CommittedEnd::Local => AttemptEnd::failure(status.code(), FailurePlace::Local),
            };
            call.handle_end(attempt, end, Instant::now().into_std());
            self.telemetry.set_stats(call.stats());
        }
        if let Some(mut attempt) = self.attempt.take() {
            attempt.ended(status);
        }
    }
}

/// How the committed attempt ended, for the throttle.
enum CommittedEnd {
    /// The server's status, with the pushback its trailers carried.
    Remote(Pushback),
    /// Ended by the client.
    Local,
}

/// The sending half of a streaming call. Dropping it half-closes the call (unless the call has ended).
pub struct RequestSender<T> {
    shared: SharedRef,
    codec: Codec<T, ()>,
    encoding: Option<Encoding>,
    limit: usize,
    deadline: Option<Instant>,
}

impl<T> RequestSender<T> {
    pub(crate) fn new(
        shared: SharedRef,
        codec: Codec<T, ()>,
        encoding: Option<Encoding>,
        limit: usize,
        deadline: Option<Instant>,
    ) -> Self {
        RequestSender {
            shared,
            codec,
            encoding,
            limit,
            deadline,
        }
    }

    /// Sends a message, compressed if the call is. Waits for HTTP/2 flow control, so a slow server slows the
    /// sender instead of filling memory.
    ///
    /// An error means the call can take no more messages. When the server ended the call, its status is what
    /// the receiving half ([`Streaming`]) reports; the error here only says sending stopped.
    ///
    /// Read the response while sending (as [`crate::Channel::client_streaming`] does): a server that ends
    /// the call without reading the rest of the request and without resetting the stream leaves `send`
    /// waiting for flow control until the call's deadline, because only the receiving half sees the end.
    pub async fn send(&mut self, message: T) -> Result<(), Status> {
        self.send_with(message, MessageOptions::default()).await
    }

    /// Sends a message with per-message options (e.g. uncompressed on a compressed call).
    pub async fn send_with(&mut self, message: T, options: MessageOptions) -> Result<(), Status> {
        let encoding = self.encoding.filter(|_| options.compress);
        let frame = framing::encode_frame(&self.codec, &message, encoding, self.limit)?;
        self.send_frame(frame, false).await
    }

    /// Half-closes the call: no more messages will be sent.
    pub async fn finish(mut self) -> Result<(), Status> {
        self.send_frame(Bytes::new(), true).await
    }

    async fn send_frame(&mut self, mut data: Bytes, end_stream: bool) -> Result<(), Status> {
        let shared = &self.shared;
        let send = poll_fn(move |cx| {
            let mut guard = shared.lock();
            let s = &mut *guard;
            loop {
                if let Some(ended) = &s.ended {
                    return Poll::Ready(Err(ended.status()));
                }
                if s.half_closed {
                    return Poll::Ready(Err(Status::new(
                        Code::Internal,
                        "the call was already half-closed",
                    )));
                }
                let send = match &mut s.side {
                    Side::Direct(send) => send,
                    Side::Driving(inbox) => {
                        // Before commit the driver takes one message at a time, once an open attempt has
                        // written the previous ones: the readiest live attempt paces the sender, which runs
                        // ahead of the driver by at most the inbox.
                        if !data.is_empty() {
                            if !inbox.queue.is_empty() && inbox.queued + data.len() > INBOX_LIMIT {
                                inbox.sender = Some(cx.waker().clone());
                                return Poll::Pending;
                            }
                            inbox.queued += data.len();
                            inbox.queue.push_back(std::mem::take(&mut data));
                        }
                        s.half_closed = end_stream;
                        if let Some(w) = inbox.driver.take() {
                            w.wake();
                        }
                        return Poll::Ready(Ok(()));
                    }
                };
                if data.is_empty() {
                    if end_stream {
                        s.half_closed = true;
                        send.send_data(Bytes::new(), true)
                            .map_err(Status::from_h2)?;
                    }
                    return Poll::Ready(Ok(()));
                }
                // Ask for the whole message first: h2 grants what the windows allow at once (no trip
                // through the connection task), so an open window costs three h2 calls per message.
                send.reserve_capacity(data.len());
                let capacity = send.capacity();
                if capacity == 0 {
                    match ready!(send.poll_capacity(cx)) {
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => return Poll::Ready(Err(Status::from_h2(e))),
                        None => {
                            return Poll::Ready(Err(Status::new(
                                Code::Unavailable,
                                "the stream was closed",
                            )))
                        }
                    }
                }
                let chunk = data.split_to(capacity.min(data.len()));
                let last = end_stream && data.is_empty();
                send.send_data(chunk, last).map_err(Status::from_h2)?;
                if last {
                    s.half_closed = true;
                    return Poll::Ready(Ok(()));
                }
            }
        });
        match self.deadline {
            None => send.await,
            Some(deadline) => match tokio::time::timeout_at(deadline, send).await {
                Ok(result) => result,
                Err(_) => {
                    let status = Status::deadline_exceeded();
                    self.shared.lock().end(&status, h2::Reason::CANCEL);
                    Err(status)
                }
            },
        }
    }
}

impl<T> RequestSender<T> {
    /// A handle that tells when the call has ended, for a task that feeds this sender.
    pub(crate) fn end_watch(&self) -> EndWatch {
        EndWatch(self.shared.clone())
    }

    /// The most bytes a request message may have: the call's send limit (the channel's, or the method's
    /// or the call's if smaller).
    #[cfg(feature = "tower")]
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Ends the call with `status` instead of half-closing it, for a task feeding this sender whose request
    /// cannot go on: a message that cannot be sent (what [`RequestSender::send`] returned), or a request
    /// source that failed. Under one lock the call is marked ended and reset with RST_STREAM(CANCEL), the
    /// committed attempt's stream or, before commit, every live attempt's through the retry driver; the
    /// sender is consumed, so nothing can half-close the call afterwards and the server never sees the end
    /// of a request that is not whole. The receiving half reports `status`. A call that had already ended
    /// keeps its own end (then `status` only echoes it).
    pub(crate) fn abort(self, status: Status) {
        let mut s = self.shared.lock();
        if s.ended.is_none() {
            s.sender_failure = Some(status.clone());
            s.end(&status, h2::Reason::CANCEL);
        }
        // Dropping `self` now finds the call ended: no END_STREAM.
    }
}

/// Tells a task that feeds a call's [`RequestSender`] when the call has ended.
pub(crate) struct EndWatch(SharedRef);

impl EndWatch {
    /// Ready once the call has ended (locally, or its response is complete).
    pub(crate) fn poll_ended(&self, cx: &Context<'_>) -> Poll<()> {
        let mut s = self.0.lock();
        if s.ended.is_some() {
            Poll::Ready(())
        } else {
            s.end_watcher = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

impl<T> Drop for RequestSender<T> {
    fn drop(&mut self) {
        let mut guard = self.shared.lock();
        let s = &mut *guard;
        if s.ended.is_none() && !s.half_closed {
            s.half_closed = true;
            match &mut s.side {
                Side::Direct(send) => {
                    let _ = send.send_data(Bytes::new(), true);
                }
                Side::Driving(inbox) => {
                    if let Some(w) = inbox.driver.take() {
                        w.wake();
                    }
                }
            }
        }
    }
}

impl<T> std::fmt::Debug for RequestSender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestSender")
            .field("encoding", &self.encoding)
            .finish_non_exhaustive()
    }
}

enum RecvState {
    /// The retry driver runs the attempts; the committed one's response (or the call's status) comes
    /// through [`Shared`].
    Driving,
    Headers(ResponseFuture),
    /// Response headers already received and checked (by the retry driver, which committed on them).
    Received(Option<(http::Response<RecvStream>, Pushback)>),
    Body(RecvStream),
    Trailers(RecvStream),
    Done,
}

/// The receiving half of a call: response headers, messages, then trailers with the status.
/// Dropping it before the call ended cancels the call (RST_STREAM(CANCEL)).
///
/// ```no_run
/// # async fn example(channel: grpc_channel::Channel) -> Result<(), grpc_channel::Status> {
/// use grpc_channel::Request;
///
/// let (mut tx, mut rx) = channel
///     .streaming_raw("/chat.Room/Talk", Request::new(()))
///     .await?;
/// tx.send(bytes::Bytes::from_static(b"")).await?;
/// tx.finish().await?;
/// println!("headers: {:?}", rx.headers().await?);
/// while let Some(message) = rx.message().await? {
///     println!("{} bytes", message.len());
/// }
/// // The call ended OK: its trailing metadata.
/// println!("trailers: {:?}", rx.trailers());
/// # Ok(()) }
/// ```
pub struct Streaming<T> {
    state: RecvState,
    shared: SharedRef,
    decode: fn(Bytes) -> Result<T, Status>,
    deframer: Deframer,
    encoding: ReceivedEncoding,
    limit: usize,
    deadline: Option<(Instant, Pin<Box<Sleep>>)>,
    headers: Option<MetadataMap>,
    trailers: Option<MetadataMap>,
    outcome: Option<Status>,
    last_compressed: bool,
    /// The `grpc-retry-pushback-ms` of the server's final status, for the throttle.
    pushback: Pushback,
    /// The largest header list (response headers, trailers) accepted.
    header_limit: usize,
    /// How many attempts preceded the one whose result this is (known once handed over).
    previous_attempts: u32,
}

impl<T> Streaming<T> {
    /// The receiving half of a call whose attempts the retry driver runs.
    pub(crate) fn driven(
        shared: SharedRef,
        decode: fn(Bytes) -> Result<T, Status>,
        limit: usize,
        header_limit: usize,
        deadline: Option<Instant>,
    ) -> Self {
        Streaming {
            state: RecvState::Driving,
            shared,
            decode,
            deframer: Deframer::new(limit),
            encoding: ReceivedEncoding::Identity,
            limit,
            deadline: deadline.map(|d| (d, Box::pin(tokio::time::sleep_until(d)))),
            headers: None,
            trailers: None,
            outcome: None,
            last_compressed: false,
            pushback: Pushback::None,
            header_limit,
            previous_attempts: 0,
        }
    }

    /// Waits for the response headers and returns their metadata. For a Trailers-Only response (an error
    /// before any message) this is the call's status as an error.
    pub async fn headers(&mut self) -> Result<&MetadataMap, Status> {
        poll_fn(|cx| self.poll_headers(cx)).await?;
        Ok(self.headers.get_or_insert_with(MetadataMap::new))
    }

    /// The next response message; `Ok(None)` when the call ended with OK, `Err` with the call's status when it
    /// ended otherwise. After the end, every call returns the same outcome again.
    pub async fn message(&mut self) -> Result<Option<T>, Status> {
        poll_fn(|cx| self.poll_message(cx)).await
    }

    /// The trailing metadata, once the call has ended.
    pub fn trailers(&self) -> Option<&MetadataMap> {
        self.trailers.as_ref()
    }

    /// The response headers' metadata, once received.
    pub fn metadata(&self) -> Option<&MetadataMap> {
        self.headers.as_ref()
    }

    /// Takes the response headers' and the trailers' metadata (empty if not received), for a caller done
    /// with the call.
    pub(crate) fn take_metadata(&mut self) -> (MetadataMap, MetadataMap) {
        (
            self.headers.take().unwrap_or_default(),
            self.trailers.take().unwrap_or_default(),
        )
    }

    /// How many attempts preceded the one whose response this is (gRFC A6 "Exposed Retry Metadata"):
    /// retries and hedges, never transparent retries; 0 when the first attempt produced it, or before the
    /// response headers or the call's end are in. When not 0 the same number is in the response headers'
    /// metadata ([`Streaming::metadata`]) as `grpc-previous-rpc-attempts`, or, for a call that ended
    /// without response headers, in the trailers and the call's [`Status`].
    pub fn previous_rpc_attempts(&self) -> u32 {
        self.previous_attempts
    }

    /// Whether the last message returned arrived compressed.
    pub fn last_message_compressed(&self) -> bool {
        self.last_compressed
    }

    /// Cancels the call: RST_STREAM(CANCEL) goes to the server and the call ends CANCELLED (or
    /// DEADLINE_EXCEEDED if its deadline has already passed).
    pub fn cancel(&mut self) {
        if self.outcome.is_none() {
            let status = self.local_status(Status::cancelled());
            self.end_locally(status);
        }
    }

    fn poll_headers(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        if self.headers.is_some() {
            return Poll::Ready(Ok(()));
        }
        if let Some(outcome) = &self.outcome {
            return Poll::Ready(if outcome.code() == Code::Ok {
                Ok(())
            } else {
                Err(outcome.clone())
            });
        }
        if let RecvState::Headers(_) | RecvState::Driving = self.state {
            if let Poll::Ready(status) = self.poll_deadline(cx) {
                return Poll::Ready(Err(status));
            }
            match self.poll_progress(cx, false) {
                Poll::Ready(Err(status)) => return Poll::Ready(Err(status)),
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => return Poll::Pending,
            }
        }
        match &self.outcome {
            Some(outcome) if outcome.code() != Code::Ok => Poll::Ready(Err(outcome.clone())),
            _ => Poll::Ready(Ok(())),
        }
    }

    /// Polls for the next message.
    pub fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<T>, Status>> {
        // The deadline first: data that keeps arriving must not keep a call alive past it (A96: the client
        // may fail with DEADLINE_EXCEEDED at any point after the deadline, even discarding messages).
        if let Poll::Ready(status) = self.poll_deadline(cx) {
            return Poll::Ready(Err(status));
        }
        match self.poll_progress(cx, true) {
            Poll::Ready(Ok(Some(frame))) => {
                self.last_compressed = frame.compressed;
                Poll::Ready(self.decode_frame(frame).map(Some))
            }
            Poll::Ready(Ok(None)) => Poll::Ready(Ok(None)),
            Poll::Ready(Err(status)) => Poll::Ready(Err(status)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn decode_frame(&mut self, frame: Frame) -> Result<T, Status> {
        let payload = if frame.compressed {
            let decoded = match &self.encoding {
                ReceivedEncoding::Known(enc) => enc.decompress(frame.payload, self.limit),
                ReceivedEncoding::Identity => Err(Status::new(
                    Code::Internal,
                    "compressed flag set on a message but the response has no grpc-encoding",
                )),
                ReceivedEncoding::Unsupported(name) => Err(Status::new(
                    Code::Unimplemented,
                    format!("the response uses the unsupported message encoding {name:?}"),
                )),
            };
            match decoded {
                Ok(p) => p,
                Err(status) => return Err(self.end_locally(status)),
            }
        } else {
            frame.payload
        };
        (self.decode)(payload).map_err(|status| self.end_locally(status))
    }

    /// Fires the local deadline if it has passed (once: an ended call keeps its outcome).
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<Status> {
        if self.outcome.is_some() {
            return Poll::Pending;
        }
        let Some((_, sleep)) = &mut self.deadline else {
            return Poll::Pending;
        };
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(self.end_locally(Status::deadline_exceeded()))
    }

    /// Ends the call on the client's side: resets the stream and records the outcome.
    fn end_locally(&mut self, status: Status) -> Status {
        let status = {
            let mut s = self.shared.lock();
            self.previous_attempts = s.previous_attempts;
            let status = status.with_previous_rpc_attempts(self.previous_attempts);
            s.end(&status, h2::Reason::CANCEL);
            s.report_end(&status, CommittedEnd::Local);
            s.telemetry.finish(&status);
            s.exactly_once = None;
            status
        };
        self.state = RecvState::Done;
        self.outcome = Some(status.clone());
        status
    }

    /// A local status, turned into DEADLINE_EXCEEDED when the deadline has passed.
    fn local_status(&self, status: Status) -> Status {
        match &self.deadline {
            Some((deadline, _))
                if status.code() == Code::Cancelled && Instant::now() >= *deadline =>
            {
                Status::deadline_exceeded()
            }
            _ => status,
        }
    }

    /// Records the final status from the server and stops sending (RST_STREAM(NO_ERROR) if the client had not
    /// half-closed yet).
    fn end_remotely(&mut self, status: Status) -> Poll<Result<Option<Frame>, Status>> {
        let status = self
            .local_status(status)
            .with_previous_rpc_attempts(self.previous_attempts);
        let sender_failure = {
            let mut guard = self.shared.lock();
            let s = &mut *guard;
            // A call its sender aborted ended on the client, whatever the reset brought back.
            match &s.sender_failure {
                Some(failure) => {
                    let failure = failure.clone();
                    s.report_end(&failure, CommittedEnd::Local);
                }
                None => s.report_end(&status, CommittedEnd::Remote(self.pushback)),
            }
            if s.ended.is_none() {
                if let (Side::Direct(send), false) = (&mut s.side, s.half_closed) {
                    send.send_reset(h2::Reason::NO_ERROR);
                }
                s.ended = Some(Ended::Finished(status.clone()));
                s.wake_end_watcher();
            }
            // A send that failed on the client ended the call: its status, not the reset it caused.
            let status = s.sender_failure.take().unwrap_or(status);
            s.telemetry.finish(&status);
            s.exactly_once = None;
            status
        };
        let status = sender_failure;
        self.state = RecvState::Done;
        let result = if status.code() == Code::Ok {
            Ok(None)
        } else {
            Err(status.clone())
        };
        self.outcome = Some(status);
        Poll::Ready(result)
    }

    /// Takes response headers the attempt already checked (within the limit, opening messages): they are
    /// not checked again.
    fn on_messages_head(&mut self, response: http::Response<RecvStream>, pushback: Pushback) {
        let (parts, body) = response.into_parts();
        self.pushback = pushback;
        self.encoding = ReceivedEncoding::from_header(parts.headers.get(GRPC_ENCODING));
        let mut metadata = MetadataMap::from_headers(parts.headers);
        metadata.set_previous_rpc_attempts(self.previous_attempts);
        self.headers = Some(metadata);
        self.state = RecvState::Body(body);
    }

    /// Handles the response headers; `Some` when polling should return now.
    fn on_head(
        &mut self,
        response: http::Response<RecvStream>,
        want_frame: bool,
    ) -> Option<Poll<Result<Option<Frame>, Status>>> {
        let (parts, body) = response.into_parts();
        if let Err(status) = check_header_list(&parts.headers, self.header_limit) {
            return Some(Poll::Ready(Err(self.end_locally(status))));
        }
        self.pushback = pushback_of(&parts.headers);
        match classify_head(parts.status.as_u16(), parts.headers, body.is_end_stream()) {
            Head::Messages {
                encoding,
                mut metadata,
            } => {
                self.encoding = encoding;
                metadata.set_previous_rpc_attempts(self.previous_attempts);
                self.headers = Some(metadata);
                self.state = RecvState::Body(body);
                (!want_frame).then_some(Poll::Ready(Ok(None)))
            }
            Head::End(status, mut trailers) => {
                self.headers = Some(MetadataMap::new());
                trailers.set_previous_rpc_attempts(self.previous_attempts);
                self.trailers = Some(trailers);
                Some(self.end_remotely(status))
            }
        }
    }

    /// Drives the response: headers, then frames, then trailers. With `want_frame` false it stops once the
    /// headers are in.
    fn poll_progress(
        &mut self,
        cx: &mut Context<'_>,
        want_frame: bool,
    ) -> Poll<Result<Option<Frame>, Status>> {
        loop {
            match &mut self.state {
                RecvState::Driving => {
                    let handed = {
                        let mut s = self.shared.lock();
                        match s.handed.take() {
                            Some(handed) => {
                                self.previous_attempts = s.previous_attempts;
                                handed
                            }
                            None => {
                                s.receiver = Some(cx.waker().clone());
                                return Poll::Pending;
                            }
                        }
                    };
                    match handed {
                        Ok(Response::Pending(future)) => self.state = RecvState::Headers(future),
                        Ok(Response::Received(response, pushback)) => {
                            self.state = RecvState::Received(Some((response, pushback)))
                        }
                        // The call finished before committing: the status of its last attempt (with that
                        // attempt's Trailers-Only metadata) or one the state machine made.
                        Err(status) => {
                            self.headers.get_or_insert_with(MetadataMap::new);
                            self.previous_attempts = status.previous_rpc_attempts();
                            self.trailers = Some(status.metadata().clone());
                            return self.end_remotely(status);
                        }
                    }
                }
                RecvState::Done => {
                    let outcome = self
                        .outcome
                        .clone()
                        .unwrap_or_else(|| Status::new(Code::Internal, "no outcome"));
                    return Poll::Ready(if outcome.code() == Code::Ok {
                        Ok(None)
                    } else {
                        Err(outcome)
                    });
                }
                RecvState::Headers(fut) => {
                    let response = match ready!(Pin::new(fut).poll(cx)) {
                        Ok(r) => r,
                        Err(e) => return self.end_remotely(Status::from_h2(e)),
                    };
                    if let Some(done) = self.on_head(response, want_frame) {
                        return done;
                    }
                }
                RecvState::Received(slot) => {
                    let Some((response, pushback)) = slot.take() else {
                        return self.end_remotely(Status::new(
                            Code::Internal,
                            "response headers already taken",
                        ));
                    };
                    self.on_messages_head(response, pushback);
                    if !want_frame {
                        return Poll::Ready(Ok(None));
                    }
                }
                RecvState::Body(body) => {
                    match self.deframer.next_frame() {
                        Ok(Some(frame)) => return Poll::Ready(Ok(Some(frame))),
                        Ok(None) => {}
                        Err(e) => return Poll::Ready(Err(self.end_locally(frame_status(e)))),
                    }
                    match ready!(body.poll_data(cx)) {
                        Some(Ok(chunk)) => {
                            let _ = body.flow_control().release_capacity(chunk.len());
                            self.deframer.push(chunk);
                        }
                        Some(Err(e)) => return self.end_remotely(Status::from_h2(e)),
                        None => {
                            if let Err(e) = self.deframer.finish() {
                                return Poll::Ready(Err(self.end_locally(frame_status(e))));
                            }
                            let RecvState::Body(body) =
                                std::mem::replace(&mut self.state, RecvState::Done)
                            else {
                                unreachable!("matched Body above")
                            };
                            self.state = RecvState::Trailers(body);
                        }
                    }
                }
                RecvState::Trailers(body) => {
                    let status = match ready!(body.poll_trailers(cx)) {
                        Ok(Some(trailers)) => {
                            if let Err(status) = check_header_list(&trailers, self.header_limit) {
                                return Poll::Ready(Err(self.end_locally(status)));
                            }
                            self.pushback = pushback_of(&trailers);
                            let (status, metadata) = status_from_trailers(trailers);
                            self.trailers = Some(metadata);
                            status
                        }
                        Ok(None) => Status::new(
                            Code::Internal,
                            "server closed the stream without sending trailers",
                        ),
                        Err(e) => Status::from_h2(e),
                    };
                    return self.end_remotely(status);
                }
            }
        }
    }
}

fn frame_status(e: FrameError) -> Status {
    let code = match e {
        FrameError::TooLarge { .. } => Code::ResourceExhausted,
        FrameError::InvalidFlag(_) | FrameError::Truncated { .. } => Code::Internal,
    };
    Status::new(code, e.to_string()).with_source(e)
}

impl<T> Drop for Streaming<T> {
    fn drop(&mut self) {
        if self.outcome.is_none() {
            // The application gave up: the call ends CANCELLED, and the committed attempt's end (and the
            // call's statistics) are reported like any local end.
            let cancelled = Status::cancelled();
            let mut s = self.shared.lock();
            s.end(&cancelled, h2::Reason::CANCEL);
            s.report_end(&cancelled, CommittedEnd::Local);
            s.telemetry.finish(&cancelled);
            s.exactly_once = None;
        }
    }
}

impl<T> futures_core::Stream for Streaming<T> {
    type Item = Result<T, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.outcome.is_some() && matches!(this.state, RecvState::Done) {
            // A stream ends after its final item, which is the error if the call failed.
            return Poll::Ready(None);
        }
        this.poll_message(cx).map(Result::transpose)
    }
}

impl<T> std::fmt::Debug for Streaming<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streaming")
            .field("headers", &self.headers)
            .field("outcome", &self.outcome)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts its wake-ups.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl Wakes {
        fn count(&self) -> usize {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    #[test]
    fn before_commit_the_sender_runs_at_most_the_inbox_ahead_of_the_driver_which_takes_messages_in_order(
    ) {
        let shared = Shared::driving(
            None,
            crate::telemetry::Telemetry::new("test".into())
                .call(&http::Uri::from_static("http://h/t.S/M")),
        );
        let mut sender = RequestSender::new(
            shared.clone(),
            Codec::<Bytes, Bytes>::raw().encoder(),
            None,
            usize::MAX,
            None,
        );
        let sender_wakes = Arc::new(Wakes::default());
        let sender_waker = Waker::from(sender_wakes.clone());
        let mut sender_cx = Context::from_waker(&sender_waker);
        let frame_len = framing::HEADER_LEN + 1000;
        let fits = INBOX_LIMIT / frame_len;
        for i in 0..fits {
            let send = std::pin::pin!(sender.send(Bytes::from(vec![i as u8; 1000])));
            assert!(
                matches!(send.poll(&mut sender_cx), Poll::Ready(Ok(()))),
                "message {i} fits"
            );
        }
        // The inbox is full: the next send waits for the driver.
        let mut blocked = Box::pin(sender.send(Bytes::from(vec![fits as u8; 1000])));
        assert!(blocked.as_mut().poll(&mut sender_cx).is_pending());

        // The driver takes the messages in order, one per call; the sender is woken once half the inbox is
        // free, not per message.
        let driver_waker = Waker::from(Arc::new(Wakes::default()));
        let driver_cx = Context::from_waker(&driver_waker);
        let mut taken = 0;
        while sender_wakes.count() == 0 {
            match shared.lock().poll_input(&driver_cx, true, false) {
                Some(Input::Message(m)) => {
                    assert_eq!((m.len(), m[framing::HEADER_LEN]), (frame_len, taken as u8));
                    taken += 1;
                }
                _ => panic!("a message was queued"),
            }
        }
        assert!(taken > 1 && taken <= fits / 2 + 1, "woken after {taken}");
        assert!(blocked.as_mut().poll(&mut sender_cx).is_ready());
        drop(blocked);
        // Not taking (no attempt ready) leaves the messages queued; they come out in order later.
        assert!(shared.lock().poll_input(&driver_cx, false, false).is_none());
        for i in taken..=fits {
            match shared.lock().poll_input(&driver_cx, true, false) {
                Some(Input::Message(m)) => assert_eq!(m[framing::HEADER_LEN], i as u8),
                _ => panic!("message {i} was queued"),
            }
        }
        assert!(shared.lock().poll_input(&driver_cx, true, false).is_none());
        // The half-close comes after the last message.
        drop(sender);
        assert!(matches!(
            shared.lock().poll_input(&driver_cx, true, false),
            Some(Input::HalfClose)
        ));
    }

    #[test]
    fn an_aborted_sender_cancels_the_uncommitted_call_and_never_half_closes_it() {
        let shared = Shared::driving(
            None,
            crate::telemetry::Telemetry::new("test".into())
                .call(&http::Uri::from_static("http://h/t.S/M")),
        );
        let mut sender = RequestSender::new(
            shared.clone(),
            Codec::<Bytes, Bytes>::raw().encoder(),
            None,
            usize::MAX,
            None,
        );
        let waker = Waker::from(Arc::new(Wakes::default()));
        let mut cx = Context::from_waker(&waker);
        {
            let send = std::pin::pin!(sender.send(Bytes::from_static(b"whole")));
            assert!(matches!(send.poll(&mut cx), Poll::Ready(Ok(()))));
        }
        sender.abort(Status::new(Code::Internal, "the rest is broken"));
        let mut s = shared.lock();
        // The driver is told to cancel (resetting every live attempt), ahead of the queued message, and the
        // sender's drop half-closed nothing.
        assert!(matches!(
            s.poll_input(&cx, true, false),
            Some(Input::Cancel)
        ));
        assert!(!s.half_closed);
        assert_eq!(
            s.sender_failure.as_ref().map(Status::code),
            Some(Code::Internal)
        );
    }
}
