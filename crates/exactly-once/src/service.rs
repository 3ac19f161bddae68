//! The tracker for async servers: [`ResultTracker::execute`] runs a handler at most once per request id,
//! whatever the number of attempts, retries and hedges that carry it, and answers duplicates from the
//! cache (or after the first attempt ends).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::request_id::RequestId;
use crate::tracker::{Config, Decision, Stale, Stats, Tracker};

/// How often expired responses and silent clients are looked for (on the next request after it).
const GC_INTERVAL: Duration = Duration::from_secs(1);

/// Where an answer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The handler ran for this request.
    Executed,
    /// An earlier attempt ran it; this is its cached response.
    Replayed,
}

/// Why [`ResultTracker::execute`] gives no response.
#[derive(Debug, PartialEq, Eq)]
pub enum ExecuteError<E> {
    /// The handler failed (nothing is cached: a retry runs it again).
    Handler(E),
    /// The request is refused without running (see [`Stale`]).
    Stale(Stale),
}

struct Inner<R> {
    tracker: Tracker<R>,
    /// One per request being executed: dropped when it ends, which wakes the duplicates waiting on it.
    running: HashMap<(Bytes, u64), watch::Sender<()>>,
    last_gc: Option<Instant>,
}

/// A result tracker shared by the handlers of a server (or of several servers: backends that share one
/// tracker never execute a request twice between them).
pub struct ResultTracker<R> {
    inner: Arc<Mutex<Inner<R>>>,
    size: fn(&R) -> usize,
}

impl<R> Clone for ResultTracker<R> {
    fn clone(&self) -> Self {
        ResultTracker {
            inner: self.inner.clone(),
            size: self.size,
        }
    }
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

impl<R: Clone + Send + 'static> ResultTracker<R> {
    /// A tracker; `size` tells how many bytes a response takes, for the memory cap.
    pub fn new(config: Config, size: fn(&R) -> usize) -> ResultTracker<R> {
        ResultTracker {
            inner: Arc::new(Mutex::new(Inner {
                tracker: Tracker::new(config),
                running: HashMap::new(),
                last_gc: None,
            })),
            size,
        }
    }

    /// Runs `handler` for the request `id` unless an attempt of the same request already did (its cached
    /// response is returned) or is doing it (this waits for it to end, then answers as for a duplicate, or
    /// runs the handler if that attempt failed or was abandoned). A handler that fails must have changed
    /// nothing: its request may run again.
    pub async fn execute<F, Fut, E>(
        &self,
        id: &RequestId,
        handler: F,
    ) -> Result<(R, Source), ExecuteError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let key = (id.client_id.clone(), id.seq_no);
        loop {
            let mut wait = {
                let mut inner = self.inner.lock();
                let now = now();
                if inner
                    .last_gc
                    .is_none_or(|t| now.saturating_duration_since(t) >= GC_INTERVAL)
                {
                    inner.tracker.gc(now);
                    inner.last_gc = Some(now);
                }
                match inner.tracker.track(id, now) {
                    Decision::New => {
                        let (tx, _) = watch::channel(());
                        inner.running.insert(key.clone(), tx);
                        break;
                    }
                    Decision::Completed(r) => return Ok((r, Source::Replayed)),
                    Decision::Stale(why) => return Err(ExecuteError::Stale(why)),
                    Decision::InProgress => match inner.running.get(&key) {
                        Some(tx) => tx.subscribe(),
                        // Cannot happen (in progress means running); look again.
                        None => continue,
                    },
                }
            };
            // Ends (Err) when the running attempt's sender is dropped.
            let _ = wait.changed().await;
        }
        let mut guard = Running {
            inner: &self.inner,
            id,
            key,
            done: false,
        };
        let result = handler().await;
        let mut inner = self.inner.lock();
        guard.done = true;
        inner.running.remove(&guard.key);
        match result {
            Ok(response) => {
                let bytes = (self.size)(&response);
                inner.tracker.complete(id, response.clone(), bytes, now());
                Ok((response, Source::Executed))
            }
            Err(e) => {
                inner.tracker.fail(id);
                Err(ExecuteError::Handler(e))
            }
        }
    }

    /// The tracker's counters (in progress, completed, cached bytes, clients, executions, replays, stale
    /// rejections).
    pub fn stats(&self) -> Stats {
        self.inner.lock().tracker.stats()
    }
}

/// An execution in progress; dropped before it ends (the handler's future was dropped: the call was
/// cancelled), it counts as failed, so a duplicate may run the request.
struct Running<'a, R: Clone> {
    inner: &'a Mutex<Inner<R>>,
    id: &'a RequestId,
    key: (Bytes, u64),
    done: bool,
}

impl<R: Clone> Drop for Running<'_, R> {
    fn drop(&mut self) {
        if !self.done {
            let mut inner = self.inner.lock();
            inner.running.remove(&self.key);
            inner.tracker.fail(self.id);
        }
    }
}
