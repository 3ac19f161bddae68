//! The sending side of one request stream, the only code that writes request DATA: the call's messages in
//! order, under HTTP/2 flow control or handed to h2 whole (a request known up front), then END_STREAM, or
//! a reset. Used by every attempt before commit and by the committed call's writer task after, so a change
//! to how messages are written is made here once.
//!
//! Before the stream exists (an attempt still picking) the messages wait in an [`Outbox`]; the stream's
//! [`SendHalf`] takes the outbox over when the attempt opens.
//!
//! Messages queued together leave together: whole messages are packed into one `send_data` of up to
//! [`COALESCE_LIMIT`] bytes, so a stream of small messages costs one DATA frame (and one write) per batch,
//! not per message. h2 writes every DATA frame of 256 bytes or more with its own `writev`, so without this a
//! stream of 1 KiB messages costs a system call per message. A lone message is never held back: whatever is
//! queued when the writer runs goes out at once.
//!
//! Not here: deciding which messages an attempt gets (the retry state machine), or the inbox that paces the
//! application before commit (`call/shared.rs`).

use std::collections::VecDeque;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::SendStream;

/// The most bytes of whole messages packed into one `send_data`: 16 KiB, the default (and most common)
/// `SETTINGS_MAX_FRAME_SIZE`, so a batch is one DATA frame. h2 cuts larger data into frames of that size
/// and writes each (of 256 bytes or more) with its own `writev`, so a larger batch would save no system
/// call, only delay the first bytes behind a longer copy. A message this large or larger goes alone, uncopied.
pub(crate) const COALESCE_LIMIT: usize = 16 << 10;

/// Messages to write, each with its index in the call (what the retry state machine's replay buffer
/// counts), in order; the first may be partly written. It is kept inline, so a call with one message (unary,
/// server-streaming) allocates nothing for it.
#[derive(Default)]
struct SendQueue {
    /// `None` only when `rest` is empty too.
    first: Option<(usize, Bytes)>,
    rest: VecDeque<(usize, Bytes)>,
    /// The bytes queued (what is left of a partly written front message included).
    bytes: usize,
}

impl SendQueue {
    fn push_back(&mut self, item: (usize, Bytes)) {
        self.bytes += item.1.len();
        match self.first {
            None => self.first = Some(item),
            Some(_) => self.rest.push_back(item),
        }
    }

    fn pop_front(&mut self) -> Option<(usize, Bytes)> {
        let front = self.first.take();
        self.first = self.rest.pop_front();
        if let Some((_, data)) = &front {
            self.bytes -= data.len();
        }
        front
    }

    /// Splits the first `n` bytes off the front message.
    fn split_front(&mut self, n: usize) -> Option<Bytes> {
        let (_, data) = self.first.as_mut()?;
        let chunk = data.split_to(n.min(data.len()));
        self.bytes -= chunk.len();
        Some(chunk)
    }

    fn front(&self) -> Option<&(usize, Bytes)> {
        self.first.as_ref()
    }

    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    fn iter(&self) -> impl Iterator<Item = &(usize, Bytes)> {
        self.first.iter().chain(self.rest.iter())
    }

    /// How many whole messages from the front fit in `budget` bytes together, and their bytes (at least
    /// the front message, whatever its size).
    fn batch_within(&self, budget: usize) -> (usize, usize) {
        let mut count = 0;
        let mut bytes = 0;
        for (_, data) in self.iter() {
            if count > 0 && bytes + data.len() > budget {
                break;
            }
            count += 1;
            bytes += data.len();
        }
        (count, bytes)
    }

    /// Removes the first `count` messages (at least two, `bytes` in all) as one buffer; the index of the
    /// last.
    fn take_batch(&mut self, count: usize, bytes: usize) -> (usize, Bytes) {
        let mut batch = bytes::BytesMut::with_capacity(bytes);
        let mut last = 0;
        for _ in 0..count {
            if let Some((index, data)) = self.pop_front() {
                batch.extend_from_slice(&data);
                last = index;
            }
        }
        (last, batch.freeze())
    }

    fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// The index of the last message queued.
    fn last_index(&self) -> Option<usize> {
        self.rest
            .back()
            .or(self.first.as_ref())
            .map(|(index, _)| *index)
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

    /// The bytes queued and not yet handed to h2.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.queue.bytes
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

    /// The bytes queued and not yet handed to h2.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.outbox.queued_bytes()
    }

    /// The index of the last message queued (and not yet wholly handed to h2).
    pub(crate) fn last_queued(&self) -> Option<usize> {
        self.outbox.queue.last_index()
    }

    /// Whether END_STREAM went to h2.
    pub(crate) fn half_closed(&self) -> bool {
        self.outbox.close == Close::Sent
    }

    /// Drops every message still queued: the call has ended or its stream failed, so none of them will ever
    /// be written (nor END_STREAM after them).
    pub(crate) fn discard(&mut self) {
        self.outbox.queue = SendQueue::default();
        self.outbox.front_started = false;
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
    /// not admit yet): for requests known up front, which go out with their HEADERS and need no
    /// backpressure, and for a lone END_STREAM. Whole messages are packed as in [`SendHalf::poll_write`].
    /// Returns the index of the last message handed over.
    pub(crate) fn flush_all(&mut self, on_error: OnError) -> Option<usize> {
        let mut flushed = None;
        while !self.outbox.queue.is_empty() {
            let (count, bytes) = if self.outbox.front_started {
                (1, 0)
            } else {
                self.outbox.queue.batch_within(COALESCE_LIMIT)
            };
            let (index, data) = if count > 1 {
                self.outbox.queue.take_batch(count, bytes)
            } else {
                match self.outbox.queue.front() {
                    Some((index, data)) => (*index, data.clone()),
                    None => break,
                }
            };
            // What stays queued after this write (a batch left the queue already).
            let rest = self.outbox.queue.len() - usize::from(count == 1);
            let last = self.outbox.close == Close::AfterQueue && rest == 0;
            if self.stream.send_data(data, last).is_err() && on_error == OnError::Keep {
                // The stream failed: the response side reports how (a single message stays queued for the
                // next write to see the failure too).
                return flushed;
            }
            if last {
                self.outbox.close = Close::Sent;
            }
            flushed = Some(index);
            if count == 1 {
                self.outbox.queue.pop_front();
            }
            self.outbox.front_started = false;
        }
        if self.outbox.close == Close::AfterQueue {
            self.outbox.close = Close::Sent;
            let _ = self.stream.send_data(Bytes::new(), true);
        }
        flushed
    }

    /// Writes the queue in order: as flow control admits, or each batch whole when `whole` (h2 queues the
    /// rest), then END_STREAM if asked for. Whole messages that fit in [`COALESCE_LIMIT`] (and in the
    /// window) go out as one `send_data`. `Ready` each time messages are written whole (with the index of
    /// the last) and once everything is; `Pending` while flow control holds the front message back.
    pub(crate) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        whole: bool,
    ) -> Poll<Result<Written, WriteError>> {
        while !self.outbox.queue.is_empty() {
            let (count, bytes) = match (self.outbox.front_started, self.outbox.queue.front()) {
                (true, Some((_, data))) => (1, data.len()),
                _ => self.outbox.queue.batch_within(COALESCE_LIMIT),
            };
            // Ask for the whole batch first: h2 grants what the windows allow at once (no trip through the
            // connection task), so an open window costs three h2 calls per batch.
            let capacity = if whole {
                bytes
            } else {
                if bytes > 0 {
                    self.stream.reserve_capacity(bytes);
                }
                self.stream.capacity()
            };
            if capacity == 0 && bytes > 0 {
                match self.stream.poll_capacity(cx) {
                    Poll::Ready(Some(Ok(_))) => continue,
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(WriteError::Stream(e))),
                    Poll::Ready(None) => return Poll::Ready(Err(WriteError::Closed)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            let (count, bytes) = if count > 1 && capacity < bytes {
                self.outbox.queue.batch_within(capacity)
            } else {
                (count, bytes)
            };
            if count > 1 && bytes <= capacity {
                let (index, batch) = self.outbox.queue.take_batch(count, bytes);
                let last = self.outbox.close == Close::AfterQueue && self.outbox.queue.is_empty();
                if let Err(e) = self.stream.send_data(batch, last) {
                    return Poll::Ready(Err(WriteError::Stream(e)));
                }
                if last {
                    self.outbox.close = Close::Sent;
                }
                return Poll::Ready(Ok(Written::Message(index)));
            }
            let Some(index) = self.outbox.queue.front().map(|(index, _)| *index) else {
                break;
            };
            let Some(chunk) = self.outbox.queue.split_front(capacity) else {
                break;
            };
            let done = self
                .outbox
                .queue
                .front()
                .is_some_and(|(_, data)| data.is_empty());
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
        assert!(q.is_empty() && q.front().is_none());
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
        assert_eq!((q.len(), q.front().map(|(i, _)| *i)), (1, Some(4)));
    }
}
