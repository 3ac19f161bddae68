//! The receiving half of a call: [`Streaming`], response headers, messages, then trailers with the status.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use h2::client::ResponseFuture;
use h2::RecvStream;
use tokio::time::{Instant, Sleep};

use grpc_retry::Pushback;

use super::shared::{Committed, CommittedEnd, Ended, SharedRef, Side};
use crate::call::attempt::{AttemptResponse, ReceivedHead};
use crate::wire::compression::{DecompressError, EncodingSet, ReceivedEncoding};
use crate::wire::framing::{Deframer, Frame, FrameError};
use crate::wire::limits::Limit;
use crate::wire::metadata::MetadataMap;
use crate::wire::response::{
    check_header_list, classify_head, pushback_of, status_from_trailers, Head,
};
use crate::wire::status::{Code, Status};

/// How a call's receiving half reads response messages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReceiveRules {
    /// The largest message accepted, as it arrives and once decompressed.
    pub(crate) limit: Limit,
    /// What the call advertised in `grpc-accept-encoding`: the compressed encodings it decodes.
    pub(crate) accept: EncodingSet,
    /// Hand compressed messages on still compressed (checked against `accept`, not decompressed): for the
    /// tower adapter, whose tonic client decompresses them under its own limit.
    pub(crate) pass_compressed: bool,
}

/// Where the receiving half stands.
///
/// ```text
///   Driving ──hand-over──▶ Headers ──headers──▶ Body(Messages) ──end of data──▶ Body(Trailers)
///      │ └──hand-over of headers already read───────▲                                 │
///      │                     │ Trailers-Only                                          │ trailers
///      └──finished before────┴──────────────────────▶ Done ◀──────────────────────────┘
///         commit
/// ```
/// Any state goes to `Done` when the call ends locally (cancel, deadline, malformed response).
enum RecvState {
    /// Until the retry driver hands over: the committed attempt's response, or the call's status. A driver
    /// in a task of its own hands over through [`Shared`]; one that ran in the caller's task already did,
    /// and what it handed over waits here (inline: no allocation) for the first poll.
    Driving(Option<Result<AttemptResponse, Status>>),
    /// The committed attempt's response headers are on their way.
    Headers(ResponseFuture),
    /// The response body: its messages, then its trailers.
    Body(RecvStream, BodyPart),
    /// The call is over, with this status.
    Done(Status),
}

/// Which part of the response body the receiving half reads.
#[derive(Clone, Copy)]
enum BodyPart {
    Messages,
    Trailers,
}

/// What the next read of the body's messages brought.
enum Messages {
    /// A whole message.
    Frame(Frame),
    /// The messages ended where a message does.
    End,
    /// The messages are not a well-formed message stream, or one is over the limit.
    Malformed(FrameError),
    /// The stream was reset, or the connection failed.
    Failed(h2::Error),
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
    rx: Receiver,
    decode: fn(Bytes) -> Result<T, Status>,
}

/// Everything of a [`Streaming`] but its decoder: the call's receiving side, which cancels the call when
/// dropped before its end, whatever the message type (so [`Streaming::decoded_with`] can re-type it).
struct Receiver {
    state: RecvState,
    shared: SharedRef,
    deframer: Deframer,
    encoding: ReceivedEncoding,
    rules: ReceiveRules,
    deadline: Option<(Instant, Pin<Box<Sleep>>)>,
    headers: Option<MetadataMap>,
    trailers: Option<MetadataMap>,
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
        rules: ReceiveRules,
        header_limit: usize,
        deadline: Option<Instant>,
    ) -> Self {
        Streaming {
            decode,
            rx: Receiver {
                state: RecvState::Driving(None),
                shared,
                deframer: Deframer::new(rules.limit.bytes),
                encoding: ReceivedEncoding::Identity,
                rules,
                deadline: deadline.map(|d| (d, Box::pin(tokio::time::sleep_until(d)))),
                headers: None,
                trailers: None,
                last_compressed: false,
                pushback: Pushback::None,
                header_limit,
                previous_attempts: 0,
            },
        }
    }

    /// The receiving half of a call whose retry driver ran in the caller's task, once it is done (`result`:
    /// committed, or finished): handed over here, kept in the receiving half for its first poll.
    pub(crate) fn taking_over(
        shared: SharedRef,
        result: Result<Committed, Status>,
        decode: fn(Bytes) -> Result<T, Status>,
        rules: ReceiveRules,
        header_limit: usize,
        deadline: Option<Instant>,
    ) -> Self {
        let (handed, previous_attempts) = {
            let mut s = shared.lock();
            let handed = s.take_over(result);
            super::writer::start(&shared, &mut s);
            (handed, s.previous_attempts)
        };
        let mut receiver = Self::driven(shared, decode, rules, header_limit, deadline);
        receiver.rx.state = RecvState::Driving(handed);
        receiver.rx.previous_attempts = previous_attempts;
        receiver
    }

    /// Waits for the response headers and returns their metadata. For a Trailers-Only response (an error
    /// before any message) this is the call's status as an error.
    pub async fn headers(&mut self) -> Result<&MetadataMap, Status> {
        poll_fn(|cx| self.poll_headers(cx)).await?;
        Ok(self.rx.headers.get_or_insert_with(MetadataMap::new))
    }

    /// The next response message; `Ok(None)` when the call ended with OK, `Err` with the call's status when it
    /// ended otherwise. After the end, every call returns the same outcome again.
    pub async fn message(&mut self) -> Result<Option<T>, Status> {
        poll_fn(|cx| self.poll_message(cx)).await
    }

    /// The trailing metadata, once the call has ended.
    pub fn trailers(&self) -> Option<&MetadataMap> {
        self.rx.trailers.as_ref()
    }

    /// The response headers' metadata, once received.
    pub fn metadata(&self) -> Option<&MetadataMap> {
        self.rx.headers.as_ref()
    }

    /// Takes the response headers' and the trailers' metadata (empty if not received), for a caller done
    /// with the call.
    pub(crate) fn take_metadata(&mut self) -> (MetadataMap, MetadataMap) {
        (
            self.rx.headers.take().unwrap_or_default(),
            self.rx.trailers.take().unwrap_or_default(),
        )
    }

    /// How many attempts preceded the one whose response this is (gRFC A6 "Exposed Retry Metadata"):
    /// retries and hedges, never transparent retries; 0 when the first attempt produced it, or before the
    /// response headers or the call's end are in. When not 0 the same number is in the response headers'
    /// metadata ([`Streaming::metadata`]) as `grpc-previous-rpc-attempts`, or, for a call that ended
    /// without response headers, in the trailers and the call's [`Status`].
    pub fn previous_rpc_attempts(&self) -> u32 {
        self.rx.previous_attempts
    }

    /// Whether the last message returned arrived compressed.
    pub fn last_message_compressed(&self) -> bool {
        self.rx.last_compressed
    }

    /// The encoding of the response's compressed messages when they are handed on still compressed (the
    /// tower adapter's calls without a receive limit of the channel's): the response headers' accepted
    /// `grpc-encoding`, for the adapter to pass on. `None` when messages are decompressed here.
    #[cfg(feature = "tower")]
    pub(crate) fn passed_encoding(&self) -> Option<crate::Encoding> {
        match self.rx.encoding {
            ReceivedEncoding::Known(enc)
                if self.rx.rules.pass_compressed && self.rx.rules.accept.contains(enc) =>
            {
                Some(enc)
            }
            _ => None,
        }
    }

    /// Cancels the call: RST_STREAM(CANCEL) goes to the server and the call ends CANCELLED (or
    /// DEADLINE_EXCEEDED if its deadline has already passed).
    pub fn cancel(&mut self) {
        if !self.is_done() {
            let status = self.local_status(Status::cancelled_by_client());
            self.end_locally(status);
        }
    }

    fn poll_headers(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        if self.rx.headers.is_some() {
            return Poll::Ready(Ok(()));
        }
        if let RecvState::Done(outcome) = &self.rx.state {
            return Poll::Ready(outcome_of::<()>(outcome).map(drop));
        }
        if let RecvState::Headers(_) | RecvState::Driving(_) = self.rx.state {
            if let Poll::Ready(status) = self.poll_deadline(cx) {
                return Poll::Ready(Err(status));
            }
            match self.poll_progress(cx, false) {
                Poll::Ready(Err(status)) => return Poll::Ready(Err(status)),
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => return Poll::Pending,
            }
        }
        match &self.rx.state {
            RecvState::Done(outcome) => Poll::Ready(outcome_of::<()>(outcome).map(drop)),
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
                self.rx.last_compressed = frame.compressed;
                Poll::Ready(self.decode_frame(frame).map(Some))
            }
            Poll::Ready(Ok(None)) => Poll::Ready(Ok(None)),
            Poll::Ready(Err(status)) => Poll::Ready(Err(status)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn decode_frame(&mut self, frame: Frame) -> Result<T, Status> {
        let payload = if frame.compressed {
            match self.decompress(frame.payload) {
                Ok(p) => p,
                Err(status) => return Err(self.end_locally(status)),
            }
        } else {
            frame.payload
        };
        (self.decode)(payload).map_err(|status| self.end_locally(status))
    }

    /// A compressed message's payload: decompressed within the limit, or handed on as it is (the tower
    /// adapter's pass-through) once its encoding is known to be one the call advertised. A message in an
    /// encoding the call did not advertise, or does not know, is INTERNAL (`doc/compression.md`: a client
    /// decodes exactly what it advertises).
    fn decompress(&self, payload: Bytes) -> Result<Bytes, Status> {
        let accept = self.rx.rules.accept;
        let advertised = || {
            if accept.is_empty() {
                "no grpc-accept-encoding: only uncompressed messages".to_owned()
            } else {
                format!("grpc-accept-encoding: {accept}")
            }
        };
        match &self.rx.encoding {
            ReceivedEncoding::Known(enc) if accept.contains(*enc) => {
                if self.rx.rules.pass_compressed {
                    return Ok(payload);
                }
                let len = payload.len();
                enc.decompress_bounded(payload, self.rx.rules.limit.bytes)
                    .map_err(|e| match e {
                        DecompressError::TooLarge => {
                            self.rx.rules.limit.exceeded_decompressed(len, *enc, true)
                        }
                        DecompressError::Corrupt(status) => status,
                    })
            }
            ReceivedEncoding::Known(enc) => Err(Status::new(
                Code::Internal,
                format!(
                    "the server compressed a response message with {enc}, which the call did not \
                     advertise ({}); to accept it, add it with ChannelBuilder::accept_compressed, \
                     Request::with_accept_compressed or a generated client's accept_compressed",
                    advertised()
                ),
            )),
            ReceivedEncoding::Identity => Err(Status::new(
                Code::Internal,
                "compressed flag set on a message but the response has no grpc-encoding",
            )),
            ReceivedEncoding::Unsupported(name) => Err(Status::new(
                Code::Internal,
                format!(
                    "the server compressed a response message with {name:?}, an encoding this client \
                     does not support (the call advertised {})",
                    advertised()
                ),
            )),
        }
    }

    /// Fires the local deadline if it has passed (once: an ended call keeps its outcome).
    fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<Status> {
        if self.is_done() {
            return Poll::Pending;
        }
        let Some((_, sleep)) = &mut self.rx.deadline else {
            return Poll::Pending;
        };
        ready!(sleep.as_mut().poll(cx));
        let status = self.rx.shared.lock().deadline_status();
        Poll::Ready(self.end_locally(status))
    }

    /// Ends the call on the client's side: resets the stream and records the outcome.
    fn end_locally(&mut self, status: Status) -> Status {
        let status = {
            let mut s = self.rx.shared.lock();
            self.rx.previous_attempts = s.previous_attempts;
            let status = status.with_previous_rpc_attempts(self.rx.previous_attempts);
            s.end_locally(&status);
            status
        };
        let status = self.with_response_headers(status);
        self.rx.state = RecvState::Done(status.clone());
        status
    }

    /// A failure that ends the call after response headers with metadata arrived carries that metadata
    /// ([`Status::response_headers`]), so a failed unary call's headers stay reachable.
    fn with_response_headers(&self, status: Status) -> Status {
        match &self.rx.headers {
            Some(headers) if status.code() != Code::Ok && !headers.is_empty() => {
                status.with_response_headers(headers.clone())
            }
            _ => status,
        }
    }

    /// Whether the call is over.
    fn is_done(&self) -> bool {
        matches!(self.rx.state, RecvState::Done(_))
    }

    /// A local status, turned into DEADLINE_EXCEEDED when the deadline has passed.
    fn local_status(&self, status: Status) -> Status {
        match &self.rx.deadline {
            Some((deadline, _))
                if status.code() == Code::Cancelled && Instant::now() >= *deadline =>
            {
                Status::deadline_passed()
            }
            _ => status,
        }
    }

    /// Records the final status from the server and stops sending (RST_STREAM(NO_ERROR) if the client had not
    /// half-closed yet).
    fn end_remotely(&mut self, status: Status) -> Poll<Result<Option<Frame>, Status>> {
        let status = self
            .local_status(status)
            .with_previous_rpc_attempts(self.rx.previous_attempts);
        let sender_failure = {
            let mut guard = self.rx.shared.lock();
            let s = &mut *guard;
            // A call its sender aborted ended on the client, whatever the reset brought back.
            match &s.sender_failure {
                Some(failure) => {
                    let failure = failure.clone();
                    s.report_end(&failure, CommittedEnd::Local);
                }
                None => s.report_end(&status, CommittedEnd::Remote(self.rx.pushback)),
            }
            if s.ended.is_none() {
                // The request stream is still open unless END_STREAM went to h2 (the application may have
                // half-closed with messages still queued for the writer task, which now stops).
                if let Side::Committed(c) = &mut s.side {
                    if !c.send.half_closed() {
                        c.send.reset(h2::Reason::NO_ERROR);
                    }
                }
                s.ended = Some(Ended::Finished(status.clone()));
                s.wake_end_watcher();
                s.discard_unsent();
            }
            // A send that failed on the client ended the call: its status, not the reset it caused.
            let status = s.sender_failure.take().unwrap_or(status);
            s.telemetry.finish(&status);
            s.exactly_once = None;
            status
        };
        let status = self.with_response_headers(sender_failure);
        let result = outcome_of(&status);
        self.rx.state = RecvState::Done(status);
        Poll::Ready(result)
    }

    /// Takes response headers the attempt already checked (within the limit, opening messages): they are
    /// not checked again.
    fn on_messages_head(&mut self, head: ReceivedHead) {
        let ReceivedHead {
            encoding,
            mut metadata,
            pushback,
            body,
        } = head;
        self.rx.pushback = pushback;
        self.rx.encoding = encoding;
        metadata.set_previous_rpc_attempts(self.rx.previous_attempts);
        self.rx.headers = Some(metadata);
        self.rx.state = RecvState::Body(body, BodyPart::Messages);
    }

    /// Handles the response headers; `Some` when polling should return now.
    fn on_head(
        &mut self,
        response: http::Response<RecvStream>,
        want_frame: bool,
    ) -> Option<Poll<Result<Option<Frame>, Status>>> {
        let (parts, body) = response.into_parts();
        if let Err(status) = check_header_list(&parts.headers, self.rx.header_limit) {
            return Some(Poll::Ready(Err(self.end_locally(status))));
        }
        self.rx.pushback = pushback_of(&parts.headers);
        match classify_head(parts.status.as_u16(), parts.headers, body.is_end_stream()) {
            Head::Messages {
                encoding,
                mut metadata,
            } => {
                self.rx.encoding = encoding;
                metadata.set_previous_rpc_attempts(self.rx.previous_attempts);
                self.rx.headers = Some(metadata);
                self.rx.state = RecvState::Body(body, BodyPart::Messages);
                (!want_frame).then_some(Poll::Ready(Ok(None)))
            }
            Head::End(status, mut trailers) => {
                self.rx.headers = Some(MetadataMap::new());
                trailers.set_previous_rpc_attempts(self.rx.previous_attempts);
                self.rx.trailers = Some(trailers);
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
            match &mut self.rx.state {
                RecvState::Driving(handed) => {
                    let handed = match handed.take() {
                        Some(handed) => handed,
                        None => ready!(self.poll_hand_over(cx)),
                    };
                    match handed {
                        Ok(AttemptResponse::Pending(future)) => {
                            self.rx.state = RecvState::Headers(future)
                        }
                        Ok(AttemptResponse::Received(head)) => {
                            self.on_messages_head(head);
                            if !want_frame {
                                return Poll::Ready(Ok(None));
                            }
                        }
                        Err(status) => return self.end_before_commit(status),
                    }
                }
                RecvState::Headers(future) => {
                    let response = match ready!(Pin::new(future).poll(cx)) {
                        Ok(r) => r,
                        Err(e) => return self.end_remotely(Status::from_h2(e)),
                    };
                    if let Some(done) = self.on_head(response, want_frame) {
                        return done;
                    }
                }
                RecvState::Body(body, part @ BodyPart::Messages) => {
                    match ready!(poll_messages(body, &mut self.rx.deframer, cx)) {
                        Messages::Frame(frame) => return Poll::Ready(Ok(Some(frame))),
                        Messages::End => *part = BodyPart::Trailers,
                        Messages::Malformed(e) => {
                            let status = frame_status(e, &self.rx.rules.limit);
                            return Poll::Ready(Err(self.end_locally(status)));
                        }
                        Messages::Failed(e) => return self.end_remotely(Status::from_h2(e)),
                    }
                }
                RecvState::Body(body, BodyPart::Trailers) => {
                    let trailers = ready!(body.poll_trailers(cx));
                    return self.on_trailers(trailers);
                }
                RecvState::Done(outcome) => return Poll::Ready(outcome_of(outcome)),
            }
        }
    }

    /// Ready with what the retry driver handed over (the committed attempt's response, or the call's
    /// status), taken from the shared state.
    fn poll_hand_over(&mut self, cx: &Context<'_>) -> Poll<Result<AttemptResponse, Status>> {
        let mut s = self.rx.shared.lock();
        let Some(handed) = s.handed.take() else {
            s.receiver = Some(cx.waker().clone());
            return Poll::Pending;
        };
        self.rx.previous_attempts = s.previous_attempts;
        Poll::Ready(handed.map(|response| *response))
    }

    /// The call finished before committing: the status of its last attempt (with that attempt's
    /// Trailers-Only metadata) or one the state machine made.
    fn end_before_commit(&mut self, status: Status) -> Poll<Result<Option<Frame>, Status>> {
        self.rx.headers.get_or_insert_with(MetadataMap::new);
        self.rx.previous_attempts = status.previous_rpc_attempts();
        self.rx.trailers = Some(status.metadata().clone());
        self.end_remotely(status)
    }

    /// The trailers arrived (or the stream ended without them, or failed): the call's status.
    fn on_trailers(
        &mut self,
        trailers: Result<Option<http::HeaderMap>, h2::Error>,
    ) -> Poll<Result<Option<Frame>, Status>> {
        let status = match trailers {
            Ok(Some(trailers)) => {
                if let Err(status) = check_header_list(&trailers, self.rx.header_limit) {
                    return Poll::Ready(Err(self.end_locally(status)));
                }
                self.rx.pushback = pushback_of(&trailers);
                let (status, metadata) = status_from_trailers(trailers);
                self.rx.trailers = Some(metadata);
                status
            }
            Ok(None) => Status::new(
                Code::Internal,
                "server closed the stream without sending trailers",
            ),
            Err(e) => Status::from_h2(e),
        };
        self.end_remotely(status)
    }
}

/// Reads the body until the next whole message, the end of the messages, or a failure.
fn poll_messages(
    body: &mut RecvStream,
    deframer: &mut Deframer,
    cx: &mut Context<'_>,
) -> Poll<Messages> {
    loop {
        match deframer.next_frame() {
            Ok(Some(frame)) => return Poll::Ready(Messages::Frame(frame)),
            Ok(None) => {}
            Err(e) => return Poll::Ready(Messages::Malformed(e)),
        }
        match ready!(body.poll_data(cx)) {
            Some(Ok(chunk)) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                deframer.push(chunk);
            }
            Some(Err(e)) => return Poll::Ready(Messages::Failed(e)),
            None => {
                return Poll::Ready(match deframer.finish() {
                    Ok(()) => Messages::End,
                    Err(e) => Messages::Malformed(e),
                })
            }
        }
    }
}

/// What polling returns once the call is over with `status`: the end of the messages for OK, else the status.
fn outcome_of<F>(status: &Status) -> Result<Option<F>, Status> {
    if status.code() == Code::Ok {
        Ok(None)
    } else {
        Err(status.clone())
    }
}

/// The status of a response that is not a well-formed message stream, or whose message is over `limit`.
fn frame_status(e: FrameError, limit: &Limit) -> Status {
    match e {
        FrameError::TooLarge {
            len, compressed, ..
        } => limit.exceeded(len, compressed).with_source(e),
        FrameError::InvalidFlag(_) | FrameError::Truncated { .. } => {
            Status::new(Code::Internal, e.to_string()).with_source(e)
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if !matches!(self.state, RecvState::Done(_)) {
            // The application gave up: the call ends CANCELLED, and the committed attempt's end (and the
            // call's statistics) are reported like any local end.
            let cancelled = Status::cancelled_by_client();
            self.shared.lock().end_locally(&cancelled);
        }
    }
}

impl Streaming<Bytes> {
    /// The same call, its messages decoded by `decode` from now on (a message already received was
    /// already handed on as bytes). A decoding error ends the call as a malformed message does: the call
    /// is cancelled and every later poll returns that status. For clients that carry calls as bytes
    /// through a tower stack ([`crate::service`]) and decode the replies themselves.
    pub fn decoded_with<U>(self, decode: fn(Bytes) -> Result<U, Status>) -> Streaming<U> {
        Streaming {
            rx: self.rx,
            decode,
        }
    }
}

impl<T> futures_core::Stream for Streaming<T> {
    type Item = Result<T, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.is_done() {
            // A stream ends after its final item, which is the error if the call failed.
            return Poll::Ready(None);
        }
        this.poll_message(cx).map(Result::transpose)
    }
}

impl<T> std::fmt::Debug for Streaming<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streaming")
            .field("headers", &self.rx.headers)
            .field(
                "outcome",
                &match &self.rx.state {
                    RecvState::Done(status) => Some(status),
                    _ => None,
                },
            )
            .finish_non_exhaustive()
    }
}
