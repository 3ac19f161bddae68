//! Backends for the A6 scenarios, in their own process (`grpc-bench backends ...`) so that their CPU time is
//! not the client's: `count` h2 servers on loopback answering every call after a latency drawn from a seeded
//! distribution, or with UNAVAILABLE at a seeded rate, or never.
//!
//! Control is line-based: the process prints `listening on ADDR,ADDR,...`; a `stats` line on its stdin makes
//! it print `requests N,N,...` (calls received per backend, every attempt counts); `reset` zeroes the
//! counters; end of stdin stops it.

use std::collections::BinaryHeap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use grpc_retry::{Rng, SplitMix64};

/// How the backends answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Profile {
    /// At once.
    Fast,
    /// After a lognormal latency with this median and shape, or, with probability `straggler_p`, after
    /// `straggler` (the hedging scenario's "2 % stragglers at 50 ms").
    Tail {
        median: Duration,
        sigma: f64,
        straggler_p: f64,
        straggler: Duration,
    },
    /// UNAVAILABLE (Trailers-Only) with probability `p`, else OK at once.
    Fail { p: f64 },
    /// Never: the call stays open until the client ends it.
    Hold,
}

/// The hedging scenario's distribution: lognormal around 1 ms, 2 % stragglers at 50 ms.
pub(crate) const TAIL: Profile = Profile::Tail {
    median: Duration::from_millis(1),
    sigma: 0.25,
    straggler_p: 0.02,
    straggler: Duration::from_millis(50),
};

impl Profile {
    fn arg(&self) -> String {
        match self {
            Profile::Fast => "fast".into(),
            Profile::Tail {
                median,
                sigma,
                straggler_p,
                straggler,
            } => format!(
                "tail:{}:{sigma}:{straggler_p}:{}",
                median.as_micros(),
                straggler.as_micros()
            ),
            Profile::Fail { p } => format!("fail:{p}"),
            Profile::Hold => "hold".into(),
        }
    }

    fn parse(s: &str) -> Result<Profile, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let num = |i: usize| -> Result<f64, String> {
            parts
                .get(i)
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("bad profile {s:?}"))
        };
        match parts[0] {
            "fast" => Ok(Profile::Fast),
            "hold" => Ok(Profile::Hold),
            "fail" => Ok(Profile::Fail { p: num(1)? }),
            "tail" => Ok(Profile::Tail {
                median: Duration::from_micros(num(1)? as u64),
                sigma: num(2)?,
                straggler_p: num(3)?,
                straggler: Duration::from_micros(num(4)? as u64),
            }),
            _ => Err(format!("unknown profile {s:?}")),
        }
    }
}

/// A uniform draw in [0, 1).
fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal draw (Box-Muller).
fn normal(rng: &mut SplitMix64) -> f64 {
    let u1 = uniform(rng).max(f64::MIN_POSITIVE);
    let u2 = uniform(rng);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// What one call gets.
enum Answer {
    Ok(Option<Duration>),
    Unavailable,
    Never,
}

fn draw(profile: Profile, rng: &mut SplitMix64) -> Answer {
    match profile {
        Profile::Fast => Answer::Ok(None),
        Profile::Hold => Answer::Never,
        Profile::Fail { p } => {
            if uniform(rng) < p {
                Answer::Unavailable
            } else {
                Answer::Ok(None)
            }
        }
        Profile::Tail {
            median,
            sigma,
            straggler_p,
            straggler,
        } => {
            if uniform(rng) < straggler_p {
                Answer::Ok(Some(straggler))
            } else {
                let factor = (sigma * normal(rng)).exp();
                Answer::Ok(Some(median.mul_f64(factor)))
            }
        }
    }
}

/// Fires wake-ups at their instants from one thread, to ~0.1 ms (tokio's timer has 1 ms granularity,
/// too coarse for a 1 ms body).
#[derive(Clone)]
struct PreciseTimer {
    tx: std::sync::mpsc::Sender<(Instant, tokio::sync::oneshot::Sender<()>)>,
}

struct Due(Instant, tokio::sync::oneshot::Sender<()>);

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.0.cmp(&self.0) // earliest first in the max-heap
    }
}

impl PreciseTimer {
    fn start() -> PreciseTimer {
        let (tx, rx) = std::sync::mpsc::channel::<(Instant, tokio::sync::oneshot::Sender<()>)>();
        std::thread::spawn(move || {
            let mut heap: BinaryHeap<Due> = BinaryHeap::new();
            loop {
                let now = Instant::now();
                while heap.peek().is_some_and(|d| d.0 <= now) {
                    if let Some(Due(_, tx)) = heap.pop() {
                        let _ = tx.send(());
                    }
                }
                let next = match heap.peek() {
                    Some(d) => rx.recv_timeout(d.0.saturating_duration_since(now)),
                    None => rx
                        .recv()
                        .map_err(|_| std::sync::mpsc::RecvTimeoutError::Disconnected),
                };
                match next {
                    Ok((at, tx)) => heap.push(Due(at, tx)),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
        });
        PreciseTimer { tx }
    }

    async fn sleep(&self, d: Duration) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.tx.send((Instant::now() + d, tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// `grpc-bench backends --profile=P --count=N --seed=S`: serves until stdin ends.
pub(crate) fn serve(args: &[String]) -> Result<(), String> {
    let get = |name: &str| {
        args.iter()
            .find_map(|a| a.strip_prefix(&format!("--{name}=")))
            .ok_or_else(|| format!("backends needs --{name}="))
    };
    let profile = Profile::parse(get("profile")?)?;
    let count: usize = get("count")?.parse().map_err(|_| "bad --count")?;
    let seed: u64 = get("seed")?.parse().map_err(|_| "bad --seed")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let timer = PreciseTimer::start();
        let mut addrs = Vec::new();
        let mut counters = Vec::new();
        for i in 0..count {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| e.to_string())?;
            addrs.push(listener.local_addr().map_err(|e| e.to_string())?);
            let requests = Arc::new(AtomicU64::new(0));
            counters.push(requests.clone());
            let rng = Arc::new(parking_lot::Mutex::new(SplitMix64::new(
                seed.wrapping_mul(1_000_003).wrapping_add(i as u64),
            )));
            let timer = timer.clone();
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let _ = tcp.set_nodelay(true);
                    let (requests, rng, timer) = (requests.clone(), rng.clone(), timer.clone());
                    tokio::spawn(connection(tcp, profile, requests, rng, timer));
                }
            });
        }
        let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
        println!("listening on {}", list.join(","));
        let _ = std::io::stdout().flush();
        // Control on stdin, read on a blocking thread.
        let control = tokio::task::spawn_blocking(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                match line.trim() {
                    "stats" => {
                        let counts: Vec<String> = counters
                            .iter()
                            .map(|c| c.load(Ordering::Relaxed).to_string())
                            .collect();
                        println!("requests {}", counts.join(","));
                        let _ = std::io::stdout().flush();
                    }
                    "reset" => {
                        for c in &counters {
                            c.store(0, Ordering::Relaxed);
                        }
                        println!("reset");
                        let _ = std::io::stdout().flush();
                    }
                    _ => {}
                }
            }
        });
        let _ = control.await;
        Ok(())
    })
}

async fn connection(
    tcp: tokio::net::TcpStream,
    profile: Profile,
    requests: Arc<AtomicU64>,
    rng: Arc<parking_lot::Mutex<SplitMix64>>,
    timer: PreciseTimer,
) {
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(1 << 20)
        .initial_connection_window_size(16 << 20)
        .max_concurrent_streams(20_000);
    let Ok(mut conn) = builder.handshake::<_, Bytes>(tcp).await else {
        return;
    };
    while let Some(Ok((request, mut respond))) = conn.accept().await {
        requests.fetch_add(1, Ordering::Relaxed);
        let answer = draw(profile, &mut rng.lock());
        let timer = timer.clone();
        tokio::spawn(async move {
            let mut body = request.into_body();
            while let Some(Ok(chunk)) = body.data().await {
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            let delay = match answer {
                Answer::Never => {
                    // Held until the client resets the stream.
                    let _ = std::future::poll_fn(|cx| respond.poll_reset(cx)).await;
                    return;
                }
                Answer::Unavailable => {
                    let response = http::Response::builder()
                        .header("content-type", "application/grpc")
                        .header("grpc-status", "14")
                        .header("grpc-message", "injected")
                        .body(())
                        .expect("static response");
                    let _ = respond.send_response(response, true);
                    return;
                }
                Answer::Ok(delay) => delay,
            };
            if let Some(d) = delay {
                tokio::select! {
                    _ = timer.sleep(d) => {}
                    _ = std::future::poll_fn(|cx| respond.poll_reset(cx)) => return,
                }
            }
            let response = http::Response::builder()
                .header("content-type", "application/grpc")
                .body(())
                .expect("static response");
            let Ok(mut stream) = respond.send_response(response, false) else {
                return;
            };
            // One empty message: a default SimpleResponse.
            let _ = stream.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), false);
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            let _ = stream.send_trailers(trailers);
        });
    }
}

/// A running backends process.
pub(crate) struct Backends {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Where the backends listen.
    pub(crate) addrs: Vec<SocketAddr>,
}

impl Backends {
    /// Starts `count` backends with `profile` in a child process.
    pub(crate) fn spawn(profile: Profile, count: usize, seed: u64) -> Result<Backends, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .arg("backends")
            .arg(format!("--profile={}", profile.arg()))
            .arg(format!("--count={count}"))
            .arg(format!("--seed={seed}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the backends: {e}"))?;
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut line = String::new();
        stdout.read_line(&mut line).map_err(|e| e.to_string())?;
        let addrs = line
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| format!("the backends said {line:?}"))?
            .split(',')
            .map(|a| a.parse().map_err(|_| format!("bad address {a:?}")))
            .collect::<Result<Vec<SocketAddr>, String>>()?;
        Ok(Backends {
            child,
            stdin,
            stdout,
            addrs,
        })
    }

    fn ask(&mut self, what: &str) -> Result<String, String> {
        let stdin = self.stdin.as_mut().ok_or("backends stopped")?;
        writeln!(stdin, "{what}").map_err(|e| e.to_string())?;
        stdin.flush().map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        Ok(line.trim().to_owned())
    }

    /// Calls received so far, all backends together (every attempt counts).
    pub(crate) fn requests(&mut self) -> Result<u64, String> {
        let line = self.ask("stats")?;
        let list = line
            .strip_prefix("requests ")
            .ok_or_else(|| format!("the backends said {line:?}"))?;
        Ok(list.split(',').filter_map(|n| n.parse::<u64>().ok()).sum())
    }

    /// Zeroes the counters.
    pub(crate) fn reset(&mut self) -> Result<(), String> {
        self.ask("reset").map(|_| ())
    }

    /// The `ipv4:` target of every backend.
    pub(crate) fn target(&self) -> String {
        let list: Vec<String> = self.addrs.iter().map(ToString::to_string).collect();
        format!("ipv4:{}", list.join(","))
    }
}

impl Drop for Backends {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
