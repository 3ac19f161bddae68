//! The tracker for async servers: [`ResultTracker::execute`] runs a handler at most once per request id,
//! whatever the number of attempts, retries and hedges that carry it, and answers duplicates from the
//! cache (or after the first attempt ends). What it refuses comes back as an [`ExecuteError`] that names the
//! gRPC code to answer with ([`ExecuteError::code`]); it does not build statuses itself (it knows no
//! transport).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::request_id::RequestId;
use grpc_code::Code;

use crate::tracker::{Config, Decision, Refusal, Stale, Stats, Tracker};

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
    /// The request is refused without running: a duplicate of a call that ended (see [`Stale`]).
    Stale(Stale),
    /// The request is refused without running: the tracker does not take it (see [`Refusal`]).
    Refused(Refusal),
}

impl<E> ExecuteError<E> {
    /// The gRPC code to answer a refusal with: FAILED_PRECONDITION for a stale request, INVALID_ARGUMENT
    /// for a malformed client id, RESOURCE_EXHAUSTED when the tracker's client records are all taken;
    /// `None` for a handler's error (its own status applies).
    pub fn code(&self) -> Option<Code> {
        match self {
            ExecuteError::Handler(_) => None,
            ExecuteError::Stale(why) => Some(why.code()),
            ExecuteError::Refused(why) => Some(why.code()),
        }
    }
}

impl<E: fmt::Display> fmt::Display for ExecuteError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecuteError::Handler(e) => e.fmt(f),
            ExecuteError::Stale(why) => why.fmt(f),
            ExecuteError::Refused(why) => why.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ExecuteError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ExecuteError::Handler(e) => Some(e),
            ExecuteError::Stale(why) => Some(why),
            ExecuteError::Refused(why) => Some(why),
        }
    }
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
    /// nothing: its request may run again. A stale or refused request gets an error without running
    /// ([`ExecuteError::code`] says which gRPC code to answer it with).
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
                    Decision::Refused(why) => return Err(ExecuteError::Refused(why)),
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

    /// The tracker's counters (in progress, completed, cached bytes, tombstones, clients, executions,
    /// replays, stale and refused requests).
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn id(client_id: &[u8], seq_no: u64) -> RequestId {
        RequestId {
            client_id: Bytes::copy_from_slice(client_id),
            seq_no,
            first_incomplete_seq_no: 1,
            attempt_no: 1,
        }
    }

    /// Refusals never run the handler, and name the gRPC code to answer with.
    #[tokio::test(start_paused = true)]
    async fn refusals_map_to_their_codes_without_running() {
        let tracker: ResultTracker<u32> =
            ResultTracker::new(Config::default().with_max_clients(1), |_| 4);
        let runs = AtomicU32::new(0);
        let handler = || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>(7)
        };
        let invalid = tracker.execute(&id(&[1; 17], 1), handler).await;
        assert_eq!(
            invalid,
            Err(ExecuteError::Refused(Refusal::InvalidClientId { len: 17 }))
        );
        assert_eq!(
            invalid.err().and_then(|e| e.code()),
            Some(Code::InvalidArgument)
        );
        assert_eq!(
            tracker.execute(&id(&[1; 16], 1), handler).await,
            Ok((7, Source::Executed))
        );
        let full = tracker.execute(&id(&[2; 16], 1), handler).await;
        assert_eq!(full, Err(ExecuteError::Refused(Refusal::TooManyClients)));
        assert_eq!(
            full.err().and_then(|e| e.code()),
            Some(Code::ResourceExhausted)
        );
        // The client's next call says every call below it has ended: a late duplicate of 1 is stale.
        let mut next = id(&[1; 16], 2);
        next.first_incomplete_seq_no = 2;
        assert_eq!(
            tracker.execute(&next, handler).await,
            Ok((7, Source::Executed))
        );
        let stale = tracker.execute(&id(&[1; 16], 1), handler).await;
        assert_eq!(stale, Err(ExecuteError::Stale(Stale::BelowWatermark)));
        assert_eq!(
            stale.err().and_then(|e| e.code()),
            Some(Code::FailedPrecondition)
        );
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(
            ExecuteError::<()>::Handler(()).code(),
            None,
            "a handler's error keeps its own status"
        );
    }
}
