//! The retry buffer (gRFC A6 "Buffered RPCs"): each call's [`ReplayBuffer`] keeps the messages it sent
//! for replay, counted against a per-call limit and a per-channel [`BufferPool`] shared by all calls of a
//! channel; a message that does not fit commits the call (it is still sent, just never replayed).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;

/// The default per-call limit on buffered bytes: 1 MiB.
pub const DEFAULT_PER_CALL_LIMIT: usize = 1 << 20;
/// The default per-channel limit on buffered bytes: 16 MiB.
pub const DEFAULT_PER_CHANNEL_LIMIT: usize = 16 << 20;

/// The bytes all calls of one channel may keep for replay (wrap it in an `Arc`).
#[derive(Debug)]
pub struct BufferPool {
    limit: usize,
    used: AtomicUsize,
}

impl BufferPool {
    /// A pool of `limit` bytes.
    pub fn new(limit: usize) -> BufferPool {
        BufferPool {
            limit,
            used: AtomicUsize::new(0),
        }
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes in use.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// Takes `n` bytes if they fit.
    pub fn try_reserve(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    /// Gives back `n` bytes.
    pub fn release(&self, n: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(n))
            });
    }
}

impl Default for BufferPool {
    fn default() -> Self {
        BufferPool::new(DEFAULT_PER_CHANNEL_LIMIT)
    }
}

/// The messages of one call, kept so that a new attempt can send them again from the start, until the
/// call commits (linkerd2-proxy's `ReplayBody` is the model). Messages are numbered in the order they
/// were sent; a message stays at its number for the call's life.
///
/// Kept messages count against the call's limit and the channel's [`BufferPool`]: a message that does not
/// fit is not kept ([`ReplayBuffer::push`] says so, and the caller commits the call). Once the committed
/// attempt has sent messages they are released ([`ReplayBuffer::release_to`]), and everything is released
/// when the call finishes ([`ReplayBuffer::clear`]) or the buffer is dropped: the pool gets the bytes back
/// whatever way the call ends.
#[derive(Debug)]
pub(crate) struct ReplayBuffer {
    pool: Arc<BufferPool>,
    per_call_limit: usize,
    /// Every message of the call while it may still be replayed (a released one is left empty in its
    /// place).
    messages: Vec<Bytes>,
    /// Messages `0..accounted` are counted against the limits; later ones arrived after an overflow.
    accounted: usize,
    /// Bytes of `messages[released..accounted]` still counted.
    bytes: usize,
    /// Messages `0..released` were released.
    released: usize,
}

impl ReplayBuffer {
    /// An empty buffer holding at most `per_call_limit` bytes, and only what `pool` has room for.
    pub(crate) fn new(per_call_limit: usize, pool: Arc<BufferPool>) -> ReplayBuffer {
        ReplayBuffer {
            pool,
            per_call_limit,
            messages: Vec::new(),
            accounted: 0,
            bytes: 0,
            released: 0,
        }
    }

    /// Keeps `message` for replay if it fits within the call's limit and the pool (which then counts it);
    /// `false`, keeping nothing, if it does not. Only before an overflow: once a message did not fit, those
    /// after it go through [`ReplayBuffer::push_unbuffered`].
    pub(crate) fn push(&mut self, message: &Bytes) -> bool {
        let len = message.len();
        let fits = self
            .bytes
            .checked_add(len)
            .is_some_and(|total| total <= self.per_call_limit)
            && self.pool.try_reserve(len);
        if !fits {
            return false;
        }
        self.bytes += len;
        self.accounted += 1;
        // Room for one message at first (a unary call's only one), then doubling as usual.
        if self.messages.capacity() == 0 {
            self.messages.reserve_exact(1);
        }
        self.messages.push(message.clone());
        true
    }

    /// Keeps a message that did not fit (or came after one that did not) for the one attempt that will
    /// send it, the committed one: uncounted, it is never replayed to another.
    pub(crate) fn push_unbuffered(&mut self, message: Bytes) {
        self.messages.push(message);
    }

    /// How many messages the call sent: the number the next one gets.
    pub(crate) fn len(&self) -> usize {
        self.messages.len()
    }

    /// The messages from the first, numbered, for an attempt that starts after them.
    pub(crate) fn replay(&self) -> impl Iterator<Item = (usize, &Bytes)> {
        self.messages.iter().enumerate()
    }

    /// Releases the messages before `upto`, which the committed attempt has sent: they will never be
    /// replayed. One release to the pool for the lot, not one atomic update per message.
    pub(crate) fn release_to(&mut self, upto: usize) {
        let upto = upto.min(self.messages.len());
        let mut freed = 0;
        while self.released < upto {
            let i = self.released;
            if i < self.accounted {
                freed += self.messages[i].len();
            }
            self.messages[i] = Bytes::new();
            self.released += 1;
        }
        if freed > 0 {
            self.bytes -= freed;
            self.pool.release(freed);
        }
    }

    /// Releases every message (the call finished).
    pub(crate) fn clear(&mut self) {
        self.pool.release(self.bytes);
        self.bytes = 0;
        self.messages.clear();
        self.released = 0;
        self.accounted = 0;
    }

    /// The bytes counted against the limits now.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// How many more bytes fit: under the call's limit and in the pool.
    pub(crate) fn room(&self) -> usize {
        let pool = self.pool.limit().saturating_sub(self.pool.used());
        self.per_call_limit.saturating_sub(self.bytes).min(pool)
    }
}

impl Drop for ReplayBuffer {
    fn drop(&mut self) {
        // Memory returns to the channel's pool whatever way the call ends.
        self.pool.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: usize, fill: u8) -> Bytes {
        Bytes::from(vec![fill; len])
    }

    #[test]
    fn a_replay_sends_every_kept_message_again_from_the_first_in_order() {
        let pool = Arc::new(BufferPool::new(1000));
        let mut buffer = ReplayBuffer::new(100, pool.clone());
        for fill in 0..3 {
            assert!(buffer.push(&message(10, fill)));
        }
        assert_eq!((buffer.len(), buffer.bytes(), pool.used()), (3, 30, 30));
        let replayed: Vec<(usize, u8)> = buffer.replay().map(|(i, m)| (i, m[0])).collect();
        assert_eq!(replayed, [(0, 0), (1, 1), (2, 2)]);
        // A replay takes nothing away: the next attempt gets them all again.
        assert_eq!(buffer.replay().count(), 3);
    }

    #[test]
    fn a_message_over_the_call_limit_is_not_kept_and_costs_the_pool_nothing() {
        let pool = Arc::new(BufferPool::new(1000));
        let mut buffer = ReplayBuffer::new(25, pool.clone());
        assert!(buffer.push(&message(10, 0)));
        assert!(buffer.push(&message(15, 1)), "exactly the limit fits");
        assert!(!buffer.push(&message(1, 2)), "one byte over");
        assert_eq!((buffer.len(), buffer.bytes(), pool.used()), (2, 25, 25));
        assert_eq!(buffer.room(), 0);
        // What does not fit goes once, to the committed attempt: kept in order, never counted.
        buffer.push_unbuffered(message(1, 2));
        assert_eq!((buffer.len(), buffer.bytes(), pool.used()), (3, 25, 25));
    }

    #[test]
    fn calls_share_the_channel_pool() {
        let pool = Arc::new(BufferPool::new(30));
        let mut a = ReplayBuffer::new(100, pool.clone());
        let mut b = ReplayBuffer::new(100, pool.clone());
        assert!(a.push(&message(20, 0)));
        assert_eq!(b.room(), 10, "the pool's room, under the call's own");
        assert!(!b.push(&message(11, 0)));
        assert!(b.push(&message(10, 0)));
        assert_eq!(pool.used(), 30);
        drop(a);
        assert_eq!(
            pool.used(),
            10,
            "a dropped call's buffer returns to the pool"
        );
        assert_eq!(b.room(), 20);
    }

    #[test]
    fn commit_frees_what_the_committed_attempt_sent_and_keeps_the_numbering() {
        let pool = Arc::new(BufferPool::new(1000));
        let mut buffer = ReplayBuffer::new(25, pool.clone());
        for fill in 0..2 {
            assert!(buffer.push(&message(10, fill)));
        }
        assert!(!buffer.push(&message(10, 2)));
        buffer.push_unbuffered(message(10, 2));
        buffer.release_to(1);
        assert_eq!((buffer.bytes(), pool.used()), (10, 10));
        // Past the end (and past the uncounted message) is the same as the end; twice is once.
        buffer.release_to(99);
        buffer.release_to(3);
        assert_eq!((buffer.bytes(), pool.used()), (0, 0));
        assert_eq!(buffer.len(), 3, "the next message is still number 3");
        assert!(buffer.replay().all(|(_, m)| m.is_empty()));
    }

    #[test]
    fn clearing_at_the_end_of_the_call_frees_everything() {
        let pool = Arc::new(BufferPool::new(1000));
        let mut buffer = ReplayBuffer::new(100, pool.clone());
        assert!(buffer.push(&message(40, 0)));
        buffer.clear();
        assert_eq!((buffer.len(), buffer.bytes(), pool.used()), (0, 0, 0));
        drop(buffer);
        assert_eq!(pool.used(), 0, "nothing is released twice");
    }

    #[test]
    fn reserves_up_to_the_limit() {
        let p = BufferPool::new(10);
        assert!(p.try_reserve(6));
        assert!(!p.try_reserve(5));
        assert!(p.try_reserve(4));
        assert_eq!(p.used(), 10);
        p.release(6);
        assert!(p.try_reserve(5));
        assert!(!p.try_reserve(usize::MAX));
    }
}
