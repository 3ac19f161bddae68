//! TLS at its edges: stalled handshakes against deadlines and the connect timeout, causes named (and not
//! misnamed), every target kind, load balancing, GOAWAY / reconnection / keepalive over TLS, wait-for-ready
//! through TLS failures, large and many streams, and an empty platform store (in a child process:
//! environment variables are process-global).
//!
//! Every call is bounded ([`NO_HANG`]); time-based assertions run on tokio's paused clock.

use grpc_test_support as support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, ConnectivityState, Request, Status, TlsConfig};
use interop::tls::{server_config, CertifiedPem, TestCa, Usage, INTEROP_SERVER_NAMES};
use interop_proto::{paths, Empty, SimpleRequest, SimpleResponse};
use support::guards::{no_hang, NO_HANG};
use support::h2_server::{answer, defaults, handler, H2Server};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::time::Instant;

const SLACK: Duration = Duration::from_millis(100);
const UNARY: &str = "/edges.Svc/Unary";

struct Pki {
    ca: TestCa,
    server: CertifiedPem,
}

fn pki() -> Pki {
    let ca = TestCa::new("tls edges CA").expect("CA");
    let server = ca.issue(INTEROP_SERVER_NAMES, Usage::Server).expect("leaf");
    Pki { ca, server }
}

fn h2_only(identity: &CertifiedPem) -> Arc<rustls::ServerConfig> {
    server_config(identity, &[b"h2"], None).expect("server config")
}

/// A TLS channel to `target` trusting `ca`.
fn ca_channel(target: impl Into<String>, ca: &TestCa) -> Channel {
    Channel::builder(target)
        .tls(ca_tls(ca))
        .build()
        .expect("channel")
}

fn ca_tls(ca: &TestCa) -> TlsConfig {
    TlsConfig::new().ca_certificate_pem(ca.cert_pem.clone())
}

async fn empty_call(ch: &Channel, timeout: Option<Duration>) -> Result<(), Status> {
    let mut req = Request::new(Empty {});
    if let Some(t) = timeout {
        req = req.with_timeout(t);
    }
    ch.unary::<_, Empty>(paths::EMPTY_CALL, req)
        .await
        .map(|_| ())
}

async fn raw_call(ch: &Channel) -> Result<Bytes, Status> {
    ch.unary_raw(UNARY, Request::new(Bytes::new()))
        .await
        .map(|r| r.into_message())
}

/// A TCP listener whose connections are accepted and held open; nothing is ever read or written (a
/// server that stalls the TLS handshake).
async fn stalled_tcp_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    addr
}

/// What a TLS test server does with a connection once the TLS handshake is done.
type Behaviour = Arc<
    dyn Fn(tokio_rustls::server::TlsStream<tokio::net::TcpStream>, usize) -> futures_like::BoxFut
        + Send
        + Sync,
>;

mod futures_like {
    pub(crate) type BoxFut = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
}

type TlsIo = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

fn behaviour<F>(f: F) -> Behaviour
where
    F: Fn(TlsIo, usize) -> futures_like::BoxFut + Send + Sync + 'static,
{
    Arc::new(f)
}

/// A TLS server on `bind` whose configuration can be swapped; counts accepted TCP connections and failed
/// TLS handshakes (`failed` is notified on each).
struct TlsServer {
    addr: SocketAddr,
    config: Arc<parking_lot::Mutex<Arc<rustls::ServerConfig>>>,
    failed_handshakes: Arc<AtomicUsize>,
    failed: Arc<Notify>,
    connections: Arc<AtomicUsize>,
}

async fn tls_server_on(
    bind: &str,
    config: Arc<rustls::ServerConfig>,
    behaviour: Behaviour,
) -> TlsServer {
    tls_server_shared(bind, Arc::new(parking_lot::Mutex::new(config)), behaviour).await
}

async fn tls_server_shared(
    bind: &str,
    config: Arc<parking_lot::Mutex<Arc<rustls::ServerConfig>>>,
    behaviour: Behaviour,
) -> TlsServer {
    let listener = tokio::net::TcpListener::bind(bind).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let failed_handshakes = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(Notify::new());
    let connections = Arc::new(AtomicUsize::new(0));
    let (c, fh, f, n) = (
        config.clone(),
        failed_handshakes.clone(),
        failed.clone(),
        connections.clone(),
    );
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let number = n.fetch_add(1, Ordering::SeqCst) + 1;
            let acceptor = tokio_rustls::TlsAcceptor::from(c.lock().clone());
            let (fh, f, behaviour) = (fh.clone(), f.clone(), behaviour.clone());
            tokio::spawn(async move {
                match acceptor.accept(tcp).await {
                    Ok(io) => behaviour(io, number).await,
                    Err(_) => {
                        fh.fetch_add(1, Ordering::SeqCst);
                        f.notify_one();
                    }
                }
            });
        }
    });
    TlsServer {
        addr,
        config,
        failed_handshakes,
        failed,
        connections,
    }
}

/// Serves HTTP/2: every request is answered with one message `conn<N>` and OK.
async fn serve_h2<T: AsyncRead + AsyncWrite + Unpin>(io: T, number: usize) {
    let Ok(mut conn) = h2::server::handshake(io).await else {
        return;
    };
    while let Some(Ok((_, mut respond))) = conn.accept().await {
        answer(&mut respond, format!("conn{number}").as_bytes());
    }
}

fn serve_ok() -> Behaviour {
    behaviour(|io, n| Box::pin(serve_h2(io, n)))
}

fn has_rustls_source(status: &Status) -> bool {
    use std::error::Error as _;
    let mut source = status.source();
    while let Some(s) = source {
        if s.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        source = s.source();
    }
    false
}

// --- Stalled handshakes: deadlines and the connect timeout ---

/// A server that accepts TCP and never answers the ClientHello: a call with a 1 s deadline ends by then.
#[tokio::test(start_paused = true)]
async fn stalled_tls_handshake_call_ends_at_its_deadline() {
    let pki = pki();
    let addr = stalled_tcp_server().await;
    let ch = ca_channel(format!("ipv4:{addr}"), &pki.ca);
    let deadline = Duration::from_secs(1);
    let start = Instant::now();
    let status = no_hang("stalled TLS", empty_call(&ch, Some(deadline)))
        .await
        .expect_err("no TLS answer");
    let elapsed = start.elapsed();
    eprintln!("a user sees after {elapsed:?}: {status}");
    assert!(elapsed <= deadline + SLACK, "ended after {elapsed:?}");
    assert!(
        matches!(status.code(), Code::DeadlineExceeded | Code::Unavailable),
        "{status:?}"
    );
}

/// Same, with an enormous connect timeout (a user-given extreme): the call's deadline still holds.
#[tokio::test(start_paused = true)]
async fn stalled_tls_handshake_with_a_huge_connect_timeout_still_ends_at_the_deadline() {
    let pki = pki();
    let addr = stalled_tcp_server().await;
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .tls(ca_tls(&pki.ca))
        .connect_timeout(Duration::MAX)
        .build()
        .expect("channel");
    let deadline = Duration::from_secs(3);
    let start = Instant::now();
    let status = no_hang("stalled TLS", empty_call(&ch, Some(deadline)))
        .await
        .expect_err("no TLS answer");
    let elapsed = start.elapsed();
    eprintln!("a user sees after {elapsed:?}: {status}");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(elapsed <= deadline + SLACK, "ended after {elapsed:?}");
}

/// No call deadline: the stalled TLS handshake is abandoned at the connect timeout, and the status says
/// that it was the TLS handshake that timed out (distinguishable from a TCP connect that timed out, as the
/// unix: path's "TLS handshake with ... timed out" already is).
#[tokio::test(start_paused = true)]
async fn stalled_tls_handshake_fails_at_the_connect_timeout_naming_tls() {
    let pki = pki();
    let addr = stalled_tcp_server().await;
    let connect_timeout = Duration::from_secs(2);
    let ch = Channel::builder(format!("ipv4:{addr}"))
        .tls(ca_tls(&pki.ca))
        .connect_timeout(connect_timeout)
        .build()
        .expect("channel");
    let start = Instant::now();
    let status = no_hang("stalled TLS", empty_call(&ch, None))
        .await
        .expect_err("no TLS answer");
    let elapsed = start.elapsed();
    eprintln!("a user sees after {elapsed:?}: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        elapsed >= connect_timeout && elapsed <= connect_timeout + SLACK,
        "ended after {elapsed:?}, not at the {connect_timeout:?} connect timeout"
    );
    assert!(
        status.message().contains("TLS"),
        "the message names the TLS handshake as what timed out: {status}"
    );
}

/// The unix: path (transport.rs) with a stalled TLS handshake: UNAVAILABLE at the connect timeout.
#[tokio::test(start_paused = true)]
async fn stalled_tls_handshake_on_a_unix_target_fails_at_the_connect_timeout() {
    let pki = pki();
    let dir = std::env::temp_dir().join(format!("grpc-tls-edges-stall-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("s.sock");
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).expect("bind unix");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let connect_timeout = Duration::from_secs(2);
    let ch = Channel::builder(format!("unix:{}", path.display()))
        .tls(ca_tls(&pki.ca))
        .connect_timeout(connect_timeout)
        .build()
        .expect("channel");
    let start = Instant::now();
    let status = no_hang("stalled TLS over unix", empty_call(&ch, None))
        .await
        .expect_err("no TLS answer");
    let elapsed = start.elapsed();
    eprintln!("a user sees after {elapsed:?}: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        elapsed >= connect_timeout && elapsed <= connect_timeout + SLACK,
        "ended after {elapsed:?}"
    );
    assert!(status.message().contains("TLS"), "{status}");
    let _ = std::fs::remove_dir_all(&dir);
}

// --- Causes named, and not misnamed ---

/// A TLS server that asks for no client certificate, completes the handshake and then hangs up (an
/// overloaded server, a TLS proxy whose backend is down): the client must not tell the user that the
/// server "may require a client certificate", nor call a completed handshake a failed one.
#[tokio::test]
async fn a_server_closing_after_a_good_handshake_is_not_blamed_on_client_certificates() {
    let pki = pki();
    let close: Behaviour = behaviour(|io, _| {
        Box::pin(async move {
            drop(io);
        })
    });
    let server = tls_server_on("127.0.0.1:0", h2_only(&pki.server), close).await;
    let ch = ca_channel(format!("ipv4:{}", server.addr), &pki.ca);
    let status = no_hang("close after handshake", empty_call(&ch, None))
        .await
        .expect_err("the server hangs up");
    eprintln!("a user sees: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        !status.message().contains("client certificate"),
        "the server never asked for a client certificate, yet the message blames one: {status}"
    );
}

/// Over an established TLS session the server's first decrypted bytes happen to start 0x16 0x03 (a
/// misbehaving HTTP/2 peer): the client must not say "this channel is plaintext" on a TLS channel.
#[tokio::test]
async fn a_tls_channel_is_never_told_it_is_plaintext() {
    let pki = pki();
    let garbage: Behaviour = behaviour(|mut io, _| {
        Box::pin(async move {
            let _ = io
                .write_all(&[0x16, 0x03, 0x03, 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
                .await;
            let _ = io.flush().await;
            std::future::pending::<()>().await;
        })
    });
    let server = tls_server_on("127.0.0.1:0", h2_only(&pki.server), garbage).await;
    let ch = ca_channel(format!("ipv4:{}", server.addr), &pki.ca);
    let status = no_hang("garbage after handshake", empty_call(&ch, None))
        .await
        .expect_err("not HTTP/2");
    eprintln!("a user sees: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        !status.message().contains("this channel is plaintext"),
        "a TLS channel is told it is plaintext: {status}"
    );
}

/// Mutual TLS refused (TLS 1.3: after the client's handshake is done) on a unix: target (transport.rs,
/// which sends no PING): the cause must be named as on TCP targets.
#[tokio::test]
async fn mutual_tls_refusal_on_a_unix_target_names_the_cause() {
    let pki = pki();
    let client_ca = TestCa::new("client CA").expect("CA");
    let config = server_config(&pki.server, &[b"h2"], Some(&client_ca.cert_pem)).expect("mTLS");
    let dir = std::env::temp_dir().join(format!("grpc-tls-edges-mtls-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("s.sock");
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).expect("bind unix");
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        while let Ok((io, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(io) = acceptor.accept(io).await {
                    serve_h2(io, 1).await;
                }
            });
        }
    });
    let ch = ca_channel(format!("unix:{}", path.display()), &pki.ca);
    let status = no_hang("mTLS over unix", empty_call(&ch, None))
        .await
        .expect_err("no client certificate");
    eprintln!(
        "a user sees: {status} (rustls::Error in the source chain: {})",
        has_rustls_source(&status)
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("TLS handshake failed")
            && status.message().contains("client certificate"),
        "the cause is named as on a TCP target: {status}"
    );
}

// --- Target kinds and server names ---

#[tokio::test]
async fn ipv6_literal_targets_over_tls() {
    let pki = pki();
    let server = tls_server_on("[::1]:0", h2_only(&pki.server), serve_ok()).await;
    let port = server.addr.port();
    for target in [
        format!("https://[::1]:{port}"),
        format!("ipv6:[::1]:{port}"),
        format!("[::1]:{port}"),
        format!("dns:///[::1]:{port}"),
    ] {
        let ch = ca_channel(target.clone(), &pki.ca);
        no_hang(&target, raw_call(&ch))
            .await
            .unwrap_or_else(|e| panic!("{target}: {e:?}"));
    }
}

/// The authority override's host is the server name, with or without a port and as an IPv6 literal;
/// `server_name` may be an IP address.
#[tokio::test]
async fn server_names_from_authority_overrides_and_ip_server_names() {
    let pki = pki();
    let server = tls_server_on("127.0.0.1:0", h2_only(&pki.server), serve_ok()).await;
    let port = server.addr.port();
    let target = format!("localhost:{port}");
    for authority in [
        format!("foo.test.google.fr:{port}"),
        "foo.test.google.fr".to_owned(),
        format!("[::1]:{port}"),
        "[::1]".to_owned(),
    ] {
        let ch = Channel::builder(target.clone())
            .authority(authority.clone())
            .tls(ca_tls(&pki.ca))
            .build()
            .unwrap_or_else(|e| panic!("{authority}: {e}"));
        no_hang(&authority, raw_call(&ch))
            .await
            .unwrap_or_else(|e| panic!("authority {authority}: {e:?}"));
    }
    // A wrong authority host is a name mismatch.
    let ch = Channel::builder(target.clone())
        .authority("wrong.example:1")
        .tls(ca_tls(&pki.ca))
        .build()
        .expect("channel");
    let status = no_hang("wrong authority", raw_call(&ch))
        .await
        .expect_err("name mismatch");
    assert!(
        status
            .message()
            .contains("not valid for the name \"wrong.example\""),
        "{status}"
    );
    for name in ["127.0.0.1", "::1"] {
        let ch = Channel::builder(target.clone())
            .tls(ca_tls(&pki.ca).server_name(name))
            .build()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        no_hang(name, raw_call(&ch))
            .await
            .unwrap_or_else(|e| panic!("server_name {name}: {e:?}"));
    }
}

/// User-given extremes are build errors, not panics.
#[test]
fn extreme_tls_options_are_build_errors() {
    let long = "a".repeat(100_000);
    for name in ["", " ", "a..b", long.as_str(), "\0", "[::1]:443"] {
        let r = Channel::builder("localhost:1")
            .tls(TlsConfig::new().webpki_roots().server_name(name))
            .build();
        assert!(
            r.is_err(),
            "server name {:?} accepted",
            &name[..name.len().min(20)]
        );
    }
    let r = Channel::builder("localhost:1")
        .tls(
            TlsConfig::new()
                .webpki_roots()
                .identity_pem(b"x".to_vec(), b"y".to_vec()),
        )
        .build();
    assert!(r.is_err(), "garbage identity accepted");
    // Defaults of URL targets.
    let ch = Channel::new("http://localhost").expect("http");
    assert_eq!(ch.target().authority(), "localhost:80");
    let ch = Channel::builder("https://localhost")
        .tls(TlsConfig::new().webpki_roots())
        .build()
        .expect("https");
    assert_eq!(ch.target().authority(), "localhost:443");
    let ch = Channel::builder("localhost")
        .tls(TlsConfig::new().webpki_roots())
        .build()
        .expect("bare host");
    assert_eq!(ch.target().authority(), "localhost:443");
}

// --- Load balancing ---

/// pick_first: the first address fails TLS (a certificate from an unknown CA), the second is fine.
#[tokio::test]
async fn pick_first_moves_past_a_tls_broken_address() {
    let pki = pki();
    let stranger = TestCa::new("stranger").expect("CA");
    let bad_leaf = stranger
        .issue(INTEROP_SERVER_NAMES, Usage::Server)
        .expect("leaf");
    let bad = tls_server_on("127.0.0.1:0", h2_only(&bad_leaf), serve_ok()).await;
    let good = tls_server_on("127.0.0.1:0", h2_only(&pki.server), serve_ok()).await;
    let ch = Channel::builder(format!("ipv4:{},{}", bad.addr, good.addr))
        .tls(ca_tls(&pki.ca).server_name("localhost"))
        .build()
        .expect("channel");
    for _ in 0..3 {
        no_hang("pick_first", raw_call(&ch))
            .await
            .expect("the second address serves");
    }
    assert!(bad.failed_handshakes.load(Ordering::SeqCst) >= 1);
    assert_eq!(good.connections.load(Ordering::SeqCst), 1);
}

/// A wait-for-ready call keeps waiting through TLS failures and succeeds once the server's certificate is
/// fixed.
#[tokio::test]
async fn wait_for_ready_waits_through_tls_failures() {
    let pki = pki();
    let stranger = TestCa::new("stranger").expect("CA");
    let bad_leaf = stranger
        .issue(INTEROP_SERVER_NAMES, Usage::Server)
        .expect("leaf");
    let server = tls_server_on("127.0.0.1:0", h2_only(&bad_leaf), serve_ok()).await;
    let ch = ca_channel(format!("ipv4:{}", server.addr), &pki.ca);
    let call = {
        let ch = ch.clone();
        tokio::spawn(async move {
            ch.unary_raw(UNARY, Request::new(Bytes::new()).with_wait_for_ready(true))
                .await
                .map(|r| r.into_message())
        })
    };
    no_hang("a failed handshake", server.failed.notified()).await;
    // A fail-fast call fails meanwhile, naming the cause.
    let status = no_hang("fail fast", raw_call(&ch))
        .await
        .expect_err("unknown CA");
    assert!(
        status.message().contains("unknown certificate authority"),
        "{status}"
    );
    assert!(
        !call.is_finished(),
        "the wait-for-ready call gave up on a TLS failure"
    );
    *server.config.lock() = h2_only(&pki.server);
    let answered = no_hang("wait-for-ready", call)
        .await
        .expect("task")
        .expect("served once the certificate is good");
    assert!(answered.starts_with(b"conn"));
}

// --- GOAWAY, reconnection and keepalive over TLS ---

/// Connection 1 answers one call and then shuts down gracefully (GOAWAY): later calls go to connection 2.
#[tokio::test]
async fn goaway_over_tls_then_calls_use_a_new_tls_connection() {
    let pki = pki();
    let behaviour: Behaviour = behaviour(|io, n| {
        Box::pin(async move {
            let Ok(mut conn) = h2::server::handshake(io).await else {
                return;
            };
            let mut answered = 0;
            while let Some(Ok((_, mut respond))) = conn.accept().await {
                answer(&mut respond, format!("conn{n}").as_bytes());
                answered += 1;
                if n == 1 && answered == 1 {
                    conn.graceful_shutdown();
                }
            }
        })
    });
    let server = tls_server_on("127.0.0.1:0", h2_only(&pki.server), behaviour).await;
    let ch = ca_channel(format!("ipv4:{}", server.addr), &pki.ca);
    assert_eq!(
        &no_hang("first", raw_call(&ch)).await.expect("first")[..],
        b"conn1"
    );
    let mut attempts = 0;
    loop {
        attempts += 1;
        let got = no_hang("after GOAWAY", raw_call(&ch)).await;
        match got {
            Ok(b) if &b[..] == b"conn2" => break,
            Ok(_) => {}
            // A call racing the GOAWAY may fail UNAVAILABLE; but not forever.
            Err(e) => assert_eq!(e.code(), Code::Unavailable, "{e:?}"),
        }
        assert!(attempts < 50, "calls never moved to a new TLS connection");
        tokio::task::yield_now().await;
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 2);
}

/// The server drops the TLS connection (no close_notify) after a call; once the channel has seen it, the
/// next call reconnects over TLS.
#[tokio::test]
async fn reconnects_over_tls_after_the_server_closes() {
    let pki = pki();
    let drop_now = Arc::new(Notify::new());
    let d = drop_now.clone();
    let behaviour: Behaviour = behaviour(move |io, n| {
        let d = d.clone();
        Box::pin(async move {
            let Ok(mut conn) = h2::server::handshake(io).await else {
                return;
            };
            loop {
                tokio::select! {
                    accepted = conn.accept() => {
                        let Some(Ok((_, mut respond))) = accepted else { return };
                        answer(&mut respond, format!("conn{n}").as_bytes());
                    }
                    () = d.notified(), if n == 1 => return,
                }
            }
        })
    });
    let server = tls_server_on("127.0.0.1:0", h2_only(&pki.server), behaviour).await;
    let ch = ca_channel(format!("ipv4:{}", server.addr), &pki.ca);
    assert_eq!(
        &no_hang("first", raw_call(&ch)).await.expect("first")[..],
        b"conn1"
    );
    assert_eq!(ch.state(), ConnectivityState::Ready);
    drop_now.notify_one();
    let state = ch
        .wait_for_state_change(ConnectivityState::Ready, Instant::now() + NO_HANG)
        .await;
    assert_ne!(
        state,
        ConnectivityState::Ready,
        "the close was never noticed"
    );
    assert_eq!(
        &no_hang("after the close", raw_call(&ch))
            .await
            .expect("reconnected")[..],
        b"conn2"
    );
}

/// Keepalive over TLS: a server that stops driving its TLS connection is found out by an unanswered PING;
/// the channel reconnects over TLS. The connection is made on the running clock (the paused clock's
/// auto-advance can fire the connect timeout while loopback TLS bytes are in flight), then the clock is
/// paused for the keepalive timing and resumed for the reconnection.
#[tokio::test]
async fn keepalive_over_tls_closes_a_frozen_connection_and_reconnects() {
    let pki = pki();
    let freeze = Arc::new(Notify::new());
    let f = freeze.clone();
    let behaviour: Behaviour = behaviour(move |io, n| {
        let f = f.clone();
        Box::pin(async move {
            let Ok(mut conn) = h2::server::handshake(io).await else {
                return;
            };
            let frozen = loop {
                tokio::select! {
                    accepted = conn.accept() => {
                        let Some(Ok((req, mut respond))) = accepted else { return };
                        if req.uri().path() == "/edges.Svc/Freeze" {
                            break Some(respond);
                        }
                        answer(&mut respond, format!("conn{n}").as_bytes());
                    }
                    () = f.notified() => break None,
                }
            };
            let _keep = (conn, frozen);
            std::future::pending::<()>().await;
        })
    });
    let server = tls_server_on("127.0.0.1:0", h2_only(&pki.server), behaviour).await;
    let ch = Channel::builder(format!("ipv4:{}", server.addr))
        .tls(ca_tls(&pki.ca))
        .keepalive_time(Duration::from_secs(10))
        .keepalive_timeout(Duration::from_secs(5))
        .build()
        .expect("channel");
    assert_eq!(
        &no_hang("first", raw_call(&ch)).await.expect("first")[..],
        b"conn1"
    );
    tokio::time::pause();
    let start = Instant::now();
    let status = tokio::time::timeout(
        Duration::from_secs(600),
        ch.unary_raw("/edges.Svc/Freeze", Request::new(Bytes::new())),
    )
    .await
    .expect("keepalive ends the call")
    .expect_err("closed");
    let elapsed = start.elapsed();
    eprintln!("a user sees after {elapsed:?}: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        elapsed >= Duration::from_secs(14) && elapsed <= Duration::from_millis(15_100),
        "{elapsed:?}"
    );
    tokio::time::resume();
    assert_eq!(
        &no_hang("reconnect", raw_call(&ch))
            .await
            .expect("reconnected")[..],
        b"conn2"
    );
}

// --- Volume ---

/// 64 concurrent calls with 1 MB each way over one TLS connection.
#[tokio::test]
async fn many_concurrent_large_calls_over_tls() {
    let pki = pki();
    let server =
        interop::server::start_tls(SocketAddr::from(([127, 0, 0, 1], 0)), h2_only(&pki.server))
            .await
            .expect("bind");
    let ch = ca_channel(format!("ipv4:{}", server.addr), &pki.ca);
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..64u8 {
        let ch = ch.clone();
        calls.spawn(async move {
            let request = SimpleRequest {
                response_size: 1 << 20,
                payload: Some(interop_proto::Payload {
                    body: vec![i; 1 << 20].into(),
                    ..Default::default()
                }),
                ..Default::default()
            };
            ch.unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(request))
                .await
                .map(|r| r.into_message().payload.map(|p| p.body.len()).unwrap_or(0))
        });
    }
    let all = no_hang("64 large calls", async {
        let mut lens = Vec::new();
        while let Some(r) = calls.join_next().await {
            lens.push(r.expect("task").expect("call"));
        }
        lens
    })
    .await;
    assert_eq!(all.len(), 64);
    assert!(all.iter().all(|&l| l == 1 << 20));
}

// --- An empty platform store (child process) ---

const CHILD: &str = "TLS_EDGES_EMPTY_STORE_CHILD";

/// Runs in the child only: `https://` with the platform's roots when the store is empty fails clearly
/// (at build time, or as UNAVAILABLE), without a panic.
#[tokio::test]
async fn empty_platform_store_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    match Channel::new("https://localhost:1") {
        Err(e) => {
            println!("CHILD build error: {e}");
            assert!(e.to_string().contains("root"), "{e}");
        }
        Ok(ch) => {
            let status = no_hang("empty store", empty_call(&ch, None))
                .await
                .expect_err("nothing listens");
            println!("CHILD call: {status}");
            assert_eq!(status.code(), Code::Unavailable);
        }
    }
}

#[test]
fn an_empty_platform_store_fails_clearly() {
    let dir = std::env::temp_dir().join(format!("grpc-tls-edges-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, b"").expect("write");
    // The child test's name as the harness lists it: its module path without the binary's name.
    let child_test = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::empty_platform_store_child"),
        None => "empty_platform_store_child".to_owned(),
    };
    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", &child_test, "--nocapture"])
        .env(CHILD, "1")
        .env("SSL_CERT_FILE", &empty)
        .env("SSL_CERT_DIR", &dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // A bound, not a measurement.
    let give_up = std::time::Instant::now() + NO_HANG;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if std::time::Instant::now() > give_up {
            let _ = child.kill();
            panic!("the child hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("output");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("{text}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "the child failed: {text}");
    assert!(text.contains("CHILD"), "the child ran: {text}");
}

// --- unix: targets (transport.rs) ---

fn unix_path(tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("grpc-tls-edges-{tag}-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("s.sock");
    let _ = std::fs::remove_file(&path);
    (dir, path)
}

/// Plaintext against a TLS unix server says the server expects TLS; TLS against a plaintext unix server
/// says the TLS handshake failed; neither hangs.
#[tokio::test]
async fn tls_mismatch_on_unix_targets_fails_fast_both_ways() {
    let pki = pki();
    let (dir, tls_path) = unix_path("mismatch");
    let plain_path = dir.join("plain.sock");
    let _ = std::fs::remove_file(&plain_path);
    let tls_listener = tokio::net::UnixListener::bind(&tls_path).expect("bind");
    let plain_listener = tokio::net::UnixListener::bind(&plain_path).expect("bind");
    let acceptor = tokio_rustls::TlsAcceptor::from(h2_only(&pki.server));
    tokio::spawn(async move {
        while let Ok((io, _)) = tls_listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(io) = acceptor.accept(io).await {
                    serve_h2(io, 1).await;
                }
            });
        }
    });
    tokio::spawn(async move {
        while let Ok((io, _)) = plain_listener.accept().await {
            tokio::spawn(serve_h2(io, 1));
        }
    });
    let plaintext = Channel::new(format!("unix:{}", tls_path.display())).expect("channel");
    let status = no_hang("plaintext vs TLS", raw_call(&plaintext))
        .await
        .expect_err("wants TLS");
    eprintln!("a user sees: {status}");
    assert!(status.message().contains("expects TLS"), "{status}");
    let tls = ca_channel(format!("unix:{}", plain_path.display()), &pki.ca);
    let status = no_hang("TLS vs plaintext", raw_call(&tls))
        .await
        .expect_err("no TLS");
    eprintln!("a user sees: {status}");
    assert!(
        status.message().contains("TLS handshake failed"),
        "{status}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A graceful GOAWAY over TLS on a unix: target: later calls use a new TLS connection.
#[tokio::test]
async fn goaway_over_tls_on_a_unix_target() {
    let pki = pki();
    let (dir, path) = unix_path("goaway");
    // Connection 1 shuts down gracefully once it has answered one call.
    let first_answered = Arc::new(AtomicBool::new(false));
    let server = H2Server::unix_tls(
        path.clone(),
        h2_only(&pki.server),
        defaults,
        handler(move |mut stream| {
            let first_answered = first_answered.clone();
            async move {
                stream.ok(format!("conn{}", stream.conn).as_bytes());
                if stream.conn == 1 && !first_answered.swap(true, Ordering::SeqCst) {
                    stream.goaway_connection();
                }
            }
        }),
    );
    let ch = ca_channel(format!("unix:{}", path.display()), &pki.ca);
    assert_eq!(
        &no_hang("first", raw_call(&ch)).await.expect("first")[..],
        b"conn1"
    );
    let mut attempts = 0;
    loop {
        attempts += 1;
        match no_hang("after GOAWAY", raw_call(&ch)).await {
            Ok(b) if &b[..] == b"conn2" => break,
            Ok(_) => {}
            Err(e) => assert_eq!(e.code(), Code::Unavailable, "{e:?}"),
        }
        assert!(attempts < 50, "calls never moved to a new TLS connection");
        tokio::task::yield_now().await;
    }
    assert_eq!(server.connections(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// round_robin with one backend whose certificate is from an unknown CA: every call goes to the good one.
#[tokio::test]
async fn round_robin_skips_a_tls_broken_backend() {
    let pki = pki();
    let stranger = TestCa::new("stranger").expect("CA");
    let bad_leaf = stranger
        .issue(INTEROP_SERVER_NAMES, Usage::Server)
        .expect("leaf");
    let bad = tls_server_on("127.0.0.1:0", h2_only(&bad_leaf), serve_ok()).await;
    let good = tls_server_on("127.0.0.1:0", h2_only(&pki.server), serve_ok()).await;
    let ch = Channel::builder(format!("ipv4:{},{}", bad.addr, good.addr))
        .default_service_config(r#"{"loadBalancingConfig": [{"round_robin": {}}]}"#)
        .tls(ca_tls(&pki.ca).server_name("localhost"))
        .build()
        .expect("channel");
    for i in 0..10 {
        no_hang("round_robin", raw_call(&ch))
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e:?}"));
    }
}

/// A unix: target whose server stalls the TLS handshake: a call with a deadline ends by it.
#[tokio::test(start_paused = true)]
async fn stalled_tls_handshake_on_a_unix_target_ends_at_the_call_deadline() {
    let pki = pki();
    let (dir, path) = unix_path("stall-deadline");
    let listener = tokio::net::UnixListener::bind(&path).expect("bind unix");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let ch = ca_channel(format!("unix:{}", path.display()), &pki.ca);
    let deadline = Duration::from_secs(1);
    let start = Instant::now();
    let status = no_hang("stalled", empty_call(&ch, Some(deadline)))
        .await
        .expect_err("stalled");
    let elapsed = start.elapsed();
    eprintln!("a user sees after {elapsed:?}: {status}");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(elapsed <= deadline + SLACK, "{elapsed:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Wait-for-ready through a TLS failure (mutual TLS refused, TLS 1.3) on a unix: target and on a TCP
/// target: the call waits, and succeeds once the server stops requiring a client certificate.
async fn wait_for_ready_through_mtls_refusal(unix: bool) {
    let pki = pki();
    let client_ca = TestCa::new("client CA").expect("CA");
    let mtls = server_config(&pki.server, &[b"h2"], Some(&client_ca.cert_pem)).expect("mTLS");
    let config = Arc::new(parking_lot::Mutex::new(mtls));
    let failed = Arc::new(Notify::new());
    let (dir, path) = unix_path(if unix { "wfr-unix" } else { "wfr-tcp" });
    let target = if unix {
        let listener = tokio::net::UnixListener::bind(&path).expect("bind");
        let (c, f) = (config.clone(), failed.clone());
        tokio::spawn(async move {
            while let Ok((io, _)) = listener.accept().await {
                let acceptor = tokio_rustls::TlsAcceptor::from(c.lock().clone());
                let f = f.clone();
                tokio::spawn(async move {
                    match acceptor.accept(io).await {
                        Ok(io) => serve_h2(io, 1).await,
                        Err(_) => f.notify_one(),
                    }
                });
            }
        });
        format!("unix:{}", path.display())
    } else {
        let server = tls_server_shared("127.0.0.1:0", config.clone(), serve_ok()).await;
        let (sf, f) = (server.failed.clone(), failed.clone());
        tokio::spawn(async move {
            sf.notified().await;
            f.notify_one();
        });
        format!("ipv4:{}", server.addr)
    };
    let ch = ca_channel(target.clone(), &pki.ca);
    let call = {
        let ch = ch.clone();
        tokio::spawn(async move {
            ch.unary_raw(UNARY, Request::new(Bytes::new()).with_wait_for_ready(true))
                .await
                .map(|r| r.into_message())
        })
    };
    no_hang("a refused handshake", failed.notified()).await;
    *config.lock() = h2_only(&pki.server);
    let result = no_hang("wait-for-ready", call).await.expect("task");
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(_) => {}
        Err(status) => panic!(
            "{target}: the wait-for-ready call ended on a TLS failure instead of waiting: {status:?}"
        ),
    }
}

#[tokio::test]
async fn wait_for_ready_through_mtls_refusal_on_a_tcp_target() {
    wait_for_ready_through_mtls_refusal(false).await;
}

#[tokio::test]
async fn wait_for_ready_through_mtls_refusal_on_a_unix_target() {
    wait_for_ready_through_mtls_refusal(true).await;
}
