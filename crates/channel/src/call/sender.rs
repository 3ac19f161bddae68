//! The sending half of a call: [`RequestSender`].

use std::future::poll_fn;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

use super::shared::{call_has_ended, SharedRef, Side, Writer, SEND_AHEAD_LIMIT};
use super::writer;
use crate::call::send_stream::OnError;
use crate::request::MessageOptions;
use crate::wire::codec::Codec;
use crate::wire::compression::Encoding;
use crate::wire::framing::{self};
use crate::wire::limits::Limit;
use crate::wire::status::{Code, Status};

/// The sending half of a streaming call. Dropping it half-closes the call (unless the call has ended), as
/// [`RequestSender::finish`] does: the server sees a complete request.
///
/// To give up on a call, drop (or [`cancel`](crate::Streaming::cancel)) its receiving half first, or only:
/// the call is then reset with RST_STREAM(CANCEL) and never half-closed. Dropping both halves together,
/// sender first (a tuple `(sender, receiver)` drops in that order), half-closes before the reset, and a
/// server that reads to the end may take the request as whole.
pub struct RequestSender<T> {
    shared: SharedRef,
    codec: Codec<T, ()>,
    encoding: Option<Encoding>,
    limit: Limit,
    deadline: Option<Instant>,
    /// Where messages are encoded: consecutive messages share its allocations (made on the first send).
    arena: BytesMut,
    /// Dropped before [`RequestSender::finish`], the sender cancels the call instead of half-closing it:
    /// for senders the crate feeds from a request stream it owns, whose drop means the call was given up.
    cancel_on_drop: bool,
}

/// The size of a sender's encoding arena: one allocation per this many bytes of messages rather than one per
/// message (tonic's encoder buffer is the same size).
const ARENA: usize = 8 << 10;

impl<T> RequestSender<T> {
    pub(crate) fn new(
        shared: SharedRef,
        codec: Codec<T, ()>,
        encoding: Option<Encoding>,
        limit: Limit,
        deadline: Option<Instant>,
    ) -> Self {
        RequestSender {
            shared,
            codec,
            encoding,
            limit,
            deadline,
            arena: BytesMut::new(),
            cancel_on_drop: false,
        }
    }

    /// Makes dropping this sender before [`RequestSender::finish`] cancel the call (RST_STREAM(CANCEL), never
    /// END_STREAM), for a sender the crate feeds itself (`Channel::client_streaming`, the bidi pump, the
    /// tower adapter): those drop it unfinished only when the call was given up (the caller dropped the
    /// call's future, or the runtime dropped the feeding task), never to say the request is complete.
    pub(crate) fn cancel_on_drop(mut self) -> Self {
        self.cancel_on_drop = true;
        self
    }

    /// Sends a message, compressed if the call is. Returns once the message is queued for writing; waits
    /// while the call holds 64 KiB of messages that HTTP/2 flow control has not let out yet (a larger
    /// message waits until the call holds none), so a slow server slows the sender instead of filling
    /// memory. The bound holds for the whole call: before it commits (gRFC A6) against the attempt that is
    /// furthest ahead, after against the committed one, including what that attempt had not written when
    /// the call committed. Messages sent in a burst leave packed together (many per DATA frame); a message
    /// sent alone leaves at once.
    ///
    /// An error means the call can take no more messages. When the server ended the call, its status is what
    /// the receiving half ([`Streaming`](crate::Streaming)) reports; the error here only says sending stopped.
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
        if self.arena.capacity() == 0 {
            self.arena = BytesMut::with_capacity(ARENA);
        }
        let frame = framing::encode_frame_into(
            &self.codec,
            &message,
            encoding,
            self.limit,
            &mut self.arena,
        )?;
        self.send_frame(frame, false).await
    }

    /// Half-closes the call: no more messages will be sent. END_STREAM follows the messages sent before.
    pub async fn finish(mut self) -> Result<(), Status> {
        self.send_frame(Bytes::new(), true).await
    }

    async fn send_frame(&mut self, mut data: Bytes, end_stream: bool) -> Result<(), Status> {
        let shared = &self.shared;
        let send = poll_fn(|cx| {
            let mut guard = shared.lock();
            let s = &mut *guard;
            if let Some(ended) = &s.ended {
                return Poll::Ready(Err(ended.status()));
            }
            if s.half_closed {
                return Poll::Ready(Err(Status::new(
                    Code::Internal,
                    "the call was already half-closed",
                )));
            }
            if let Some(status) = s.write_failed() {
                return Poll::Ready(Err(status.clone()));
            }
            let c = match &mut s.side {
                Side::Committed(c) => c,
                Side::Driving(inbox) => {
                    // Before commit the driver takes the queued messages once an open attempt has written
                    // the previous ones: the readiest live attempt paces the sender, which runs ahead of it
                    // by at most SEND_AHEAD_LIMIT (the inbox and the batch the driver took last).
                    if !data.is_empty() {
                        let held = inbox.queued + inbox.taken;
                        if held > 0 && held + data.len() > SEND_AHEAD_LIMIT {
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
                // The driver finished the call: its end (above) says how.
                Side::Finished { .. } => return Poll::Ready(Err(call_has_ended())),
            };
            // After commit: queued behind what the writer task has not written yet (what the committed
            // attempt had not written at commit included), at most SEND_AHEAD_LIMIT ahead of h2 (a larger
            // message waits until everything before it went).
            if !data.is_empty() {
                if !c.send.caught_up() && c.send.queued_bytes() + data.len() > SEND_AHEAD_LIMIT {
                    // The writer task is running or waits for flow control: it wakes this send once it
                    // has written some of the queue.
                    c.blocked_sender = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                // After commit nothing counts messages by index (the retry machine is done with them).
                c.send.push(0, std::mem::take(&mut data));
            }
            if end_stream {
                c.send.close_after_queue();
                s.half_closed = true;
            }
            match &mut c.writer {
                Writer::NotStarted => {
                    c.writer = Writer::Running(None);
                    tokio::spawn(writer::run(shared.clone()));
                }
                writer => writer.wake(),
            }
            Poll::Ready(Ok(()))
        });
        match self.deadline {
            None => send.await,
            Some(deadline) => match tokio::time::timeout_at(deadline, send).await {
                Ok(result) => result,
                Err(_) => {
                    let status = Status::deadline_passed();
                    self.shared.lock().end(&status, h2::Reason::CANCEL);
                    Err(status)
                }
            },
        }
    }
}

impl<T> RequestSender<T> {
    /// Ready once every message sent so far has been written to HTTP/2 within its flow-control window
    /// (before commit, by an attempt with a stream; after, by the call's stream), or with the call's
    /// status if it ended first. The xDS client starts its does-not-exist timers here (gRFC A57: once the
    /// request is actually sent).
    #[cfg(feature = "xds")]
    pub(crate) async fn flushed(&self) -> Result<(), Status> {
        poll_fn(|cx| {
            let mut guard = self.shared.lock();
            let s = &mut *guard;
            if let Some(ended) = &s.ended {
                return Poll::Ready(Err(ended.status()));
            }
            if let Some(status) = s.write_failed() {
                return Poll::Ready(Err(status.clone()));
            }
            let waiter = match &mut s.side {
                Side::Committed(c) if c.send.caught_up() => return Poll::Ready(Ok(())),
                Side::Driving(inbox) if inbox.written && inbox.queue.is_empty() => {
                    return Poll::Ready(Ok(()))
                }
                // The writer task wakes the blocked sender once its queue is empty.
                Side::Committed(c) => &mut c.blocked_sender,
                Side::Driving(inbox) => &mut inbox.flush_waiter,
                // Nothing is left to write (the call's end, above, says how it went).
                Side::Finished { .. } => return Poll::Ready(Ok(())),
            };
            *waiter = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// A handle that tells when the call has ended, for a task that feeds this sender.
    pub(crate) fn end_watch(&self) -> EndWatch {
        EndWatch(self.shared.clone())
    }

    /// The most bytes a request message may have: the call's send limit, and where it came from.
    #[cfg(feature = "tower")]
    pub(crate) fn limit(&self) -> Limit {
        self.limit
    }

    /// Ends the call with `status` instead of half-closing it, for a task feeding this sender whose request
    /// cannot go on: a message that cannot be sent (what [`RequestSender::send`] returned), or a request
    /// source that failed. Under one lock the call is marked ended and reset with RST_STREAM(CANCEL), the
    /// committed attempt's stream or, before commit, every live attempt's through the retry driver; the
    /// sender is consumed, so nothing can half-close the call afterwards and the server never sees the end
    /// of a request that is not whole. The receiving half reports `status`. A call that had already ended
    /// keeps its own end (then `status` only echoes it), and so does one whose stream a failed write found
    /// over (the server reset or ended it, or the connection failed): the receiving half reports how, the
    /// server's status when it sent one, not the failed send's "the stream was closed".
    pub(crate) fn abort(self, status: Status) {
        let mut s = self.shared.lock();
        if s.ended.is_none() && s.write_failed().is_none() {
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
        // A failed write found the stream over at h2 (the server reset or ended it, or the connection
        // failed): there is nothing left to half-close or cancel, and cancelling would replace the end the
        // receiving half reports (the server's status when it sent one) with CANCELLED.
        if s.ended.is_none() && !s.half_closed && s.write_failed().is_none() {
            if self.cancel_on_drop {
                // Given up unfinished: the server must not see the end of a request that is not whole.
                let status = Status::cancelled_by_client();
                s.sender_failure = Some(status.clone());
                s.end(&status, h2::Reason::CANCEL);
                return;
            }
            s.half_closed = true;
            match &mut s.side {
                Side::Committed(c) => {
                    c.send.close_after_queue();
                    match &mut c.writer {
                        // It writes END_STREAM after what it still holds, under flow control.
                        Writer::Running(_) => c.writer.wake(),
                        // Nothing is queued (a writer starts whenever something is, at commit or after it,
                        // and stops early only on a failed write, which returned above): END_STREAM alone.
                        Writer::NotStarted | Writer::Stopped => {
                            c.send.flush_all(OnError::Drop);
                        }
                    }
                }
                Side::Driving(inbox) => {
                    if let Some(w) = inbox.driver.take() {
                        w.wake();
                    }
                }
                Side::Finished { .. } => {}
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
