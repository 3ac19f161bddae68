//! Client-side health checking (gRFC A17) at its edges: policy switches, service-name changes, checking
//! turned off and on, GOAWAY, IDLE, hostile Watch answers, MAX_CONCURRENT_STREAMS=1, the Watch's request
//! headers and credentials, TLS, `unix:` targets, ejection with health, and the stats. On tokio's paused
//! clock with loopback servers (interop servers, scriptable h2 servers, a hand-written health backend) and
//! a DNS server on loopback for config changes. The memory bound under a flood of answers is in
//! `health_flood.rs`, the connection-loss trace in `health_edges_tracing.rs`.

use grpc_test_support as support;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request, ResolverOptions, Status};
use interop::dns::TestDns;
use interop::health::ServingStatus;
use interop::server;
use interop_proto::grpc_health_v1::{HealthCheckRequest, HealthCheckResponse};
use prost::Message;
use support::frames::grpc_message;
use support::h2_server::{answer, handler, response_head, trailers, H2Server};
use tokio::net::TcpListener;
use tokio::sync::watch;

const WATCH: &str = "/grpc.health.v1.Health/Watch";
const UNARY: &str = "/t.S/Unary";
const SVC: &str = "grpc.testing.TestService";

fn rr_health(service: &str) -> String {
    format!(
        r#"{{"healthCheckConfig":{{"serviceName":"{service}"}},
            "loadBalancingConfig":[{{"round_robin":{{}}}}]}}"#
    )
}

/// A backend on a chosen address: `UNARY` answers the backend's name; `Watch` answers the status the
/// test set for the requested service (and each change), or never answers while the service has none.
/// `goaway(n)` shuts connection `n` down gracefully.
#[derive(Clone)]
struct Backend {
    addr: SocketAddr,
    statuses: Arc<watch::Sender<HashMap<String, i32>>>,
    goaway: Arc<watch::Sender<usize>>,
    conns: Arc<AtomicUsize>,
    /// (connection, service) of each Watch opened.
    watches: Arc<Mutex<Vec<(usize, String)>>>,
    /// Unary calls answered.
    calls: Arc<AtomicUsize>,
    /// `goaway(n)` drops connection `n` instead.
    kill: Arc<std::sync::atomic::AtomicBool>,
}

impl Backend {
    async fn start(addr: SocketAddr, name: &'static str) -> Backend {
        let listener = TcpListener::bind(addr).await.expect("bind");
        let backend = Backend {
            addr: listener.local_addr().expect("addr"),
            statuses: Arc::new(watch::channel(HashMap::new()).0),
            goaway: Arc::new(watch::channel(0).0),
            conns: Arc::default(),
            watches: Arc::default(),
            calls: Arc::default(),
            kill: Arc::default(),
        };
        let b = backend.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                // Without it, Nagle holds small frames for the peer's delayed ACK (real time), which the
                // paused clock does not wait for.
                let _ = tcp.set_nodelay(true);
                let n = b.conns.fetch_add(1, Ordering::SeqCst) + 1;
                let b = b.clone();
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(tcp).await else {
                        return;
                    };
                    let mut goaway = b.goaway.subscribe();
                    let mut closing = false;
                    loop {
                        tokio::select! {
                            accepted = conn.accept() => {
                                let Some(Ok((request, mut respond))) = accepted else { return };
                                let (parts, mut body) = request.into_parts();
                                let b = b.clone();
                                tokio::spawn(async move {
                                    let mut req = Vec::new();
                                    while let Some(Ok(chunk)) = body.data().await {
                                        let _ = body.flow_control().release_capacity(chunk.len());
                                        req.extend_from_slice(&chunk);
                                    }
                                    if parts.uri.path() != WATCH {
                                        b.calls.fetch_add(1, Ordering::SeqCst);
                                        answer(&mut respond, name.as_bytes());
                                        return;
                                    }
                                    let service = HealthCheckRequest::decode(&req[5..])
                                        .expect("a HealthCheckRequest")
                                        .service;
                                    b.watches.lock().expect("lock").push((n, service.clone()));
                                    let mut rx = b.statuses.subscribe();
                                    let mut send = None;
                                    let mut last = None;
                                    loop {
                                        let now = rx.borrow_and_update().get(&service).copied();
                                        if let Some(status) = now.filter(|_| now != last) {
                                            if send.is_none() {
                                                send = respond.send_response(response_head(), false).ok();
                                            }
                                            let Some(s) = send.as_mut() else { return };
                                            let msg = HealthCheckResponse { status };
                                            let _ = s.send_data(grpc_message(&msg.encode_to_vec()), false);
                                            last = now;
                                        }
                                        tokio::select! {
                                            changed = rx.changed() => if changed.is_err() { return },
                                            _ = std::future::poll_fn(|cx| match send.as_mut() {
                                                Some(s) => s.poll_reset(cx).map(|_| ()),
                                                None => respond.poll_reset(cx).map(|_| ()),
                                            }) => return,
                                        }
                                    }
                                });
                            }
                            changed = goaway.wait_for(|g| *g == n), if !closing => {
                                closing = true;
                                if changed.is_ok() {
                                    if b.kill.load(Ordering::SeqCst) {
                                        // Drop the connection: the socket closes.
                                        return;
                                    }
                                    conn.graceful_shutdown();
                                }
                            }
                        }
                    }
                });
            }
        });
        backend
    }

    fn set(&self, service: &str, status: ServingStatus) {
        self.statuses.send_modify(|m| {
            m.insert(service.to_owned(), status as i32);
        });
    }

    fn watches(&self) -> Vec<(usize, String)> {
        self.watches.lock().expect("lock").clone()
    }
}

async fn named_call(ch: &Channel, timeout: Duration) -> Result<String, Status> {
    let r = ch
        .unary_raw(UNARY, Request::new(Bytes::new()).with_timeout(timeout))
        .await?;
    Ok(String::from_utf8_lossy(&r.into_message()).into_owned())
}

fn dns_channel(dns: &TestDns, port: u16, min_interval: Duration) -> Channel {
    Channel::builder(format!("dns://{}/svc.test:{port}", dns.addr))
        .resolver_options(
            ResolverOptions::default()
                .with_min_interval(min_interval)
                .with_query_timeout(Duration::from_secs(2)),
        )
        .build()
        .expect("channel")
}

fn choice(json: &str) -> String {
    format!(r#"[{{"serviceConfig":{json}}}]"#)
}

// ---- 1. Graceful switch pick_first -> round_robin whose only backend is NOT_SERVING ----------------------

/// pick_first serves backend `a`. The config becomes round_robin with health checking, and `a` says
/// NOT_SERVING for the service: the new round_robin's only subchannel is TRANSIENT_FAILURE. The graceful
/// switch ends as soon as the new policy reports anything but CONNECTING (grpc-go's `gracefulswitch`), so
/// the retired pick_first connection stops taking calls, which fail UNAVAILABLE naming the health check
/// (as they do on a channel that started with this config).
#[tokio::test(start_paused = true)]
async fn a_switch_to_health_checked_round_robin_stops_calling_a_not_serving_backend() {
    let a = Backend::start("127.0.0.1:0".parse().expect("addr"), "a").await;
    a.set(SVC, ServingStatus::NotServing);
    let dns = TestDns::start().await.expect("dns");
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 1)).await;
    dns.set_service_config(
        "svc.test",
        &choice(r#"{"loadBalancingConfig":[{"pick_first":{}}]}"#),
    )
    .await;
    let ch = dns_channel(&dns, a.addr.port(), Duration::from_secs(5));
    assert_eq!(
        named_call(&ch, Duration::from_secs(5))
            .await
            .expect("pick_first"),
        "a"
    );

    // The new config; pick_first's connection is dropped, which asks DNS again (due at 5 s), and a
    // call in between reconnects pick_first, so that pick_first is READY when the new config comes.
    dns.set_service_config("svc.test", &choice(&rr_health(SVC)))
        .await;
    a.kill.store(true, Ordering::SeqCst);
    a.goaway.send_replace(1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        named_call(&ch, Duration::from_secs(5))
            .await
            .expect("pick_first reconnected"),
        "a"
    );
    assert_eq!(a.conns.load(Ordering::SeqCst), 2, "pick_first reconnected");
    assert!(a.watches().is_empty(), "pick_first runs no Watch");
    // The resolution with round_robin + healthCheckConfig arrives; round_robin connects, `a` is NOT_SERVING.
    let mut listed = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if ch.stats().not_serving_addresses == [a.addr.to_string()] {
            listed = true;
            break;
        }
    }
    assert!(
        listed,
        "round_robin ran a Watch and `a` is listed as not serving"
    );
    assert_eq!(
        a.conns.load(Ordering::SeqCst),
        3,
        "pick_first's connection (2) was retired; round_robin's is 3"
    );
    assert!(
        a.watches().iter().any(|(_, s)| s == SVC),
        "a Watch was opened"
    );

    // Now, with the channel's only backend NOT_SERVING under a health-checking round_robin:
    let before = a.calls.load(Ordering::SeqCst);
    let mut served = 0;
    let mut failed = Vec::new();
    for _ in 0..20 {
        match named_call(&ch, Duration::from_secs(1)).await {
            Ok(_) => served += 1,
            Err(status) => failed.push(status),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        (served, a.calls.load(Ordering::SeqCst) - before),
        (0, 0),
        "calls went to a backend the channel lists as NOT_SERVING ({:?}): the retired pick_first still \
         serves 20 s after round_robin reported TRANSIENT_FAILURE",
        ch.stats().not_serving_addresses
    );
    for status in failed {
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    }
}

// ---- 2. A service-name change keeps the old service's answers (and the stats disagree) ------------------

/// round_robin over `a` and `b` (on 127.0.0.1 and .2, one port) with health checking of service "one";
/// `dns` brings a new config (127.0.0.4 refuses connections, so round_robin keeps asking DNS again).
async fn two_backends_checking_one() -> (Backend, Backend, TestDns, Channel) {
    let a = Backend::start("127.0.0.1:0".parse().expect("addr"), "a").await;
    let port = a.addr.port();
    let b = Backend::start(SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), port)), "b").await;
    let dns = TestDns::start().await.expect("dns");
    for n in [1, 2, 4] {
        dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, n)).await;
    }
    dns.set_service_config("svc.test", &choice(&rr_health("one")))
        .await;
    let ch = dns_channel(&dns, port, Duration::from_millis(100));
    (a, b, dns, ch)
}

/// Switches the config to service "two" and waits until both backends saw a Watch for it, then 5 s more.
async fn move_to_two(a: &Backend, b: &Backend, dns: &TestDns) {
    dns.set_service_config("svc.test", &choice(&rr_health("two")))
        .await;
    let mut moved = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let on_two = |x: &Backend| x.watches().iter().any(|(_, s)| s == "two");
        if on_two(a) && on_two(b) {
            moved = true;
            break;
        }
    }
    assert!(moved, "the Watches moved to \"two\"");
    tokio::time::sleep(Duration::from_secs(5)).await;
}

/// 20 calls: how many each backend answered (or the status code of those that failed).
async fn spread_named(ch: &Channel) -> HashMap<String, usize> {
    let mut by = HashMap::<String, usize>::new();
    for _ in 0..20 {
        let who = match named_call(ch, Duration::from_millis(500)).await {
            Ok(name) => name,
            Err(status) => format!("{:?}", status.code()),
        };
        *by.entry(who).or_default() += 1;
    }
    by
}

/// `a` SERVING and `b` NOT_SERVING for "one"; the config changes the service to "two", which neither
/// backend ever answers. Answers about "one" say nothing about "two": every backend starts again from
/// unknown (A17: CONNECTING until the Watch answers), so calls wait (and end by their deadline), and the
/// stats list no address as not serving, since none said so.
#[tokio::test(start_paused = true)]
async fn a_new_service_name_starts_every_backend_from_unknown() {
    let (a, b, dns, ch) = two_backends_checking_one().await;
    a.set("one", ServingStatus::Serving);
    b.set("one", ServingStatus::NotServing);
    for _ in 0..10 {
        assert_eq!(
            named_call(&ch, Duration::from_secs(5))
                .await
                .expect("a serves"),
            "a"
        );
    }
    assert_eq!(ch.stats().not_serving_addresses, [b.addr.to_string()]);
    move_to_two(&a, &b, &dns).await;
    let stats = ch.stats().not_serving_addresses;
    let by = spread_named(&ch).await;
    assert_eq!(
        by.get("DeadlineExceeded"),
        Some(&20),
        "no backend answered for \"two\": calls wait for one ({by:?})"
    );
    assert!(stats.is_empty(), "none said it is not serving: {stats:?}");
}

/// `a` SERVING and `b` NOT_SERVING for "one"; the config changes the service to "two": `b` answers
/// SERVING for it, `a` never answers. Only `b` is used: `a`'s answer about "one" says nothing about "two"
/// (A17: CONNECTING until the Watch answers).
#[tokio::test(start_paused = true)]
async fn a_backend_silent_for_the_new_service_name_is_not_used() {
    let (a, b, dns, ch) = two_backends_checking_one().await;
    a.set("one", ServingStatus::Serving);
    b.set("one", ServingStatus::NotServing);
    b.set("two", ServingStatus::Serving);
    for _ in 0..10 {
        assert_eq!(
            named_call(&ch, Duration::from_secs(5))
                .await
                .expect("a serves"),
            "a"
        );
    }
    move_to_two(&a, &b, &dns).await;
    let by = spread_named(&ch).await;
    assert_eq!(
        (by.get("a"), by.get("b")),
        (None, Some(&20)),
        "only `b` answered SERVING for \"two\"; `a` never answered for it: {by:?}"
    );
}

/// Health checking of "one" is turned off by the config (every backend takes calls, `b` included), then
/// on again; meanwhile neither backend has answered anything new (their health services have no status
/// for "one" yet: the new Watches stay unanswered). The answers of the Watch session that ended when
/// checking was turned off say nothing about the connection now (A17: "hold CONNECTING until the first
/// response"): neither `a` nor `b` is used on the strength of them.
#[tokio::test(start_paused = true)]
async fn turning_health_checking_off_and_on_forgets_old_answers() {
    let (a, b, dns, ch) = two_backends_checking_one().await;
    a.set("one", ServingStatus::Serving);
    b.set("one", ServingStatus::NotServing);
    for _ in 0..10 {
        assert_eq!(
            named_call(&ch, Duration::from_secs(5))
                .await
                .expect("a serves"),
            "a"
        );
    }
    // Off: no healthCheckConfig.
    dns.set_service_config(
        "svc.test",
        &choice(r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#),
    )
    .await;
    let mut off = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if spread_named(&ch).await.contains_key("b") {
            off = true;
            break;
        }
    }
    assert!(off, "with checking off, `b` takes calls");
    // The health services forget "one" (their Watches will not answer), and checking comes back.
    for x in [&a, &b] {
        x.statuses.send_modify(|m| {
            m.remove("one");
        });
    }
    let watches_before = a.watches().len() + b.watches().len();
    dns.set_service_config("svc.test", &choice(&rr_health("one")))
        .await;
    let mut on = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if a.watches().len() + b.watches().len() >= watches_before + 2 {
            on = true;
            break;
        }
    }
    assert!(on, "new Watches started");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats = ch.stats().not_serving_addresses;
    let by = spread_named(&ch).await;
    assert!(
        !by.contains_key("a") || by.contains_key("b"),
        "no Watch has answered since checking came back, yet `a` takes calls and `b` none, on answers \
         from the cancelled session: {by:?}; not_serving_addresses = {stats:?}"
    );
}

// ---- 3. GOAWAY: the Watch moves to the new connection, the old one closes -------------------------------

#[tokio::test(start_paused = true)]
async fn goaway_moves_the_watch_to_the_new_connection() {
    let a = Backend::start("127.0.0.1:0".parse().expect("addr"), "a").await;
    a.set(SVC, ServingStatus::Serving);
    let ch = support::channel_with_config(&format!("ipv4:{}", a.addr), rr_health(SVC));
    assert_eq!(
        named_call(&ch, Duration::from_secs(5)).await.expect("call"),
        "a"
    );
    assert_eq!(a.watches(), [(1, SVC.to_owned())]);
    // The new connection's status differs: it must be learnt afresh.
    a.set(SVC, ServingStatus::NotServing);
    tokio::time::sleep(Duration::from_millis(50)).await;
    a.goaway.send_replace(1);
    let mut moved = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if a.watches().iter().any(|(c, _)| *c == 2) {
            moved = true;
            break;
        }
    }
    assert!(moved, "a Watch on connection 2: {:?}", a.watches());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(ch.stats().not_serving_addresses, [a.addr.to_string()]);
    let status = named_call(&ch, Duration::from_secs(1))
        .await
        .expect_err("NOT_SERVING");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    a.set(SVC, ServingStatus::Serving);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        named_call(&ch, Duration::from_secs(5)).await.expect("call"),
        "a"
    );
    assert_eq!(a.conns.load(Ordering::SeqCst), 2);
}

// ---- 4. IDLE stops the watches and clears the stats; leaving IDLE starts them again ---------------------

#[tokio::test(start_paused = true)]
async fn idle_stops_watches_and_leaving_idle_restarts_them() {
    let a = server::start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("server");
    let b = server::start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("server");
    a.health().set(SVC, ServingStatus::Serving);
    b.health().set(SVC, ServingStatus::NotServing);
    let ch = Channel::builder(support::ipv4_target(&[a.addr, b.addr]))
        .default_service_config(rr_health(SVC))
        .service_config_lookup(false)
        .idle_timeout(Duration::from_secs(10))
        .build()
        .expect("channel");
    ch.connect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(ch.stats().not_serving_addresses, [b.addr.to_string()]);
    assert_eq!((a.health().watchers(SVC), b.health().watchers(SVC)), (1, 1));
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(
        ch.state(),
        grpc_channel::ConnectivityState::Idle,
        "the Watch does not keep the channel out of IDLE"
    );
    assert_eq!((a.health().watchers(SVC), b.health().watchers(SVC)), (0, 0));
    assert!(ch.stats().not_serving_addresses.is_empty());
    ch.connect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!((a.health().watchers(SVC), b.health().watchers(SVC)), (1, 1));
    assert_eq!(ch.stats().not_serving_addresses, [b.addr.to_string()]);
}

// ---- 5. Hostile Watch answers ----------------------------------------------------------------------------

/// Each Watch on `bad` answers one kind of garbage; `good` serves. The channel must never panic, never
/// send a call to `bad`, list it as not serving, and back off between Watches that got no valid answer.
#[tokio::test(start_paused = true)]
async fn hostile_watch_answers_are_not_serving_and_back_off() {
    let good = server::start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("server");
    good.health().set(SVC, ServingStatus::Serving);
    let n = Arc::new(AtomicUsize::new(0));
    let unary = Arc::new(AtomicUsize::new(0));
    let (n2, unary2) = (n.clone(), unary.clone());
    let bad = H2Server::tcp(
        support::h2_server::defaults,
        handler(move |mut stream| {
            let (n, unary) = (n2.clone(), unary2.clone());
            async move {
                if stream.path != WATCH {
                    unary.fetch_add(1, Ordering::SeqCst);
                    stream.ok(b"");
                    return;
                }
                let k = n.fetch_add(1, Ordering::SeqCst);
                let _ = stream.read_to_end().await;
                let mut frame = |bytes: Vec<u8>| {
                    if let Some(mut send) = stream.headers() {
                        let _ = send.send_data(Bytes::from(bytes), false);
                        let _ = send.send_trailers(trailers("0", &[]));
                    }
                };
                match k % 9 {
                    // Compressed flag with no grpc-encoding.
                    0 => frame(vec![1, 0, 0, 0, 2, 8, 1]),
                    // Oversized (declared 1 GiB).
                    1 => frame(vec![0, 0x40, 0, 0, 0, 8, 1]),
                    // Unparseable protobuf (truncated varint).
                    2 => frame(vec![0, 0, 0, 0, 2, 8, 0xff]),
                    // Wrong wire type for field 1.
                    3 => frame(vec![0, 0, 0, 0, 2, 0x0d, 1]),
                    // Trailers-Only with an unparseable grpc-status.
                    4 => stream.trailers_only("abc", &[]),
                    // Trailers-Only OK.
                    5 => stream.trailers_only("0", &[]),
                    // Trailers-Only with an out-of-range status.
                    6 => stream.trailers_only("99", &[]),
                    // HTTP 200 but not gRPC.
                    7 => {
                        let mut r = http::Response::new(());
                        r.headers_mut()
                            .insert("content-type", http::HeaderValue::from_static("text/html"));
                        let _ = stream.respond.send_response(r, true);
                    }
                    // A truncated message, then trailers.
                    _ => frame(vec![0, 0, 0, 0, 9, 8]),
                }
            }
        }),
    )
    .await;
    let ch = support::channel_with_config(
        &support::ipv4_target(&[good.addr, bad.addr()]),
        rr_health(SVC),
    );
    ch.connect();
    let mut calls_ok = 0;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if named_call_interop(&ch).await.is_ok() {
            calls_ok += 1;
        }
    }
    assert_eq!(calls_ok, 60, "every call succeeds (on `good`)");
    assert_eq!(unary.load(Ordering::SeqCst), 0, "no call went to `bad`");
    assert_eq!(ch.stats().not_serving_addresses, [bad.addr().to_string()]);
    // Backoff from 1 s, ×1.6, up to 120 s: in 60 s, about 9 Watches (1+1.6+2.56+...), not hundreds.
    let watches = n.load(Ordering::SeqCst);
    assert!((5..=15).contains(&watches), "{watches} Watches in 60 s");
}

async fn named_call_interop(ch: &Channel) -> Result<(), Status> {
    ch.unary::<_, interop_proto::SimpleResponse>(
        interop_proto::paths::UNARY_CALL,
        Request::new(interop_proto::SimpleRequest::default()).with_timeout(Duration::from_secs(1)),
    )
    .await
    .map(|_| ())
}

// ---- 6. MAX_CONCURRENT_STREAMS = 1: the Watch takes the only stream ---------------------------------------

fn one_stream(b: &mut h2::server::Builder) {
    b.max_concurrent_streams(1);
}

/// A server allowing one stream per connection; its Watch answers SERVING and stays open. A17: the Watch
/// counts against MAX_CONCURRENT_STREAMS, so a user call can never start on that connection (C-core and
/// grpc-go behave the same: the call waits for a stream). This pins what happens: the call waits until
/// its deadline and the channel never opens a second connection.
#[tokio::test(start_paused = true)]
async fn with_max_concurrent_streams_one_the_watch_takes_the_only_stream() {
    let server = H2Server::tcp(
        one_stream,
        handler(|mut stream| async move {
            if stream.path != WATCH {
                stream.ok(b"");
                return;
            }
            support::health_watch::answer_serving(stream).await;
        }),
    )
    .await;
    let ch = support::channel_with_config(&server.target(), rr_health(SVC));
    ch.connect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let status = ch
        .unary_raw(
            UNARY,
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(5)),
        )
        .await
        .expect_err("the only stream is the Watch's");
    eprintln!("MAX_CONCURRENT_STREAMS=1: {status:?}");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(server.opens_of(UNARY), 0);
    assert_eq!(server.connections(), 1);
}

// ---- 7. The Watch's request headers, as the server sees them (TCP and unix:) ----------------------------

async fn check_watch_headers(server: H2Server, ch: Channel) {
    ch.unary_raw(
        UNARY,
        Request::new(Bytes::new()).with_timeout(Duration::from_secs(5)),
    )
    .await
    .expect("call");
    let opens = server.opens();
    let watch = opens.iter().find(|o| o.path == WATCH).expect("a Watch");
    let call = opens.iter().find(|o| o.path == UNARY).expect("the call");
    assert_eq!(watch.authority, call.authority, "the same :authority");
    for name in ["te", "content-type", "user-agent"] {
        assert_eq!(
            watch.headers.get(name),
            call.headers.get(name),
            "{name}: {:?} vs {:?}",
            watch.headers,
            call.headers
        );
    }
    assert!(watch.headers.get("grpc-timeout").is_none(), "no deadline");
    let body = server.body(watch.conn, watch.id);
    let request = HealthCheckRequest::decode(&body[5..]).expect("a HealthCheckRequest");
    assert_eq!(request.service, SVC);
    assert_eq!(body[0], 0, "uncompressed");
}

#[tokio::test(start_paused = true)]
async fn the_watch_sends_the_calls_authority_and_headers() {
    let server = H2Server::tcp(
        support::h2_server::defaults,
        support::health_watch::serving_or_ok(),
    )
    .await;
    let ch = support::channel_with_config(&server.target(), rr_health(SVC));
    check_watch_headers(server, ch).await;
}

#[tokio::test(start_paused = true)]
async fn the_watch_runs_on_unix_targets_too() {
    let server = H2Server::unix(
        support::socket_path("health-break"),
        support::h2_server::defaults,
        support::health_watch::serving_or_ok(),
    );
    let ch = support::channel_with_config(&server.target(), rr_health(SVC));
    check_watch_headers(server, ch).await;
}

// ---- 8. A backend removed from the config leaves the stats ------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_removed_not_serving_backend_leaves_the_stats() {
    let a = Backend::start("127.0.0.1:0".parse().expect("addr"), "a").await;
    let port = a.addr.port();
    let b = Backend::start(SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), port)), "b").await;
    a.set(SVC, ServingStatus::Serving);
    b.set(SVC, ServingStatus::NotServing);
    let dns = TestDns::start().await.expect("dns");
    for n in [1, 2, 4] {
        dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, n)).await;
    }
    dns.set_service_config("svc.test", &choice(&rr_health(SVC)))
        .await;
    let ch = dns_channel(&dns, port, Duration::from_millis(100));
    named_call(&ch, Duration::from_secs(5)).await.expect("call");
    assert_eq!(ch.stats().not_serving_addresses, [b.addr.to_string()]);
    dns.remove("svc.test", hickory_record_type_a()).await;
    for n in [1, 4] {
        dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, n)).await;
    }
    let mut gone = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if ch.stats().not_serving_addresses.is_empty() {
            gone = true;
            break;
        }
    }
    assert!(gone, "{:?}", ch.stats().not_serving_addresses);
}

fn hickory_record_type_a() -> interop::dns::RecordType {
    interop::dns::RecordType::A
}

/// The same with the shared scriptable server's GOAWAY.
#[tokio::test(start_paused = true)]
async fn goaway_on_the_scriptable_server_moves_the_watch() {
    let server = H2Server::tcp(
        support::h2_server::defaults,
        support::health_watch::serving_or_ok(),
    )
    .await;
    let ch = support::channel_with_config(&server.target(), rr_health(SVC));
    ch.unary_raw(
        UNARY,
        Request::new(Bytes::new()).with_timeout(Duration::from_secs(5)),
    )
    .await
    .expect("call");
    server.goaway();
    let mut moved = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if server
            .opens()
            .iter()
            .any(|o| o.conn == 2 && o.path == WATCH)
        {
            moved = true;
            break;
        }
    }
    assert!(moved, "a Watch on connection 2; state {:?}", ch.state());
}

// ---- 10. A server that authenticates every RPC, the Watch included ------------------------------------

/// Every RPC needs `authorization: Bearer t` (UNAUTHENTICATED otherwise), the health service's too, as
/// auth middleware usually applies. The application adds the token with a channel interceptor, the
/// crate's way to add credentials; A17 sends the channel's call credentials on the Watch, so the
/// interceptors run for each Watch and the backend is SERVING.
#[tokio::test(start_paused = true)]
async fn the_watch_carries_the_channels_interceptor_metadata() {
    let server = H2Server::tcp(
        support::h2_server::defaults,
        handler(|mut stream| async move {
            if stream.header("authorization").as_deref() != Some("Bearer t") {
                stream.trailers_only("16", &[("grpc-message", "no token")]);
                return;
            }
            if stream.path != WATCH {
                stream.ok(b"");
                return;
            }
            support::health_watch::answer_serving(stream).await;
        }),
    )
    .await;
    let build = |health: bool| {
        Channel::builder(server.target())
            .default_service_config(rr_health(SVC))
            .service_config_lookup(false)
            .health_checks(health)
            .interceptor(|call: &mut grpc_channel::CallInfo<'_>| {
                call.metadata_mut()
                    .insert("authorization", "Bearer t")
                    .map(|_| ())
                    .map_err(|_| Status::new(Code::Internal, "metadata"))
            })
            .build()
            .expect("channel")
    };
    let unchecked = build(false);
    unchecked
        .unary_raw(
            UNARY,
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(5)),
        )
        .await
        .expect("with the token the server serves");
    let ch = build(true);
    ch.connect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let result = ch
        .unary_raw(
            UNARY,
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(5)),
        )
        .await;
    let watches: Vec<_> = server
        .opens()
        .into_iter()
        .filter(|o| o.path == WATCH)
        .map(|o| o.headers.get("authorization").cloned())
        .collect();
    assert!(
        result.is_ok(),
        "{result:?}; Watch authorization headers: {watches:?}; not serving: {:?}",
        ch.stats().not_serving_addresses
    );
}

// ---- 11. TLS targets -------------------------------------------------------------------------------------

#[tokio::test]
async fn health_checking_works_over_tls_with_an_authority_override() {
    use interop::tls::{server_config, TestCa, Usage, INTEROP_SERVER_NAMES};
    let ca = TestCa::new("health CA").expect("CA");
    let leaf = ca.issue(INTEROP_SERVER_NAMES, Usage::Server).expect("leaf");
    let config = server_config(&leaf, &[b"h2"], None).expect("server config");
    let a = server::start_tls("127.0.0.1:0".parse().expect("addr"), config.clone())
        .await
        .expect("a");
    let b = server::start_tls("127.0.0.1:0".parse().expect("addr"), config)
        .await
        .expect("b");
    a.health().set(SVC, ServingStatus::Serving);
    b.health().set(SVC, ServingStatus::NotServing);
    let ch = Channel::builder(support::ipv4_target(&[a.addr, b.addr]))
        .authority("foo.test.google.fr:443")
        .tls(grpc_channel::TlsConfig::new().ca_certificate_pem(ca.cert_pem.clone()))
        .default_service_config(rr_health(SVC))
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let mut served = HashMap::<String, usize>::new();
    for _ in 0..20 {
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            ch.unary::<_, interop_proto::SimpleResponse>(
                interop_proto::paths::UNARY_CALL,
                Request::new(interop_proto::SimpleRequest {
                    fill_server_id: true,
                    ..Default::default()
                }),
            ),
        )
        .await
        .expect("no hang")
        .expect("call");
        *served.entry(r.into_inner().server_id).or_default() += 1;
    }
    assert_eq!(served.get(&a.addr.to_string()), Some(&20), "{served:?}");
    assert_eq!((a.health().watchers(SVC), b.health().watchers(SVC)), (1, 1));
    assert_eq!(ch.stats().not_serving_addresses, [b.addr.to_string()]);
}

// ---- 12. close() and dropping the channel end the Watches ------------------------------------------------

#[tokio::test(start_paused = true)]
async fn close_and_drop_end_the_watches() {
    let a = server::start("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("server");
    a.health().set(SVC, ServingStatus::Serving);
    for close in [true, false] {
        let ch = support::channel_with_config(&format!("ipv4:{}", a.addr), rr_health(SVC));
        ch.connect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(a.health().watchers(SVC), 1);
        if close {
            ch.close();
        } else {
            drop(ch);
        }
        tokio::time::timeout(Duration::from_secs(5), a.health().unwatched(SVC))
            .await
            .expect("the Watch ends on the server");
    }
}

// ---- 13. Outlier detection and health together ------------------------------------------------------------

/// `bad` fails every call (so outlier detection ejects it) while its health says SERVING; then its health
/// says NOT_SERVING. When the ejection ends, health still keeps it out; when it serves again it returns.
#[tokio::test(start_paused = true)]
async fn ejection_and_health_compose() {
    let start = || server::start("127.0.0.1:0".parse().expect("addr"));
    let (a, b) = (start().await.expect("a"), start().await.expect("b"));
    let bad = server::start_with(
        "127.0.0.1:0".parse().expect("addr"),
        server::ServerOptions::new().fail_unary_calls(Status::new(Code::Unavailable, "sick")),
    )
    .await
    .expect("bad");
    for s in [&a, &b, &bad] {
        s.health().set(SVC, ServingStatus::Serving);
    }
    let config = format!(
        r#"{{"healthCheckConfig":{{"serviceName":"{SVC}"}},
            "loadBalancingConfig":[{{"outlier_detection_experimental":{{
            "interval":"1s","baseEjectionTime":"5s","maxEjectionPercent":50,
            "failurePercentageEjection":{{"threshold":50,"enforcementPercentage":100,
                                          "minimumHosts":3,"requestVolume":10}},
            "childPolicy":[{{"round_robin":{{}}}}]}}}}]}}"#
    );
    let ch =
        support::channel_with_config(&support::ipv4_target(&[a.addr, b.addr, bad.addr]), config);
    let failures = |n: usize| {
        let ch = ch.clone();
        async move {
            let mut failed = 0;
            for _ in 0..n {
                if named_call_interop(&ch).await.is_err() {
                    failed += 1;
                }
            }
            failed
        }
    };
    let mut ejected = false;
    for _ in 0..5 {
        failures(60).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        if ch.stats().ejected_addresses == [bad.addr.to_string()] {
            ejected = true;
            break;
        }
    }
    assert!(ejected, "{:?}", ch.stats());
    bad.health().set(SVC, ServingStatus::NotServing);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(ch.stats().not_serving_addresses, [bad.addr.to_string()]);
    // The ejection ends (5 s); health still keeps `bad` out.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(ch.stats().ejected_addresses.is_empty(), "{:?}", ch.stats());
    assert_eq!(
        failures(30).await,
        0,
        "health keeps `bad` out after its ejection"
    );
    bad.health().set(SVC, ServingStatus::Serving);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let failed = failures(30).await;
    assert!(
        (5..=15).contains(&failed),
        "back in rotation: {failed} of 30 failed"
    );
}

/// `AddressStats::health` is "what its health check last said", `Health::Unknown` until the check
/// answered (issue 35, scope 5). When a new config asks about another service, the channel restarts every
/// Watch and its policy takes each address as Unknown until the new Watch answers (A17: a Watch starts
/// CONNECTING), so round_robin stops picking it. The stats keep showing the old service's SERVING
/// meanwhile: READY and Serving for an address the channel will not use. Wrong: `control/event_loop.rs`
/// (`restart_health_watches`) sets the policy's health to Unknown for each READY connection but not the
/// per-address table (`AddressTable::set_health`, `control/address_stats.rs`).
#[tokio::test(start_paused = true)]
async fn per_address_health_is_unknown_while_the_new_services_watch_has_not_answered() {
    use grpc_channel::lb::Health;
    use grpc_channel::resolver::{manual, Address, Endpoint};

    let a = Backend::start("127.0.0.1:0".parse().expect("addr"), "a").await;
    a.set("first", ServingStatus::Serving);
    let key = a.addr.to_string();
    let (resolver, pushed) = manual("health-restart");
    pushed
        .set(vec![Endpoint::new(Address::Tcp(a.addr))])
        .expect("endpoints");
    pushed
        .set_service_config(Some(rr_health("first")))
        .expect("config");
    let ch = Channel::builder("health-restart:///fleet")
        .resolver(resolver)
        .build()
        .expect("channel");
    ch.connect();
    let health = |ch: &Channel| ch.stats().addresses.get(&key).and_then(|s| s.health);
    for _ in 0..1000 {
        if health(&ch) == Some(Health::Serving) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        health(&ch),
        Some(Health::Serving),
        "{:?}",
        ch.stats().addresses
    );
    // "second" has no status: its Watch never answers.
    pushed
        .set_service_config(Some(rr_health("second")))
        .expect("config");
    for _ in 0..1000 {
        if a.watches().iter().any(|(_, s)| s == "second") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        a.watches().iter().any(|(_, s)| s == "second"),
        "{:?}",
        a.watches()
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stats = ch.stats();
    assert_eq!(
        stats.addresses[&key].health,
        Some(Health::Unknown),
        "the Watch for the new service has not answered: {:#?}",
        stats.addresses
    );
}
