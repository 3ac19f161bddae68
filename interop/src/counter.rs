//! A non-idempotent counter service for exactly-once tests: `/exactly_once.Counter/Increment` adds one to a
//! counter and answers the new value (8 bytes, big-endian). Several backends may share one counter and one
//! result tracker (`grpc-exactly-once`), so that tests can count executions across them.
//!
//! With a tracker, a request that carries `exactly-once-request-id-bin` runs through
//! `ResultTracker::execute`; without one (or without the header) every attempt executes. Faults are injected
//! after processing, into the attempt that executed (a replayed answer is never failed): with a seeded
//! probability the answer is replaced by UNAVAILABLE, and a backend may be slow (it holds the request while
//! executing it). Every execution is recorded per request id, so a test can assert that none ran twice.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Code, Status};
use grpc_exactly_once::{ExecuteError, RequestId, ResultTracker, Source, HEADER};
use parking_lot::Mutex;
use tokio::net::TcpListener;

use crate::server_call::{h2_server_builder, ServerCall};

/// The method.
pub const INCREMENT: &str = "/exactly_once.Counter/Increment";

/// What the backends of one test share: the counter, the executions per request, and the tracker.
#[derive(Clone)]
pub struct Shared {
    counter: Arc<AtomicU64>,
    executions: Arc<Mutex<HashMap<(Bytes, u64), u32>>>,
    tracker: Option<ResultTracker<Bytes>>,
}

impl Shared {
    /// A counter at 0; with `tracker`, requests with a request id execute at most once.
    pub fn new(tracker: Option<ResultTracker<Bytes>>) -> Shared {
        Shared {
            counter: Arc::default(),
            executions: Arc::default(),
            tracker,
        }
    }

    /// The counter: how many times an increment executed.
    pub fn count(&self) -> u64 {
        self.counter.load(Ordering::SeqCst)
    }

    /// How many request ids executed more than once.
    pub fn double_executions(&self) -> usize {
        self.executions.lock().values().filter(|&&n| n > 1).count()
    }

    /// The tracker, if any.
    pub fn tracker(&self) -> Option<&ResultTracker<Bytes>> {
        self.tracker.as_ref()
    }
}

/// How one backend misbehaves.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// The probability that an executed increment answers UNAVAILABLE instead of its value.
    pub fail_after_processing: f64,
    /// How long an execution takes.
    pub delay: Duration,
    /// The fault RNG's seed.
    pub seed: u64,
}

/// One counter backend on a loopback port.
pub struct CounterServer {
    /// Where it listens.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CounterServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CounterServer {
    /// Starts a backend of `shared` with `faults`.
    pub async fn start(shared: Shared, faults: Faults) -> std::io::Result<CounterServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let rng = Arc::new(Mutex::new(faults.seed | 1));
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((tcp, peer)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let (shared, rng) = (shared.clone(), rng.clone());
                connections.spawn(async move {
                    let Ok(mut conn) = h2_server_builder().handshake::<_, Bytes>(tcp).await else {
                        return;
                    };
                    let mut calls = tokio::task::JoinSet::new();
                    while let Some(Ok((request, respond))) = conn.accept().await {
                        let call = ServerCall::new(request, respond, peer);
                        calls.spawn(handle(call, shared.clone(), faults, rng.clone()));
                    }
                });
            }
        });
        Ok(CounterServer { addr, task })
    }
}

/// xorshift64: a uniform draw in [0, 1).
fn draw(rng: &Mutex<u64>) -> f64 {
    let mut x = rng.lock();
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    (*x >> 11) as f64 / (1u64 << 53) as f64
}

/// Serves one Increment call with `shared` and no faults (the interop server's counter).
pub async fn serve(call: ServerCall, shared: Shared) {
    handle(call, shared, Faults::default(), Arc::new(Mutex::new(1))).await;
}

async fn handle(mut call: ServerCall, shared: Shared, faults: Faults, rng: Arc<Mutex<u64>>) {
    if call.path != INCREMENT {
        call.finish(&Status::new(Code::Unimplemented, "no such method"));
        return;
    }
    // The request message (ignored: an increment is always by one).
    while let Ok(Some(_)) = call.next_message().await {}
    let id = call
        .request_headers
        .get(HEADER)
        .and_then(|v| grpc_channel::metadata::decode_bin(v.as_bytes()).ok())
        .and_then(|b| RequestId::from_bytes(&b));
    let execute = || {
        let shared = shared.clone();
        let id = id.clone();
        async move {
            tokio::time::sleep(faults.delay).await;
            let value = shared.counter.fetch_add(1, Ordering::SeqCst) + 1;
            if let Some(id) = &id {
                *shared
                    .executions
                    .lock()
                    .entry((id.client_id.clone(), id.seq_no))
                    .or_default() += 1;
            }
            Ok::<_, Status>(Bytes::copy_from_slice(&value.to_be_bytes()))
        }
    };
    let answer = match (&shared.tracker, &id) {
        (Some(tracker), Some(id)) => match tracker.execute(id, execute).await {
            Ok((value, source)) => Ok((value, source)),
            Err(ExecuteError::Handler(status)) => Err(status),
            // Stale (FAILED_PRECONDITION) or refused (INVALID_ARGUMENT, RESOURCE_EXHAUSTED): never ran.
            Err(refused) => Err(Status::new(
                refused.code().unwrap_or(Code::Internal),
                refused.to_string(),
            )),
        },
        _ => execute().await.map(|v| (v, Source::Executed)),
    };
    match answer {
        Ok((_, Source::Executed)) if draw(&rng) < faults.fail_after_processing => {
            call.finish(&Status::new(Code::Unavailable, "injected after processing"));
        }
        Ok((value, _)) => {
            if call.send_headers().is_ok() && call.send_message(&value, false).await.is_ok() {
                call.finish(&Status::new(Code::Ok, ""));
            }
        }
        Err(status) => call.finish(&status),
    }
}
