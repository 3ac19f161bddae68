//! The chaos server: four backends of `chaos.Chaos` on loopback, each injecting the faults of the module docs
//! ([`super`]) at random from its own seeded RNG, and the last one restarted every few seconds.
//!
//! Every task is bounded: a call lives at most its `grpc-timeout` (capped at 10 s) plus 500 ms, a connection
//! after a graceful GOAWAY at most 10 s more, an abrupt close 2 s; a connection's calls are aborted with it,
//! and a backend's connections with each restart.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{timeout, Code, Status};
use h2::Reason;
use http::HeaderValue;
use prost::Message as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{paths, Item, Number, Rng, StreamRequest, Sum};
use crate::server_call::{h2_server_builder, ServerCall};

/// How many backends the server runs.
pub const BACKENDS: usize = 4;

/// What the server did, for its closing report.
#[derive(Debug, Default)]
pub struct Stats {
    /// Attempts (server streams) accepted.
    pub calls: AtomicU64,
    /// Connections accepted.
    pub connections: AtomicU64,
    /// RST_STREAM(REFUSED_STREAM) sent.
    pub refused: AtomicU64,
    /// Trailers-Only UNAVAILABLE sent.
    pub unavailable: AtomicU64,
    /// Of those, with a negative pushback.
    pub negative_pushback: AtomicU64,
    /// Graceful GOAWAYs started.
    pub graceful_goaway: AtomicU64,
    /// Abrupt GOAWAYs sent.
    pub abrupt_goaway: AtomicU64,
    /// Connections reset (SO_LINGER 0).
    pub tcp_reset: AtomicU64,
    /// Attempts delayed up to 300 ms.
    pub slow: AtomicU64,
    /// Attempts delayed 0.5 to 4 s.
    pub stalled: AtomicU64,
    /// Backend restarts.
    pub restarts: AtomicU64,
    /// Calls that ran past their deadline on the server and were dropped.
    pub server_timeouts: AtomicU64,
}

impl Stats {
    /// One line: `calls=N connections=N refused=N ...`.
    pub fn line(&self) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "calls={} connections={} refused={} unavailable={} negative_pushback={} graceful_goaway={} abrupt_goaway={} tcp_reset={} slow={} stalled={} restarts={} server_timeouts={}",
            g(&self.calls),
            g(&self.connections),
            g(&self.refused),
            g(&self.unavailable),
            g(&self.negative_pushback),
            g(&self.graceful_goaway),
            g(&self.abrupt_goaway),
            g(&self.tcp_reset),
            g(&self.slow),
            g(&self.stalled),
            g(&self.restarts),
            g(&self.server_timeouts),
        )
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The fault rates (module docs of [`super`]).
const P_REFUSE: f64 = 0.02;
const P_UNAVAILABLE: f64 = 0.10;
const P_GRACEFUL: f64 = 0.003;
const P_ABRUPT: f64 = 0.001;
const P_RESET: f64 = 0.001;
const P_SLOW: f64 = 0.20;
const MAX_SLOW_MS: u64 = 300;
const P_STALL: f64 = 0.005;

/// How one attempt goes wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    Refuse,
    /// Trailers-Only UNAVAILABLE with this `grpc-retry-pushback-ms`.
    Unavailable(i32),
    Graceful,
    /// Kill the connection (abrupt GOAWAY or reset) at point `at` (see [`Plan::at`]).
    Abrupt,
    Reset,
}

/// What one attempt does.
#[derive(Clone, Copy, Debug)]
struct Plan {
    fault: Fault,
    /// For a kill: 0 = before reading anything; otherwise after the request (unary, client streaming), or
    /// after `at - 1` response messages (server streaming, bidi).
    at: u32,
    /// A delay before the first response message.
    delay: Option<Duration>,
}

struct Backend {
    rng: Mutex<Rng>,
    stats: Arc<Stats>,
}

impl Backend {
    fn draw(&self) -> Plan {
        let Ok(mut rng) = self.rng.lock() else {
            return Plan {
                fault: Fault::None,
                at: 0,
                delay: None,
            };
        };
        let u = rng.unit();
        let mut edge = 0.0;
        let mut next = |p: f64| {
            edge += p;
            u < edge
        };
        let fault = if next(P_REFUSE) {
            Fault::Refuse
        } else if next(P_UNAVAILABLE) {
            let v = rng.unit();
            let pushback = if v < 0.05 {
                -(rng.range(1, 1000) as i32)
            } else if v < 0.15 {
                0
            } else {
                rng.range(1, 30) as i32
            };
            Fault::Unavailable(pushback)
        } else if next(P_GRACEFUL) {
            Fault::Graceful
        } else if next(P_ABRUPT) {
            Fault::Abrupt
        } else if next(P_RESET) {
            Fault::Reset
        } else {
            Fault::None
        };
        let at = rng.range(0, 4) as u32;
        let delay = if rng.unit() < P_STALL {
            Some(Duration::from_millis(rng.range(500, 4000)))
        } else if rng.unit() < P_SLOW {
            Some(Duration::from_millis(rng.range(1, MAX_SLOW_MS)))
        } else {
            None
        };
        Plan { fault, at, delay }
    }
}

/// How a call reaches its connection's task.
#[derive(Default)]
struct Signals {
    graceful: Notify,
    abrupt: Notify,
    reset: Notify,
}

/// Binds the four backends on free loopback ports and serves them in the background (for as long as the
/// runtime runs); returns their addresses.
pub async fn start(seed: u64, stats: Arc<Stats>) -> std::io::Result<Vec<SocketAddr>> {
    let mut addrs = Vec::new();
    for index in 0..BACKENDS {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        addrs.push(addr);
        let backend = Arc::new(Backend {
            rng: Mutex::new(Rng::new(
                seed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9),
            )),
            stats: stats.clone(),
        });
        let restarts = index == BACKENDS - 1;
        let rng = Rng::new(seed.wrapping_add(index as u64 * 7919));
        tokio::spawn(run_backend(listener, addr, backend, restarts, rng));
    }
    Ok(addrs)
}

async fn run_backend(
    listener: TcpListener,
    addr: SocketAddr,
    backend: Arc<Backend>,
    restarts: bool,
    mut rng: Rng,
) {
    let mut listener = Some(listener);
    loop {
        let Some(l) = listener.take() else {
            return;
        };
        let mut conns = JoinSet::new();
        let life = if restarts {
            Duration::from_millis(rng.range(2000, 5000))
        } else {
            Duration::MAX
        };
        let end = Instant::now().checked_add(life);
        let lifetime = async {
            match end {
                Some(end) => tokio::time::sleep_until(end).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(lifetime);
        loop {
            tokio::select! {
                accepted = l.accept() => {
                    if let Ok((tcp, _)) = accepted {
                        bump(&backend.stats.connections);
                        conns.spawn(serve_connection(tcp, backend.clone()));
                    }
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                () = &mut lifetime => break,
            }
        }
        // Restart: stop listening, drop every connection (a FIN without GOAWAY), listen again later.
        drop(l);
        conns.shutdown().await;
        bump(&backend.stats.restarts);
        tokio::time::sleep(Duration::from_millis(rng.range(100, 500))).await;
        for _ in 0..200 {
            match TcpListener::bind(addr).await {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        if listener.is_none() {
            eprintln!("chaos-server: cannot listen on {addr} again; the backend stays down");
            return;
        }
    }
}

async fn serve_connection(tcp: TcpStream, backend: Arc<Backend>) {
    let _ = tcp.set_nodelay(true);
    // A second descriptor of the same socket, kept to set SO_LINGER 0 on it when the connection is to be
    // reset: the socket closes (with an RST then) when both descriptors are closed.
    let (tcp, dup) = match tcp.into_std().and_then(|s| {
        let dup = s.try_clone()?;
        Ok((TcpStream::from_std(s)?, dup))
    }) {
        Ok(pair) => pair,
        Err(_) => return,
    };
    let handshake = h2_server_builder().handshake::<_, Bytes>(tcp);
    let Ok(Ok(mut conn)) = tokio::time::timeout(Duration::from_secs(5), handshake).await else {
        return;
    };
    let signals = Arc::new(Signals::default());
    let mut calls = JoinSet::new();
    let mut graceful_until: Option<Instant> = None;
    loop {
        let graceful_end = async {
            match graceful_until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            next = conn.accept() => match next {
                Some(Ok((request, respond))) => {
                    let call = ServerCall::new(request, respond, SocketAddr::from(([127, 0, 0, 1], 0)));
                    calls.spawn(handle(call, backend.clone(), signals.clone()));
                }
                _ => break,
            },
            Some(_) = calls.join_next(), if !calls.is_empty() => {}
            () = signals.graceful.notified(), if graceful_until.is_none() => {
                conn.graceful_shutdown();
                graceful_until = Some(Instant::now() + Duration::from_secs(10));
            }
            () = signals.abrupt.notified() => {
                conn.abrupt_shutdown(Reason::NO_ERROR);
                let _ = tokio::time::timeout(Duration::from_secs(2), poll_fn(|cx| conn.poll_closed(cx))).await;
                break;
            }
            () = signals.reset.notified() => {
                let _ = socket2::SockRef::from(&dup).set_linger(Some(Duration::ZERO));
                break;
            }
            () = graceful_end => break,
        }
    }
    // The connection first (its streams see the end), then the second descriptor (the RST, if set), then the
    // calls.
    drop(conn);
    drop(dup);
    calls.shutdown().await;
}

async fn handle(mut call: ServerCall, backend: Arc<Backend>, signals: Arc<Signals>) {
    bump(&backend.stats.calls);
    let limit = call
        .request_headers
        .get("grpc-timeout")
        .and_then(|v| timeout::decode(v.as_bytes()))
        .unwrap_or(Duration::from_secs(10))
        .min(Duration::from_secs(10))
        + Duration::from_millis(500);
    let plan = backend.draw();
    let stats = &backend.stats;
    match plan.fault {
        Fault::Refuse => {
            bump(&stats.refused);
            call.reset(Reason::REFUSED_STREAM);
            return;
        }
        Fault::Graceful => {
            bump(&stats.graceful_goaway);
            signals.graceful.notify_one();
        }
        _ => {}
    }
    match plan.delay {
        Some(d) if d.as_millis() > u128::from(MAX_SLOW_MS) => bump(&stats.stalled),
        Some(_) => bump(&stats.slow),
        None => {}
    }
    let mut chaos = Chaos {
        plan,
        signals,
        stats: stats.clone(),
        sent: 0,
    };
    let served = tokio::time::timeout(limit, chaos.serve(&mut call)).await;
    match served {
        Ok(Ok(())) => call.finish(&Status::new(Code::Ok, "")),
        Ok(Err(Some(status))) => call.finish(&status),
        // The call was ended (or the stream broke) already.
        Ok(Err(None)) => call.mark_ended(),
        Err(_) => {
            bump(&stats.server_timeouts);
            call.reset(Reason::CANCEL);
        }
    }
}

/// One attempt being served under its plan.
struct Chaos {
    plan: Plan,
    signals: Arc<Signals>,
    stats: Arc<Stats>,
    /// Response messages sent so far.
    sent: u32,
}

/// `Err(Some(status))` ends the call with a status; `Err(None)` means it is over already.
type Served = Result<(), Option<Status>>;

impl Chaos {
    async fn serve(&mut self, call: &mut ServerCall) -> Served {
        self.maybe_kill(0).await;
        let path = call.path.clone();
        let served = self.dispatch(call, &path).await;
        // A kill planned past the call's last message happens at its end.
        if served.is_ok() {
            self.maybe_kill(u32::MAX).await;
        }
        served
    }

    async fn dispatch(&mut self, call: &mut ServerCall, path: &str) -> Served {
        match path {
            paths::UNARY => {
                let request = self.first(call).await?.ok_or_else(missing)?;
                self.maybe_kill(1).await;
                self.before_response().await;
                self.send(call, &request).await
            }
            paths::SERVER_STREAM => {
                let request = self.first(call).await?.ok_or_else(missing)?;
                let request = StreamRequest::decode(request).map_err(decode_error)?;
                self.before_response().await;
                for index in 0..request.count.min(10_000) {
                    let item = Item {
                        index,
                        payload: request.payload.clone(),
                    };
                    self.send(call, &item.encode_to_vec()).await?;
                }
                Ok(())
            }
            paths::CLIENT_STREAM => {
                let mut sum = Sum::default();
                let mut first = true;
                loop {
                    let next = if first {
                        first = false;
                        self.first(call).await?
                    } else {
                        call.next_message()
                            .await
                            .map_err(|_| None)?
                            .map(|m| m.payload)
                    };
                    let Some(m) = next else { break };
                    let n = Number::decode(m).map_err(decode_error)?;
                    sum.count += 1;
                    sum.sum = sum.sum.wrapping_add(n.value);
                    sum.padding += n.padding.len() as u64;
                }
                self.maybe_kill(1).await;
                self.before_response().await;
                self.send(call, &sum.encode_to_vec()).await
            }
            paths::BIDI => {
                let mut next = self.first(call).await?;
                while let Some(m) = next {
                    if self.sent == 0 {
                        self.before_response().await;
                    }
                    self.send(call, &m).await?;
                    next = call
                        .next_message()
                        .await
                        .map_err(|_| None)?
                        .map(|m| m.payload);
                }
                Ok(())
            }
            other => Err(Some(Status::new(
                Code::Unimplemented,
                format!("no method {other}"),
            ))),
        }
    }

    /// Reads the first request message (`None` at a half-close without any), and fails the call there when
    /// the plan says UNAVAILABLE.
    async fn first(&mut self, call: &mut ServerCall) -> Result<Option<Bytes>, Option<Status>> {
        let first = call.next_message().await.map_err(|_| None)?;
        if let Fault::Unavailable(pushback) = self.plan.fault {
            bump(&self.stats.unavailable);
            if pushback < 0 {
                bump(&self.stats.negative_pushback);
            }
            let mut r = http::Response::new(());
            let h = r.headers_mut();
            h.insert("content-type", HeaderValue::from_static("application/grpc"));
            h.insert("grpc-status", HeaderValue::from_static("14"));
            h.insert("grpc-message", HeaderValue::from_static("chaos"));
            if let Ok(v) = HeaderValue::try_from(pushback.to_string()) {
                h.insert("grpc-retry-pushback-ms", v);
            }
            let _ = call.respond_mut().send_response(r, true);
            call.mark_ended();
            return Err(None);
        }
        Ok(first.map(|m| m.payload))
    }

    async fn before_response(&mut self) {
        if let Some(d) = self.plan.delay {
            tokio::time::sleep(d).await;
        }
    }

    async fn send(&mut self, call: &mut ServerCall, message: &[u8]) -> Served {
        self.maybe_kill(self.sent + 1).await;
        call.send_message(message, false).await.map_err(|_| None)?;
        self.sent += 1;
        Ok(())
    }

    /// Kills the connection if the plan says so at point `at` or before (points come in increasing order, so
    /// the first one at or past the planned point fires), and then never returns: the call's task is aborted
    /// with its connection.
    async fn maybe_kill(&mut self, at: u32) {
        if at < self.plan.at {
            return;
        }
        match self.plan.fault {
            Fault::Abrupt => {
                bump(&self.stats.abrupt_goaway);
                self.signals.abrupt.notify_one();
            }
            Fault::Reset => {
                bump(&self.stats.tcp_reset);
                self.signals.reset.notify_one();
            }
            _ => return,
        }
        std::future::pending::<()>().await;
    }
}

fn missing() -> Option<Status> {
    Some(Status::new(
        Code::InvalidArgument,
        "expected a request message",
    ))
}

fn decode_error(e: prost::DecodeError) -> Option<Status> {
    Some(Status::new(
        Code::InvalidArgument,
        format!("bad request: {e}"),
    ))
}
