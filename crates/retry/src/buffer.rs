//! Retry buffer accounting (gRFC A6 "Buffered RPCs"). Messages kept for replay count against a per-call
//! limit and a per-channel [`BufferPool`] shared by all calls of a channel; a message that does not fit
//! commits the call (it is still sent, just never replayed).

use std::sync::atomic::{AtomicUsize, Ordering};

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

#[cfg(test)]
mod tests {
    use super::*;

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
