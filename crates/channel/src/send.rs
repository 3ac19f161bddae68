//! The sending side of one request stream, the only code that writes request DATA: the call's messages in
//! order, under HTTP/2 flow control or handed to h2 whole, then END_STREAM, or a reset. Used by every
//! attempt before commit, at the hand-over, and by the sending half after commit, so a change to how
//! messages are written is made here once.
//!
//! Before the stream exists (an attempt still picking) the messages wait in an [`Outbox`]; the stream's
//! [`SendHalf`] takes the outbox over when the attempt opens.
//!
//! Not here: deciding which messages an attempt gets (the retry state machine), or the inbox that paces the
//! application before commit (`call/shared.rs`).

use std::collections::VecDeque;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::SendStream;

/// Messages to write, each with its index in the call (what the retry state machine's replay buffer
/// counts), in order; the first may be partly written. It is kept inline, so a call with one message (unary,
/// server-streaming) allocates nothing for it.
#[derive(Default)]
struct SendQueue {
    /// `None` only when `rest` is empty too.
    first: Option<(usize, Bytes)>,
    rest: VecDeque<(usize, Bytes)>,
}

impl SendQueue {
    fn push_back(&mut self, item: (usize, Bytes)) {
        match self.first {
            None => self.first = Some(item),
            Some(_) => self.rest.push_back(item),
        }
    }

    fn pop_front(&mut self) -> Option<(usize, Bytes)> {
        let front = self.first.take();
        self.first = self.rest.pop_front();
        front
    }

    fn front_mut(&mut self) -> Option<&mut (usize, Bytes)> {
        self.first.as_mut()
    }

    /// Removes message `index`; whether it was queued.
    fn remove(&mut self, index: usize) -> bool {
        if self.first.as_ref().is_some_and(|(i, _)| *i == index) {
            self.pop_front();
            return true;
        }
        match self.rest.iter().position(|(i, _)| *i == index) {
            Some(at) => self.rest.remove(at).is_some(),
            None => false,
        }
    }

    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    fn is_empty(&self) -> bool {
        self.first.is_none()
    }
}

/// Where the half-close stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Close {
    /// More messages may come.
    #[default]
    Open,
    /// END_STREAM goes out after the queued messages.
    AfterQueue,
    /// END_STREAM went to h2.
    Sent,
}

/// The messages (and half-close) waiting for a stream.
#[derive(Default)]
pub(crate) struct Outbox {
    queue: SendQueue,
    close: Close,
    /// Part of the front message went to h2 already (the rest must follow before anything else).
    front_started: bool,
}

impl Outbox {
    /// Queues message `index`.
    pub(crate) fn push(&mut self, index: usize, message: Bytes) {
        self.queue.push_back((index, message));
    }

    /// Half-closes after the queued messages.
    pub(crate) fn close_after_queue(&mut self) {
        if self.close == Close::Open {
            self.close = Close::AfterQueue;
        }
    }

    /// Whether nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

/// What [`SendHalf::poll_write`] wrote.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// Message `index` went to h2 whole.
    Message(usize),
    /// Everything queued went to h2, END_STREAM too if it was asked for.
    CaughtUp,
}

/// Why writing stopped.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// h2 refused the data or the stream failed.
    Stream(h2::Error),
    /// The stream is closed for sending (the server ended or reset it): the response side says how.
    Closed,
}

/// What to do with the rest of the queue when h2 refuses a message in [`SendHalf::flush_all`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnError {
    /// Leave it queued: the next write reports how the stream failed.
    Keep,
    /// Drop it: the response side reports how the stream ended.
    Drop,
}

/// The sending side of an open request stream.
pub(crate) struct SendHalf {
    stream: SendStream<Bytes>,
    outbox: Outbox,
}

impl SendHalf {
    /// The stream, with what was waiting for it.
    pub(crate) fn new(stream: SendStream<Bytes>, outbox: Outbox) -> SendHalf {
        SendHalf { stream, outbox }
    }

    /// Queues message `index`.
    pub(crate) fn push(&mut self, index: usize, message: Bytes) {
        self.outbox.push(index, message);
    }

    /// Half-closes after the queued messages.
    pub(crate) fn close_after_queue(&mut self) {
        self.outbox.close_after_queue();
    }

    /// Whether every queued message went to h2.
    pub(crate) fn caught_up(&self) -> bool {
        self.outbox.is_empty()
    }

    /// Whether END_STREAM went to h2.
    pub(crate) fn half_closed(&self) -> bool {
        self.outbox.close == Close::Sent
    }

    /// Takes message `index` back if none of it went to h2 yet (a send the application gave up on);
    /// whether it did. A message partly written stays, so the stream never carries half a message.
    pub(crate) fn withdraw(&mut self, index: usize) -> bool {
        let front = self
            .outbox
            .queue
            .front_mut()
            .is_some_and(|(i, _)| *i == index);
        if front && self.outbox.front_started {
            return false;
        }
        self.outbox.queue.remove(index)
    }

    /// Resets the stream (RST_STREAM with `reason`).
    pub(crate) fn reset(&mut self, reason: h2::Reason) {
        self.stream.send_reset(reason);
    }

    /// Whether the server reset the stream, and with what.
    pub(crate) fn poll_reset(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<h2::Reason, h2::Error>> {
        self.stream.poll_reset(cx)
    }

    /// Hands everything queued to h2 at once, END_STREAM too if asked for (h2 queues what the windows do
    /// not admit yet): for requests known up front, which go out with their HEADERS, and at the hand-over,
    /// for messages the application sent already. Returns the index of the last message handed over.
    pub(crate) fn flush_all(&mut self, on_error: OnError) -> Option<usize> {
        let mut flushed = None;
        loop {
            let last = self.outbox.close == Close::AfterQueue && self.outbox.queue.len() == 1;
            let Some((index, data)) = self.outbox.queue.front_mut() else {
                break;
            };
            let index = *index;
            if self.stream.send_data(data.clone(), last).is_err() && on_error == OnError::Keep {
                return flushed;
            }
            if last {
                self.outbox.close = Close::Sent;
            }
            flushed = Some(index);
            self.outbox.queue.pop_front();
            self.outbox.front_started = false;
        }
        if self.outbox.close == Close::AfterQueue {
            self.outbox.close = Close::Sent;
            let _ = self.stream.send_data(Bytes::new(), true);
        }
        flushed
    }

    /// Writes the queue in order: as flow control admits, or each message whole when `whole` (h2 queues the
    /// rest), then END_STREAM if asked for. `Ready` each time a message is written whole and once everything
    /// is; `Pending` while flow control holds the front message back.
    pub(crate) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        whole: bool,
    ) -> Poll<Result<Written, WriteError>> {
        while let Some((index, data)) = self.outbox.queue.front_mut() {
            let index = *index;
            // Ask for the whole message first: h2 grants what the windows allow at once (no trip through the
            // connection task), so an open window costs three h2 calls per message.
            let capacity = if whole {
                data.len()
            } else {
                if !data.is_empty() {
                    self.stream.reserve_capacity(data.len());
                }
                self.stream.capacity()
            };
            if capacity == 0 && !data.is_empty() {
                match self.stream.poll_capacity(cx) {
                    Poll::Ready(Some(Ok(_))) => continue,
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(WriteError::Stream(e))),
                    Poll::Ready(None) => return Poll::Ready(Err(WriteError::Closed)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            let chunk = data.split_to(capacity.min(data.len()));
            let done = data.is_empty();
            let last =
                done && self.outbox.close == Close::AfterQueue && self.outbox.queue.len() == 1;
            if let Err(e) = self.stream.send_data(chunk, last) {
                return Poll::Ready(Err(WriteError::Stream(e)));
            }
            if done {
                self.outbox.queue.pop_front();
                self.outbox.front_started = false;
                if last {
                    self.outbox.close = Close::Sent;
                }
                return Poll::Ready(Ok(Written::Message(index)));
            }
            self.outbox.front_started = true;
        }
        if self.outbox.close == Close::AfterQueue {
            self.outbox.close = Close::Sent;
            if let Err(e) = self.stream.send_data(Bytes::new(), true) {
                return Poll::Ready(Err(WriteError::Stream(e)));
            }
        }
        Poll::Ready(Ok(Written::CaughtUp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_send_queue_keeps_order_with_its_first_message_inline() {
        let mut q = SendQueue::default();
        assert!(q.is_empty() && q.front_mut().is_none());
        for i in 0..3 {
            q.push_back((i, Bytes::from(vec![i as u8])));
        }
        assert_eq!(q.len(), 3);
        assert_eq!(q.pop_front().map(|(i, _)| i), Some(0));
        q.push_back((3, Bytes::new()));
        let order: Vec<usize> = std::iter::from_fn(|| q.pop_front().map(|(i, _)| i)).collect();
        assert_eq!(order, [1, 2, 3]);
        assert!(q.is_empty());
        q.push_back((4, Bytes::new()));
        assert_eq!((q.len(), q.front_mut().map(|(i, _)| *i)), (1, Some(4)));
    }
}
