//! The task that writes a committed call's request messages: [`run`].
//!
//! After commit, [`RequestSender::send`](crate::RequestSender::send) only queues its message in the call's
//! send half (up to [`SEND_AHEAD_LIMIT`] bytes ahead of h2) and wakes this task; the task writes whatever is
//! queued when it runs, packed into DATA frames (`send_stream.rs`), under HTTP/2 flow control. An application that
//! sends faster than one message per task switch (a producer feeding the call) so gets many messages per DATA
//! frame and per write, as tonic's body encoder does; one that sends a message and waits for the answer gets
//! it written at once, since the task runs as soon as the sender yields.
//!
//! The task is spawned at commit when the committed attempt left messages unwritten (they wait here, under
//! the same bound, rather than in h2), or else by the first send after commit. It stops when the call has
//! ended, once END_STREAM went to h2, or when a write fails: the stream is then over at h2 (the server reset
//! or ended it, or the connection failed), what is still queued is dropped, the next send returns that
//! failure, and the receiving half reports how the call ended (the server's status when it sent one: the
//! failed write neither cancels the call nor replaces that status). Each time it has run it updates the
//! channel's count of unwritten request bytes ([`crate::ChannelStats::unsent_request_bytes`]), which drops
//! a call's share to 0 as soon as the call ends.
//!
//! Not here: writing before commit, which the retry driver does for every live attempt.

use std::future::poll_fn;
use std::task::Poll;

use super::shared::{Shared, SharedRef, Side, Writer, SEND_AHEAD_LIMIT};
use crate::call::send_stream::{WriteError, Written};
use crate::wire::status::{Code, Status};

/// At the hand-over (`s` is `shared`, locked): starts the task if the committed attempt left messages to
/// write, so that they go out under flow control whether or not the application sends again.
pub(super) fn start(shared: &SharedRef, s: &mut Shared) {
    if s.claim_writer() {
        tokio::spawn(run(shared.clone()));
    }
}

/// Writes the call's queued messages until the call ends, half-closes, or a write fails.
pub(super) async fn run(shared: SharedRef) {
    poll_fn(|cx| {
        let mut guard = shared.lock();
        let s = &mut *guard;
        let Side::Committed(c) = &mut s.side else {
            return Poll::Ready(());
        };
        if s.ended.is_some() {
            c.writer = Writer::Stopped;
            c.wake_blocked_sender();
            return Poll::Ready(());
        }
        let send = &mut c.send;
        let queued_before = send.queued_bytes();
        let written = loop {
            match send.poll_write(cx, false) {
                Poll::Ready(Ok(Written::Message(_))) => continue,
                Poll::Ready(Ok(Written::CaughtUp)) | Poll::Pending => break Ok(()),
                Poll::Ready(Err(WriteError::Stream(e))) => break Err(Status::from_h2(e)),
                Poll::Ready(Err(WriteError::Closed)) => {
                    break Err(Status::new(Code::Unavailable, "the stream was closed"))
                }
            }
        };
        let half_closed = send.half_closed();
        // A waiting sender goes on once half the room is free, or once the queue is empty (a message larger
        // than half the room waits for that); only after progress, so the two never wake each other in a
        // loop while flow control holds the queue back.
        let queued = send.queued_bytes();
        if queued < queued_before && (queued <= SEND_AHEAD_LIMIT / 2 || queued == 0) {
            c.wake_blocked_sender();
        }
        c.recount_unsent(&s.telemetry);
        match written {
            Err(status) => {
                // The stream is over at h2: what is still queued will never go.
                c.write_failed = Some(status);
                c.writer = Writer::Stopped;
                c.discard_unsent(&s.telemetry);
                c.wake_blocked_sender();
                Poll::Ready(())
            }
            Ok(()) if half_closed => {
                c.writer = Writer::Stopped;
                Poll::Ready(())
            }
            Ok(()) => {
                match &mut c.writer {
                    Writer::Running(Some(w)) if w.will_wake(cx.waker()) => {}
                    writer => *writer = Writer::Running(Some(cx.waker().clone())),
                }
                Poll::Pending
            }
        }
    })
    .await
}
