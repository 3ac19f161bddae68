//! The chaos client: three channels (retry policy with throttling, hedging policy, no policy) over
//! `round_robin` across the chaos server's four backends, calls of all four shapes in flight concurrently, and
//! the checks of the module docs ([`super`]). [`run`] prints a table of outcomes by status and flavour and ends
//! with one line:
//!
//! `chaos: calls=N ok=N failed=N lost=0 panics=0 late=0 rss_kib=START/END fds=BEFORE/AFTER tasks=BEFORE/AFTER`

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use grpc_channel::{Channel, Request, Status};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::stalls::StallProbe;
use super::{paths, Item, Number, Rng, StreamRequest, Sum};

/// A call ending more than this after its deadline is late.
pub const LATE_AFTER: Duration = Duration::from_millis(100);
/// A call still running this long after its deadline gives its concurrency slot back (it is still waited
/// for, and counted late or lost).
const OVERDUE_AFTER: Duration = Duration::from_secs(2);
/// Once the last call started, how long the others get to end (the longest deadline is 3 s).
const DRAIN_GRACE: Duration = Duration::from_secs(13);
/// The share of the calls before RSS START is taken.
const WARM_UP: f64 = 0.20;
/// fds and tasks may exceed their baseline by this much after the channels are dropped.
pub const FD_TOLERANCE: usize = 2;
/// See [`FD_TOLERANCE`].
pub const TASK_TOLERANCE: usize = 2;
/// The absolute part of the RSS rule: `END ≤ START + max(START / 2, 32 MiB)`.
const RSS_SLACK_KIB: u64 = 32 * 1024;
/// The lowest OK share of the flavours with a policy, and of the one without (module docs of [`super`]).
pub const MIN_OK_WITH_POLICY: f64 = 0.97;
/// See [`MIN_OK_WITH_POLICY`].
pub const MIN_OK_WITHOUT_POLICY: f64 = 0.80;

const SERVICE: &str = r#"[{"service":"chaos.Chaos"}]"#;

/// The flavours: name, the service config's method part and its retryThrottling (if any), and whether it has
/// a policy.
fn flavours() -> [(&'static str, String, bool); 3] {
    let lb = r#""loadBalancingConfig":[{"round_robin":{}}]"#;
    [
        (
            "retry",
            format!(
                r#"{{{lb},"methodConfig":[{{"name":{SERVICE},"retryPolicy":{{"maxAttempts":4,"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}}}],"retryThrottling":{{"maxTokens":100,"tokenRatio":0.5}}}}"#
            ),
            true,
        ),
        (
            "hedging",
            format!(
                r#"{{{lb},"methodConfig":[{{"name":{SERVICE},"hedgingPolicy":{{"maxAttempts":4,"hedgingDelay":"0.02s","nonFatalStatusCodes":["UNAVAILABLE"]}}}}]}}"#
            ),
            true,
        ),
        ("none", format!(r#"{{{lb}}}"#), false),
    ]
}

/// The call shapes.
const SHAPES: [&str; 4] = ["unary", "server_stream", "client_stream", "bidi"];

/// What the soak does.
#[derive(Clone, Debug)]
pub struct Config {
    /// The backends' ports on 127.0.0.1.
    pub ports: Vec<u16>,
    /// How many calls in all.
    pub calls: u64,
    /// How many in flight at once.
    pub concurrency: usize,
    /// Seeds the calls' shapes, sizes and deadlines.
    pub seed: u64,
    /// The longest the calls may take to start, all told (a hang stops the soak instead of stalling it).
    pub max_duration: Duration,
}

/// How one call ended.
enum Outcome {
    Ok,
    /// OK, with a wrong response.
    Bad(String),
    Failed(Status),
}

/// Channel defects the soak has found, recognised by the status they end calls with: (code, a fragment of the
/// message, what happened). Each has a reproduction in `interop/tests/chaos_repro.rs`.
const KNOWN_DEFECTS: &[(&str, &str, &str)] = &[(
    "INTERNAL",
    "stream reset by server (NO_ERROR)",
    "the server answered before the request ended (Trailers-Only UNAVAILABLE on a client-streaming call) and \
     h2 followed with RST_STREAM(NO_ERROR); the attempt's write failed on the reset and reported it \
     (NO_ERROR -> INTERNAL, not retryable) instead of the response h2 had already received \
     (Attempt::write_failed; repro: interop/tests/chaos_repro.rs, \
     early_trailers_only_then_rst_no_error_keeps_the_servers_status)",
)];

/// The outcome key of the table.
fn key(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Ok => "OK",
        Outcome::Bad(_) => "OK_BAD_PAYLOAD",
        Outcome::Failed(s) => s.code().name(),
    }
}

#[derive(Default)]
struct Tally {
    /// (outcome, flavour, shape) → calls.
    counts: BTreeMap<(&'static str, usize, usize), u64>,
    /// (outcome, flavour) → a few distinct messages.
    samples: BTreeMap<(&'static str, usize), Vec<String>>,
    /// The most a call ended after its deadline.
    max_overrun: Duration,
    /// The first late calls: when each ended, and what it was (flavour, shape, outcome, how late).
    late_samples: Vec<(Instant, String)>,
    /// Index in [`KNOWN_DEFECTS`] → calls.
    defects: BTreeMap<usize, u64>,
}

#[derive(Default)]
struct Ctx {
    tally: Mutex<Tally>,
    ended: AtomicU64,
    late: AtomicU64,
    overdue: AtomicU64,
}

impl Ctx {
    fn record(&self, flavour: usize, shape: usize, outcome: Outcome, overrun: Option<Duration>) {
        let k = key(&outcome);
        if let Ok(mut t) = self.tally.lock() {
            *t.counts.entry((k, flavour, shape)).or_default() += 1;
            let message = match &outcome {
                Outcome::Ok => None,
                Outcome::Bad(m) => Some(format!("{}: {m}", SHAPES[shape])),
                Outcome::Failed(s) => Some(format!("{}: {}", SHAPES[shape], s.message())),
            };
            if let Outcome::Failed(status) = &outcome {
                for (i, (code, fragment, _)) in KNOWN_DEFECTS.iter().enumerate() {
                    if k == *code && status.message().contains(fragment) {
                        *t.defects.entry(i).or_default() += 1;
                    }
                }
            }
            if let Some(m) = message {
                let samples = t.samples.entry((k, flavour)).or_default();
                if samples.len() < 4 && !samples.contains(&m) {
                    samples.push(m);
                }
            }
            if let Some(o) = overrun {
                t.max_overrun = t.max_overrun.max(o);
                if o > LATE_AFTER && t.late_samples.len() < 8 {
                    let what = match &outcome {
                        Outcome::Ok => "OK".to_owned(),
                        Outcome::Bad(m) => format!("bad: {m}"),
                        Outcome::Failed(s) => format!("{:?}: {}", s.code(), s.message()),
                    };
                    let flavour = ["retry", "hedging", "none"].get(flavour).unwrap_or(&"?");
                    t.late_samples.push((
                        Instant::now(),
                        format!(
                            "{flavour} {} {} ms late: {what}",
                            SHAPES[shape],
                            o.as_millis()
                        ),
                    ));
                }
            }
        }
        self.ended.fetch_add(1, Ordering::SeqCst);
    }
}

/// Counts every panic in the process, the channel's own tasks included.
static PANICS: AtomicU64 = AtomicU64::new(0);

fn install_panic_counter() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
}

/// Runs the soak and prints the report; returns whether every check passed.
pub fn run(config: Config) -> bool {
    install_panic_counter();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("chaos-client: cannot start a runtime: {e}");
            return false;
        }
    };
    let ok = runtime.block_on(soak(config));
    runtime.shutdown_timeout(Duration::from_secs(2));
    ok
}

/// A stream of the items of an iterator, for `client_streaming`.
struct IterStream<I>(I);

impl<I: Iterator + Unpin> futures_core::Stream for IterStream<I> {
    type Item = I::Item;

    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<I::Item>> {
        Poll::Ready(self.0.next())
    }
}

/// A payload: 85 % up to 1 KiB, 13 % up to 32 KiB, 2 % up to 256 KiB (several DATA frames, and flow control
/// on the larger calls), a pattern that differs per call.
fn payload(rng: &mut Rng) -> Bytes {
    let u = rng.unit();
    let len = if u < 0.85 {
        rng.range(0, 1024)
    } else if u < 0.98 {
        rng.range(1025, 32 * 1024)
    } else {
        rng.range(32 * 1024 + 1, 256 * 1024)
    } as usize;
    let seed = rng.next_u64();
    (0..len)
        .map(|i| (seed.wrapping_add(i as u64).wrapping_mul(0x9e37_79b9) >> 24) as u8)
        .collect::<Vec<u8>>()
        .into()
}

async fn unary(channel: &Channel, rng: &mut Rng, timeout: Duration) -> Outcome {
    let sent = payload(rng);
    let request = Request::new(sent.clone()).with_timeout(timeout);
    match channel.unary_raw(paths::UNARY, request).await {
        Ok(r) if *r.message() == sent => Outcome::Ok,
        Ok(r) => Outcome::Bad(format!(
            "echo of {} bytes is {} bytes or differs",
            sent.len(),
            r.message().len()
        )),
        Err(s) => Outcome::Failed(s),
    }
}

async fn server_stream(channel: &Channel, rng: &mut Rng, timeout: Duration) -> Outcome {
    let count = rng.range(1, 20) as u32;
    let sent = payload(rng);
    let request = Request::new(StreamRequest {
        count,
        payload: sent.clone(),
    })
    .with_timeout(timeout);
    let mut stream = match channel
        .server_streaming::<StreamRequest, Item>(paths::SERVER_STREAM, request)
        .await
    {
        Ok(r) => r.into_message(),
        Err(s) => return Outcome::Failed(s),
    };
    let mut next = 0u32;
    loop {
        match stream.message().await {
            Ok(Some(item)) => {
                if item.index != next || item.payload != sent {
                    return Outcome::Bad(format!(
                        "item {next} came as index {} with {} bytes (sent {})",
                        item.index,
                        item.payload.len(),
                        sent.len()
                    ));
                }
                next += 1;
            }
            Ok(None) if next == count => return Outcome::Ok,
            Ok(None) => return Outcome::Bad(format!("OK after {next} of {count} items")),
            Err(s) => return Outcome::Failed(s),
        }
    }
}

async fn client_stream(channel: &Channel, rng: &mut Rng, timeout: Duration) -> Outcome {
    // A third of the calls stream many small messages: the server's early answer (UNAVAILABLE after the
    // first message) then races with the client's writes.
    let many = rng.unit() < 1.0 / 3.0;
    let count = if many {
        rng.range(50, 300)
    } else {
        rng.range(1, 20)
    } as u32;
    let numbers: Vec<Number> = (0..count)
        .map(|_| Number {
            value: rng.next_u64() >> 8,
            padding: if many || rng.unit() < 0.5 {
                Bytes::new()
            } else {
                payload(rng)
            },
        })
        .collect();
    let expected = Sum {
        count,
        sum: numbers.iter().fold(0u64, |a, n| a.wrapping_add(n.value)),
        padding: numbers.iter().map(|n| n.padding.len() as u64).sum(),
    };
    let request = Request::new(IterStream(numbers.into_iter())).with_timeout(timeout);
    match channel
        .client_streaming::<Number, Sum, _>(paths::CLIENT_STREAM, request)
        .await
    {
        Ok(r) if *r.message() == expected => Outcome::Ok,
        Ok(r) => Outcome::Bad(format!("sum {:?}, expected {expected:?}", r.message())),
        Err(s) => Outcome::Failed(s),
    }
}

async fn bidi(channel: &Channel, rng: &mut Rng, timeout: Duration) -> Outcome {
    let rounds = rng.range(1, 8);
    let request = Request::new(()).with_timeout(timeout);
    let (mut tx, mut rx) = match channel.streaming_raw(paths::BIDI, request).await {
        Ok(halves) => halves,
        Err(s) => return Outcome::Failed(s),
    };
    for round in 0..rounds {
        let sent = payload(rng);
        if tx.send(sent.clone()).await.is_err() {
            return status_after_send_error(&mut rx, "a send").await;
        }
        match rx.message().await {
            Ok(Some(m)) if m == sent => {}
            Ok(Some(m)) => {
                return Outcome::Bad(format!(
                    "round {round}: echo of {} bytes is {} bytes or differs",
                    sent.len(),
                    m.len()
                ))
            }
            Ok(None) => return Outcome::Bad(format!("OK after {round} of {rounds} echoes")),
            Err(s) => return Outcome::Failed(s),
        }
    }
    if tx.finish().await.is_err() {
        return status_after_send_error(&mut rx, "the half-close").await;
    }
    match rx.message().await {
        Ok(None) => Outcome::Ok,
        Ok(Some(_)) => Outcome::Bad("a message after the last echo".to_owned()),
        Err(s) => Outcome::Failed(s),
    }
}

/// The call's status, from the receiving half, once sending failed.
async fn status_after_send_error(rx: &mut grpc_channel::Streaming<Bytes>, what: &str) -> Outcome {
    for _ in 0..100 {
        match rx.message().await {
            Ok(Some(_)) => {}
            Ok(None) => return Outcome::Bad(format!("{what} failed, yet the call ended OK")),
            Err(s) => return Outcome::Failed(s),
        }
    }
    Outcome::Bad(format!("{what} failed, yet messages kept coming"))
}

#[allow(clippy::too_many_arguments)]
async fn call_task(
    ctx: Arc<Ctx>,
    channel: Channel,
    flavour: usize,
    shape: usize,
    mut rng: Rng,
    timeout: Duration,
    permit: OwnedSemaphorePermit,
) {
    let start = Instant::now();
    let deadline = start + timeout;
    let call = async {
        match shape {
            0 => unary(&channel, &mut rng, timeout).await,
            1 => server_stream(&channel, &mut rng, timeout).await,
            2 => client_stream(&channel, &mut rng, timeout).await,
            _ => bidi(&channel, &mut rng, timeout).await,
        }
    };
    tokio::pin!(call);
    let mut permit = Some(permit);
    let outcome = tokio::select! {
        outcome = &mut call => outcome,
        () = tokio::time::sleep_until((deadline + OVERDUE_AFTER).into()) => {
            // Give the slot back so the soak goes on; the call is still waited for.
            ctx.overdue.fetch_add(1, Ordering::SeqCst);
            permit.take();
            call.await
        }
    };
    let ended = Instant::now();
    let overrun = ended.checked_duration_since(deadline);
    if overrun.is_some_and(|o| o > LATE_AFTER) {
        ctx.late.fetch_add(1, Ordering::SeqCst);
    }
    ctx.record(flavour, shape, outcome, overrun);
    drop(permit);
}

/// Resident set size in KiB.
fn rss_kib() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    pages * page_size() / 1024
}

fn page_size() -> u64 {
    // The page size from the auxiliary vector is not reachable without libc; /proc/self/smaps says it.
    std::fs::read_to_string("/proc/self/smaps")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("KernelPageSize:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(4096, |kib| kib * 1024)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Samples RSS every second in its own thread.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<(u64, u64)>>,
}

impl Sampler {
    fn start(ctx: Arc<Ctx>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                samples.push((ctx.ended.load(Ordering::SeqCst), rss_kib()));
                for _ in 0..10 {
                    if flag.load(Ordering::SeqCst) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            samples
        });
        Sampler { stop, thread }
    }

    /// Stops sampling; returns the samples: (calls ended, RSS KiB).
    fn stop(self) -> Vec<(u64, u64)> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

fn check_join(result: Result<(), tokio::task::JoinError>, join_panics: &mut u64) {
    if let Err(e) = result {
        if e.is_panic() {
            *join_panics += 1;
        }
    }
}

async fn soak(config: Config) -> bool {
    let handle = tokio::runtime::Handle::current();
    let fds_before = open_fds();
    let probe = StallProbe::start(Instant::now());
    let tasks_before = handle.metrics().num_alive_tasks();
    let ctx = Arc::new(Ctx::default());
    let sampler = Sampler::start(ctx.clone());
    let flavours = flavours();
    let target = format!(
        "ipv4:{}",
        config
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut channels = Vec::new();
    for (name, json, _) in &flavours {
        match Channel::builder(target.clone())
            .default_service_config(json.clone())
            .service_config_lookup(false)
            .build()
        {
            Ok(c) => channels.push(c),
            Err(e) => {
                eprintln!("chaos-client: cannot build the {name} channel: {e}");
                return false;
            }
        }
    }
    eprintln!(
        "chaos-client: {} calls, {} in flight, over {target}",
        config.calls, config.concurrency
    );

    let started_at = Instant::now();
    let stop_issuing = started_at + config.max_duration;
    let semaphore = Arc::new(Semaphore::new(config.concurrency));
    let mut set = JoinSet::new();
    let mut join_panics = 0u64;
    let mut rng = Rng::new(config.seed);
    let mut stalled = false;
    let mut issued = 0u64;
    let progress_every = (config.calls / 10).max(1);
    for i in 0..config.calls {
        let permit = tokio::select! {
            p = semaphore.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = tokio::time::sleep_until(stop_issuing.into()) => {
                stalled = true;
                break;
            }
        };
        while let Some(r) = set.try_join_next() {
            check_join(r, &mut join_panics);
        }
        if i > 0 && i % progress_every == 0 {
            let secs = started_at.elapsed().as_secs_f64();
            eprintln!(
                "chaos-client: {i} calls started in {secs:.0} s ({:.0}/s), {} in flight, rss {} KiB",
                i as f64 / secs,
                set.len(),
                rss_kib()
            );
        }
        let flavour = (i % 3) as usize;
        let shape = rng.range(0, 3) as usize;
        let timeout = Duration::from_millis(rng.range(1000, 3000));
        let call_rng = Rng::new(rng.next_u64());
        issued += 1;
        set.spawn(call_task(
            ctx.clone(),
            channels[flavour].clone(),
            flavour,
            shape,
            call_rng,
            timeout,
            permit,
        ));
    }
    let drain_until = Instant::now() + DRAIN_GRACE;
    loop {
        tokio::select! {
            r = set.join_next() => match r {
                Some(r) => check_join(r, &mut join_panics),
                None => break,
            },
            () = tokio::time::sleep_until(drain_until.into()) => break,
        }
    }
    let elapsed = started_at.elapsed();
    // Every call spawned must have ended by now; those still running are lost.
    let ended = ctx.ended.load(Ordering::SeqCst);
    let lost = issued.saturating_sub(ended);
    // Calls still running now are lost: abort them (bounded) so the leak checks can run.
    set.abort_all();
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(r) = set.join_next().await {
            check_join(r, &mut join_panics);
        }
    })
    .await;
    let rss_end = rss_kib();
    let samples = sampler.stop();
    let warm = (config.calls as f64 * WARM_UP) as u64;
    let rss_start = samples
        .iter()
        .find(|(ended, _)| *ended >= warm)
        .map_or(rss_end, |(_, rss)| *rss);
    let rss_peak = samples
        .iter()
        .filter(|(ended, _)| *ended >= warm)
        .map(|(_, rss)| *rss)
        .max()
        .unwrap_or(rss_end)
        .max(rss_end);

    drop(channels);
    let wind_down = Instant::now() + Duration::from_secs(5);
    let (fds_after, tasks_after) = loop {
        let fds = open_fds();
        let tasks = handle.metrics().num_alive_tasks();
        if (fds <= fds_before && tasks <= tasks_before) || Instant::now() >= wind_down {
            break (fds, tasks);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let tally = ctx
        .tally
        .lock()
        .map(|t| t.clone_counts())
        .unwrap_or_default();
    let report = Report {
        flavours: flavours.iter().map(|(n, _, p)| (*n, *p)).collect(),
        tally,
        started: issued,
        lost,
        panics: PANICS.load(Ordering::SeqCst),
        join_panics,
        late: ctx.late.load(Ordering::SeqCst),
        overdue: ctx.overdue.load(Ordering::SeqCst),
        stalled,
        rss: (rss_start, rss_end, rss_peak),
        fds: (fds_before, fds_after),
        tasks: (tasks_before, tasks_after),
        elapsed,
        probe,
    };
    report.print()
}

impl Tally {
    fn clone_counts(&self) -> Tally {
        Tally {
            counts: self.counts.clone(),
            samples: self.samples.clone(),
            max_overrun: self.max_overrun,
            late_samples: self.late_samples.clone(),
            defects: self.defects.clone(),
        }
    }
}

struct Report {
    flavours: Vec<(&'static str, bool)>,
    tally: Tally,
    started: u64,
    lost: u64,
    panics: u64,
    join_panics: u64,
    late: u64,
    overdue: u64,
    stalled: bool,
    rss: (u64, u64, u64),
    fds: (usize, usize),
    tasks: (usize, usize),
    elapsed: Duration,
    /// When a call ends late, the probes say whether the machine stalled the client at the time.
    probe: StallProbe,
}

/// The codes the faults can produce (module docs of [`super`]).
const EXPECTED: [&str; 3] = ["OK", "UNAVAILABLE", "DEADLINE_EXCEEDED"];

impl Report {
    fn print(&self) -> bool {
        let n = self.flavours.len();
        let counts = &self.tally.counts;
        let by = |f: &dyn Fn(&(&'static str, usize, usize)) -> bool| -> u64 {
            counts.iter().filter(|(k, _)| f(k)).map(|(_, v)| *v).sum()
        };
        let mut outcomes: Vec<&'static str> = counts.keys().map(|(k, _, _)| *k).collect();
        outcomes.sort_by_key(|k| (*k != "OK", *k));
        outcomes.dedup();

        println!();
        println!(
            "outcomes by status and flavour ({:.0} s):",
            self.elapsed.as_secs_f64()
        );
        print!("{:<20}", "status");
        for (name, _) in &self.flavours {
            print!("{name:>10}");
        }
        println!("{:>10}", "total");
        for o in &outcomes {
            print!("{o:<20}");
            for f in 0..n {
                print!("{:>10}", by(&|k| k.0 == *o && k.1 == f));
            }
            println!("{:>10}", by(&|k| k.0 == *o));
        }
        print!("{:<20}", "total");
        for f in 0..n {
            print!("{:>10}", by(&|k| k.1 == f));
        }
        println!("{:>10}", by(&|_| true));
        print!("{:<20}", "ok rate");
        let mut rates = Vec::new();
        for f in 0..n {
            let total = by(&|k| k.1 == f);
            let ok = by(&|k| k.0 == "OK" && k.1 == f);
            let rate = if total == 0 {
                0.0
            } else {
                ok as f64 / total as f64
            };
            rates.push(rate);
            print!("{:>9.2}%", rate * 100.0);
        }
        let total = by(&|_| true);
        let ok = by(&|k| k.0 == "OK");
        println!("{:>9.2}%", ok as f64 * 100.0 / total.max(1) as f64);

        println!();
        println!("ok rate by shape and flavour:");
        print!("{:<20}", "shape");
        for (name, _) in &self.flavours {
            print!("{name:>10}");
        }
        println!();
        for (s, shape) in SHAPES.iter().enumerate() {
            print!("{shape:<20}");
            for f in 0..n {
                let total = by(&|k| k.1 == f && k.2 == s);
                let ok = by(&|k| k.0 == "OK" && k.1 == f && k.2 == s);
                print!("{:>9.2}%", ok as f64 * 100.0 / total.max(1) as f64);
            }
            println!();
        }
        let notable: Vec<_> = self.tally.samples.iter().collect();
        if !notable.is_empty() {
            println!();
            println!("sample statuses:");
            for ((k, f), messages) in &notable {
                for m in messages.iter() {
                    println!("  {:<8} {k}: {m}", self.flavours[*f].0);
                }
            }
        }

        // The checks.
        let mut failures: Vec<String> = Vec::new();
        for (f, (name, policy)) in self.flavours.iter().enumerate() {
            let min = if *policy {
                MIN_OK_WITH_POLICY
            } else {
                MIN_OK_WITHOUT_POLICY
            };
            if rates[f] < min {
                failures.push(format!(
                    "{name}: ok rate {:.2}% is below {:.0}%",
                    rates[f] * 100.0,
                    min * 100.0
                ));
            }
        }
        let bad = by(&|k| k.0 == "OK_BAD_PAYLOAD");
        if bad > 0 {
            failures.push(format!("{bad} OK calls with a wrong response"));
        }
        let unexpected = by(&|k| !EXPECTED.contains(&k.0) && k.0 != "OK_BAD_PAYLOAD");
        if unexpected > 0 {
            let codes: Vec<&str> = outcomes
                .iter()
                .copied()
                .filter(|o| !EXPECTED.contains(o) && *o != "OK_BAD_PAYLOAD")
                .collect();
            failures.push(format!(
                "{unexpected} calls ended with a code the faults cannot produce ({}; see the samples)",
                codes.join(", ")
            ));
        }
        for (i, calls) in &self.tally.defects {
            failures.push(format!(
                "known channel defect in {calls} calls: {}",
                KNOWN_DEFECTS[*i].2
            ));
        }
        if self.lost > 0 {
            failures.push(format!("{} calls lost (never ended)", self.lost));
        }
        if self.panics > 0 || self.join_panics > 0 {
            failures.push(format!(
                "{} panics ({} in call tasks)",
                self.panics, self.join_panics
            ));
        }
        if self.late > 0 {
            failures.push(format!(
                "{} calls ended more than {} ms after their deadline (worst {} ms)",
                self.late,
                LATE_AFTER.as_millis(),
                self.tally.max_overrun.as_millis()
            ));
            let now = Instant::now();
            for (at, what) in &self.tally.late_samples {
                let at = self.probe.seconds() - now.duration_since(*at).as_secs_f64();
                println!("late call at {at:.1} s: {what}");
            }
            for stall in self.probe.report().1 {
                println!("stall: {stall}");
            }
        }
        if self.stalled {
            failures.push("the soak stopped early: calls did not give their slots back".to_owned());
        }
        let (start, end, peak) = self.rss;
        let limit = start + (start / 2).max(RSS_SLACK_KIB);
        if end > limit {
            failures.push(format!(
                "RSS grew from {start} KiB to {end} KiB (limit {limit} KiB)"
            ));
        }
        if self.fds.1 > self.fds.0 + FD_TOLERANCE {
            failures.push(format!(
                "fds: {} before the channels, {} after they were dropped (tolerance {FD_TOLERANCE})",
                self.fds.0, self.fds.1
            ));
        }
        if self.tasks.1 > self.tasks.0 + TASK_TOLERANCE {
            failures.push(format!(
                "tasks: {} before the channels, {} after they were dropped (tolerance {TASK_TOLERANCE})",
                self.tasks.0, self.tasks.1
            ));
        }
        println!();
        println!(
            "rss: start {start} KiB, end {end} KiB, peak {peak} KiB (limit {limit} KiB); overdue calls {}; worst overrun past a deadline {} ms",
            self.overdue,
            self.tally.max_overrun.as_millis()
        );
        println!("{}", self.probe.report().0);
        for f in &failures {
            println!("check failed: {f}");
        }
        println!(
            "chaos: calls={} ok={} failed={} lost={} panics={} late={} rss_kib={start}/{end} fds={}/{} tasks={}/{}",
            self.started,
            ok,
            total - ok,
            self.lost,
            self.panics.max(self.join_panics),
            self.late,
            self.fds.0,
            self.fds.1,
            self.tasks.0,
            self.tasks.1
        );
        failures.is_empty()
    }
}
