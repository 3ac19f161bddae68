//! HTTP CONNECT proxies (gRFC A1) at their edges: answer parsing (RFC 9112 §5.2 obs-fold, many short
//! fields, no reason phrase, 101, a 200 then close), URI parsing (RFC 3986 empty port, credentials never in
//! errors or `Debug`), an IPv6 proxy, connection backoff after refusals, a trickling proxy,
//! Proxy-Authorization never reaching the target, and the channel's machinery through tunnels: round_robin,
//! GOAWAY, keepalive, IDLE, health checking, outlier detection, hedging, wait-for-ready; DNS when the name
//! goes to the proxy.

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use grpc_channel::{Channel, Code, Request};
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::guards::{GUARD, NO_HANG};
use support::h2_server::{defaults, handler, H2Server};
use support::{interop_server_handle as server, served as call, served_by as call_within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use support::scripted_proxy::{connect_target, read_head, upstream, ScriptedProxy};

type Script = Box<
    dyn Fn(TcpStream, String) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync,
>;

/// Tunnels to the request's target after answering `answer` in one write.
fn tunnels(answer: Vec<u8>) -> Script {
    let answer = Arc::new(answer);
    Box::new(move |mut client, head| {
        let answer = answer.clone();
        Box::pin(async move {
            let mut upstream = upstream(&head).await;
            client.write_all(&answer).await.expect("write");
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        })
    })
}

fn through(target: impl Into<String>, proxy_uri: String) -> Channel {
    Channel::builder(target)
        .proxy(proxy_uri)
        .service_config_lookup(false)
        .build()
        .expect("channel")
}

// ---------------------------------------------------------------------------------------------------
// The answer parser.

/// RFC 9112 §5.2: "A user agent that receives an obs-fold in a response message ... MUST replace each
/// received obs-fold with one or more SP octets prior to interpreting the field value." A 200 whose
/// `Proxy-Agent` is folded over two lines is a valid (if obsolete) answer, and must open the tunnel.
#[tokio::test]
async fn an_obs_folded_field_in_the_200_opens_the_tunnel() {
    let answer =
        b"HTTP/1.1 200 Connection established\r\nProxy-Agent: corp\r\n gateway 1.0\r\n\r\n";
    let parsed = grpc_channel::fuzzing::proxy_answer(answer);
    assert!(
        matches!(&parsed, Ok(Some(a)) if a.code == 200 && a.header_len == answer.len()),
        "{parsed:?}"
    );
    let backend = server().await;
    let proxy = ScriptedProxy::start(tunnels(answer.to_vec())).await;
    let channel = through(format!("ipv4:{}", backend.addr), proxy.uri());
    assert_eq!(
        call(&channel)
            .await
            .expect("a folded field is not a refusal"),
        backend.addr.to_string()
    );
}

/// The module promises an answer is bounded at 8 KiB; a 200 with 65 one-byte fields (well under 1 KiB)
/// is not "oversize" and must open the tunnel (httparse's fixed field array is an implementation limit,
/// not HTTP's).
#[tokio::test]
async fn a_200_with_many_short_fields_under_the_bound_opens_the_tunnel() {
    let mut answer = b"HTTP/1.1 200 Connection established\r\n".to_vec();
    for i in 0..65 {
        answer.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    answer.extend_from_slice(b"\r\n");
    assert!(answer.len() < 1024);
    let parsed = grpc_channel::fuzzing::proxy_answer(&answer);
    assert!(
        matches!(&parsed, Ok(Some(a)) if a.code == 200),
        "{} bytes: {parsed:?}",
        answer.len()
    );
    let backend = server().await;
    let proxy = ScriptedProxy::start(tunnels(answer)).await;
    let channel = through(format!("ipv4:{}", backend.addr), proxy.uri());
    assert_eq!(
        call(&channel).await.expect("65 short fields"),
        backend.addr.to_string()
    );
}

/// RFC 9112 §4: the reason phrase may be empty (`HTTP/1.1 200 \r\n`), and clients should accept a status
/// line without it (`HTTP/1.1 200\r\n`). A `Content-Length` on the 200 is ignored (RFC 9110 §9.3.6).
#[tokio::test]
async fn status_lines_without_a_reason_and_a_content_length_on_the_200() {
    let backend = server().await;
    for answer in [
        &b"HTTP/1.1 200\r\n\r\n"[..],
        b"HTTP/1.1 200 \r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        let proxy = ScriptedProxy::start(tunnels(answer.to_vec())).await;
        let channel = through(format!("ipv4:{}", backend.addr), proxy.uri());
        assert_eq!(
            call(&channel)
                .await
                .unwrap_or_else(|s| panic!("{:?}: {s}", String::from_utf8_lossy(answer))),
            backend.addr.to_string()
        );
    }
}

/// Every split point of an answer with early tunnel bytes parses the same (sans-IO).
#[test]
fn answers_split_at_every_byte() {
    let answer = b"HTTP/1.1 100 Continue\r\n\r\n";
    let full = b"HTTP/1.1 200 Connection established\r\nVia: 1.1 p\r\n\r\n\x00\x00\x12\x04";
    for cut in 0..answer.len() - 1 {
        assert_eq!(
            grpc_channel::fuzzing::proxy_answer(&answer[..cut]),
            Ok(None),
            "{cut}"
        );
    }
    let parsed = grpc_channel::fuzzing::proxy_answer(full)
        .expect("valid")
        .expect("complete");
    assert_eq!(&full[parsed.header_len..], b"\x00\x00\x12\x04");
    // A NUL in the reason phrase is not a 200 opening a tunnel silently.
    assert!(grpc_channel::fuzzing::proxy_answer(b"HTTP/1.1 200 O\x00K\r\n\r\n").is_err());
}

// ---------------------------------------------------------------------------------------------------
// The URI.

/// RFC 3986 §3.2.3: "URI producers and normalizers should omit the port component and its ':' delimiter
/// if port is empty" — an empty port is valid syntax and means the scheme's default (curl and Go's
/// `net/url` accept `http://proxy:`). The channel refuses to build.
#[test]
fn an_empty_port_in_the_proxy_uri_is_the_default_port() {
    let built = Channel::builder("dns:///api.example.com:443")
        .proxy("http://proxy.example:")
        .build();
    assert!(built.is_ok(), "{:?}", built.err());
}

/// A scheme-less value (read as `http://`) whose raw password contains `://` has its user and part of
/// its password quoted as "the scheme" in the build error: credentials in an error.
#[test]
fn a_malformed_uri_never_quotes_its_password() {
    let built = Channel::builder("dns:///api.example.com:443")
        .proxy("alice:hunter2://x@proxy.example:3128")
        .build();
    let err = built.expect_err("not a valid proxy URI");
    let shown = format!("{err} / {err:?}");
    assert!(!shown.contains("hunter2"), "the password shows: {shown}");
}

/// An IPv6 proxy, `http://[::1]:P`, is reached (and the CONNECT of an IPv6 target is bracketed).
#[tokio::test]
async fn an_ipv6_proxy_is_reached() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here; skipping");
        return;
    }
    let backend = server().await;
    let proxy = ScriptedProxy::start_on(
        "[::1]:0",
        tunnels(b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec()),
    )
    .await;
    let uri = format!("http://[::1]:{}", proxy.addr.port());
    let channel = through(format!("ipv4:{}", backend.addr), uri);
    assert_eq!(
        call(&channel).await.expect("through [::1]"),
        backend.addr.to_string()
    );
}

// ---------------------------------------------------------------------------------------------------
// The rest of the channel through the proxy.

/// gRFC A6 connection backoff (1 s initial, 1.6x, 20% jitter, 120 s max) applies to attempts the proxy
/// refuses: a wait-for-ready call over 10 s of paused time makes about 5 CONNECTs (0, ~1, ~2.6, ~5.2,
/// ~9.3 s), neither a tight loop nor a single attempt.
#[tokio::test(start_paused = true)]
async fn refusals_back_off_like_any_failed_connection() {
    let proxy = ScriptedProxy::start(|mut client, _| async move {
        let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await;
        let _ = client.shutdown().await;
    })
    .await;
    let channel = through("ipv4:127.0.0.1:9", proxy.uri());
    let request = Request::new(SimpleRequest::default())
        .with_wait_for_ready(true)
        .with_timeout(Duration::from_secs(10));
    let status = tokio::time::timeout(
        GUARD,
        channel.unary::<_, SimpleResponse>(paths::UNARY_CALL, request),
    )
    .await
    .expect("the call ends by itself")
    .expect_err("always refused");
    let attempts = proxy.count();
    eprintln!("{attempts} CONNECTs in 10 s; the call ended: {status}");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    assert!((3..=7).contains(&attempts), "{attempts} CONNECTs in 10 s");
}

/// A proxy that trickles an answer one byte per second, forever, fails the attempt at the connect
/// timeout (the bound covers the whole handshake, not each read).
#[tokio::test(start_paused = true)]
async fn a_trickling_proxy_fails_at_the_connect_timeout() {
    let proxy = ScriptedProxy::start(|mut client, _| async move {
        // "HTTP/1.1 200 " and then an endless reason phrase, a byte a second.
        let prefix = b"HTTP/1.1 200 ";
        for i in 0..100_000usize {
            let byte = if i < prefix.len() { prefix[i] } else { b'x' };
            if client.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await;
    let channel = Channel::builder("ipv4:127.0.0.1:9")
        .proxy(proxy.uri())
        .connect_timeout(Duration::from_secs(5))
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let started = tokio::time::Instant::now();
    let status = call_within(&channel, GUARD).await.expect_err("trickle");
    let waited = started.elapsed();
    eprintln!("after {waited:?}: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    assert!(status.message().contains("proxy's CONNECT"), "{status}");
    assert!(
        (Duration::from_secs(5)..Duration::from_secs(6)).contains(&waited),
        "{waited:?}"
    );
}

/// The credentials are for the proxy: the gRPC request inside the tunnel must not carry
/// `Proxy-Authorization` (or `Authorization`), and its `:authority` is the target's, not the proxy's.
#[tokio::test]
async fn the_target_never_sees_the_proxy_credentials() {
    let target = H2Server::tcp(defaults, handler(|s| async move { drop(s) })).await;
    let proxy = ScriptedProxy::start(tunnels(
        b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec(),
    ))
    .await;
    let channel = through(
        format!("ipv4:{}", target.addr()),
        format!("http://user:topsecret@{}", proxy.addr),
    );
    let _ = call(&channel).await;
    let opens = target.opens();
    assert!(!opens.is_empty(), "the call reached the target");
    for open in opens {
        for (name, value) in &open.headers {
            let value = value.to_str().unwrap_or("");
            assert!(
                !name.as_str().contains("authorization") && !value.contains("dXNlcjp0b3BzZWNyZXQ"),
                "{name}: {value}"
            );
        }
        assert_eq!(
            open.authority.as_deref(),
            Some(target.addr().to_string().as_str())
        );
    }
}

/// round_robin over two addresses, each its own CONNECT: both backends answer, and each address gets
/// its own tunnel.
#[tokio::test]
async fn round_robin_spreads_over_tunnels() {
    let a = server().await;
    let b = server().await;
    let proxy = ScriptedProxy::start(tunnels(
        b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec(),
    ))
    .await;
    let channel = Channel::builder(format!("ipv4:{},{}", a.addr, b.addr))
        .proxy(proxy.uri())
        .default_service_config(r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#)
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let mut seen = std::collections::HashSet::new();
    for _ in 0..10 {
        seen.insert(call(&channel).await.expect("a call"));
    }
    assert_eq!(seen.len(), 2, "{seen:?}");
    let mut targets: Vec<String> = proxy
        .requests
        .lock()
        .iter()
        .map(|h| connect_target(h))
        .collect();
    targets.sort();
    targets.dedup();
    assert_eq!(targets.len(), 2, "{targets:?}");
}

/// A server GOAWAY on a tunnelled connection: the next call opens a new tunnel (a new CONNECT) and works.
#[tokio::test]
async fn goaway_through_the_tunnel_reconnects_through_the_proxy() {
    let target = H2Server::tcp(
        defaults,
        handler(|s| async move {
            let head = http::Response::builder()
                .status(200)
                .header("content-type", "application/grpc")
                .header("grpc-status", "0")
                .body(())
                .expect("head");
            let mut respond = s.respond;
            let _ = respond.send_response(head, true);
        }),
    )
    .await;
    let proxy = ScriptedProxy::start(tunnels(
        b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec(),
    ))
    .await;
    let channel = through(format!("ipv4:{}", target.addr()), proxy.uri());
    let _ = call(&channel).await;
    assert_eq!(proxy.count(), 1);
    target.goaway();
    let mut ok = false;
    for _ in 0..200 {
        let _ = call(&channel).await;
        if proxy.count() >= 2 && target.connections() >= 2 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        ok,
        "after GOAWAY: {} CONNECTs, {} connections",
        proxy.count(),
        target.connections()
    );
}

/// Through a proxy the client resolves no address: the proxy does (gRFC A1). The channel still asks its
/// own DNS for `_grpc_config.<name>` (as the issue asks), and a call waits for that first answer as on any
/// DNS target; a silent DNS server (common where a proxy is needed) costs the query timeout once, then the
/// call goes through the proxy with the default config. With `service_config_lookup(false)` nothing asks
/// DNS at all.
#[tokio::test(start_paused = true)]
async fn a_silent_dns_server_does_not_hold_calls_that_go_by_name() {
    let backend = server().await;
    // A DNS server that never answers.
    let dns = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .expect("udp");
    let dns_addr = dns.local_addr().expect("addr");
    let backend_addr = backend.addr;
    let proxy = ScriptedProxy::start(move |mut client, _head| async move {
        let mut upstream = TcpStream::connect(backend_addr).await.expect("backend");
        upstream.set_nodelay(true).expect("nodelay");
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .expect("write");
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    })
    .await;
    let call = |channel: Channel| async move {
        let request = Request::new(SimpleRequest {
            fill_server_id: true,
            ..SimpleRequest::default()
        })
        .with_timeout(Duration::from_secs(5));
        tokio::time::timeout(
            NO_HANG,
            channel.unary::<_, SimpleResponse>(paths::UNARY_CALL, request),
        )
        .await
        .expect("ends")
    };
    let no_lookup = Channel::builder(format!("dns://{dns_addr}/api.example.test:443"))
        .proxy(proxy.uri())
        .service_config_lookup(false)
        .build()
        .expect("channel");
    call(no_lookup).await.expect("no DNS needed at all");
    let channel = Channel::builder(format!("dns://{dns_addr}/api.example.test:443"))
        .proxy(proxy.uri())
        .resolver_options(
            grpc_channel::ResolverOptions::default().with_query_timeout(Duration::from_secs(1)),
        )
        .build()
        .expect("channel");
    let result = call(channel).await;
    drop(dns);
    let head = proxy.requests.lock().first().cloned();
    assert!(
        result.is_ok(),
        "{:?}; the proxy got {head:?}",
        result.map(|_| ())
    );
}

/// `ChannelBuilder::connect()` against a refusing proxy: an error that names the proxy and its refusal
/// (somewhere in the error's text or its status), and it does not hang.
#[tokio::test]
async fn connect_names_the_proxy_refusal() {
    let proxy = ScriptedProxy::start(|mut client, _| async move {
        let _ = client
            .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"corp\"\r\n\r\n")
            .await;
        let _ = client.shutdown().await;
    })
    .await;
    let connected = tokio::time::timeout(
        NO_HANG,
        Channel::builder("ipv4:127.0.0.1:9")
            .proxy(format!("http://u:hunter2@{}", proxy.addr))
            .service_config_lookup(false)
            .connect(),
    )
    .await
    .expect("connect ends by itself");
    let err = connected.expect_err("refused");
    let shown = format!("{err} / {err:?}");
    eprintln!("{shown}");
    assert!(shown.contains("407"), "{shown}");
    assert!(
        shown.contains(&format!("proxy http://{}", proxy.addr)),
        "{shown}"
    );
    assert!(!shown.contains("hunter2"), "{shown}");
}

/// A proxy that, once the tunnel is up and the first call went through, silently stops relaying that
/// tunnel (a black hole, both sockets open): keepalive PINGs through the tunnel go unanswered, the
/// connection is closed at the keepalive timeout, and a later call goes through a fresh CONNECT.
#[tokio::test(start_paused = true)]
async fn keepalive_finds_a_black_holed_tunnel_and_reconnects_through_the_proxy() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let backend = server().await;
    let black_hole = Arc::new(AtomicBool::new(false));
    let conns = Arc::new(AtomicUsize::new(0));
    let hole = black_hole.clone();
    let proxy = ScriptedProxy::start(move |mut client, head| {
        let hole = hole.clone();
        let first = conns.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            let mut upstream = upstream(&head).await;
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .expect("write");
            let dark = || first && hole.load(Ordering::SeqCst);
            let (mut cr, mut cw) = client.split();
            let (mut ur, mut uw) = upstream.split();
            let up = async {
                let mut buf = [0u8; 8192];
                loop {
                    let Ok(n) = cr.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    if !dark() {
                        let _ = uw.write_all(&buf[..n]).await;
                    }
                }
            };
            let down = async {
                let mut buf = [0u8; 8192];
                loop {
                    let Ok(n) = ur.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    if !dark() {
                        let _ = cw.write_all(&buf[..n]).await;
                    }
                }
            };
            tokio::join!(up, down);
        }
    })
    .await;
    let channel = Channel::builder(format!("ipv4:{}", backend.addr))
        .proxy(proxy.uri())
        .service_config_lookup(false)
        .keepalive_time(Duration::from_secs(10))
        .keepalive_timeout(Duration::from_secs(1))
        .keepalive_permit_without_calls(true)
        .build()
        .expect("channel");
    call_within(&channel, GUARD).await.expect("first call");
    assert_eq!(proxy.count(), 1);
    black_hole.store(true, Ordering::SeqCst);
    // 10 s keepalive time + 1 s timeout: by 30 s the dark tunnel is closed.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let result = call_within(&channel, GUARD).await;
    assert!(
        proxy.count() >= 2 && result.is_ok(),
        "{} CONNECTs; the call after the tunnel went dark: {:?}",
        proxy.count(),
        result
    );
}

/// Idle and back: after the idle timeout the tunnel is closed; the next call opens a new one.
#[tokio::test(start_paused = true)]
async fn idle_and_back_opens_a_new_tunnel() {
    let backend = server().await;
    let proxy = ScriptedProxy::start(tunnels(
        b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec(),
    ))
    .await;
    let channel = Channel::builder(format!("ipv4:{}", backend.addr))
        .proxy(proxy.uri())
        .service_config_lookup(false)
        .idle_timeout(Duration::from_secs(5))
        .build()
        .expect("channel");
    call_within(&channel, GUARD).await.expect("first call");
    tokio::time::sleep(Duration::from_secs(30)).await;
    call_within(&channel, GUARD).await.expect("after idle");
    assert_eq!(proxy.count(), 2, "one tunnel per connection");
}

/// The credentials never go into logs or errors, and an application logs a builder's `Debug` as readily
/// as a channel's: it shows the proxy as `http://host:port`.
#[test]
fn a_builder_debug_never_shows_the_proxy_password() {
    let builder = Channel::builder("dns:///api.example.com:443")
        .proxy("http://alice:hunter2@proxy.example:3128");
    let shown = format!("{builder:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
}

/// RFC 9110 §15.2.2: a 101 switches the connection to the protocol of the request's `Upgrade`; a CONNECT
/// has none, so a 101 is not an interim answer to wait past: the attempt fails at once, as a refusal
/// naming the 101, not at the connect timeout.
#[tokio::test(start_paused = true)]
async fn a_101_answer_is_not_waited_past() {
    let proxy = ScriptedProxy::start(|mut client, _| async move {
        let _ = client
            .write_all(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n",
            )
            .await;
        tokio::time::sleep(Duration::from_secs(3600)).await;
        drop(client);
    })
    .await;
    let channel = through("ipv4:127.0.0.1:9", proxy.uri());
    let started = tokio::time::Instant::now();
    let status = call_within(&channel, GUARD)
        .await
        .expect_err("not a tunnel");
    let waited = started.elapsed();
    eprintln!("after {waited:?}: {status}");
    assert!(
        waited < Duration::from_secs(1) && status.message().contains("101"),
        "after {waited:?}: {status}"
    );
}

/// IPv6 and name targets by name: `dns:///[::1]:9` is CONNECT `[::1]:9` (authority form brackets IPv6),
/// `dns:///localhost:9` is CONNECT `localhost:9`, and `Host` matches.
#[tokio::test]
async fn dns_targets_ipv6_and_localhost_connect_in_authority_form() {
    for (target, expected) in [
        ("dns:///[::1]:9", "[::1]:9"),
        ("dns:///localhost:9", "localhost:9"),
    ] {
        let proxy = ScriptedProxy::start(|mut client, _| async move {
            let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await;
            let _ = client.shutdown().await;
        })
        .await;
        let _ = call(&through(target, proxy.uri())).await;
        let head = proxy.requests.lock().first().cloned().expect("a CONNECT");
        assert!(
            head.starts_with(&format!(
                "CONNECT {expected} HTTP/1.1\r\nHost: {expected}\r\n"
            )),
            "{target}: {head:?}"
        );
    }
}

/// Client-side health checking (gRFC A17) through tunnels: the Watch runs inside each tunnel, and the
/// address the stats name as not serving is the target's, never the proxy's.
#[tokio::test(start_paused = true)]
async fn health_checking_watches_through_the_tunnel_and_names_the_target() {
    use interop::health::ServingStatus;
    const SVC: &str = "grpc.testing.TestService";
    let (a, b) = (server().await, server().await);
    a.health().set(SVC, ServingStatus::Serving);
    b.health().set(SVC, ServingStatus::Serving);
    let proxy = ScriptedProxy::start(tunnels(
        b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec(),
    ))
    .await;
    let channel = Channel::builder(format!("ipv4:{},{}", a.addr, b.addr))
        .proxy(proxy.uri())
        .default_service_config(format!(
            r#"{{"healthCheckConfig":{{"serviceName":"{SVC}"}},"loadBalancingConfig":[{{"round_robin":{{}}}}]}}"#
        ))
        .service_config_lookup(false)
        .build()
        .expect("channel");
    for _ in 0..4 {
        call_within(&channel, GUARD).await.expect("a call");
    }
    assert_eq!(a.health().watchers(SVC), 1);
    assert_eq!(b.health().watchers(SVC), 1);
    b.health().set(SVC, ServingStatus::NotServing);
    let expected = vec![b.addr.to_string()];
    for _ in 0..10_000 {
        if channel.stats().not_serving_addresses == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(channel.stats().not_serving_addresses, expected);
    for _ in 0..10 {
        assert_eq!(
            call_within(&channel, GUARD).await.expect("a call"),
            a.addr.to_string()
        );
    }
    // By name: the one endpoint is the target's name.
    let proxy = ScriptedProxy::start(tunnels(
        b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec(),
    ))
    .await;
    let name = format!("localhost:{}", b.addr.port());
    let channel = Channel::builder(format!("dns:///{name}"))
        .proxy(proxy.uri())
        .default_service_config(format!(
            r#"{{"healthCheckConfig":{{"serviceName":"{SVC}"}},"loadBalancingConfig":[{{"round_robin":{{}}}}]}}"#
        ))
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let result = call_within(&channel, GUARD).await;
    assert!(result.is_err(), "b does not serve: {result:?}");
    assert_eq!(channel.stats().not_serving_addresses, vec![name]);
}

/// A 200 and then an immediate close: no tunnel after all. The call fails UNAVAILABLE, and the status
/// says the connection went through the proxy (every failure names the proxy), so that a user does not
/// chase the target's server.
#[tokio::test]
async fn a_200_then_close_is_unavailable_and_names_the_proxy() {
    let proxy = ScriptedProxy::start(|mut client, _| async move {
        let _ = client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await;
        let _ = client.shutdown().await;
    })
    .await;
    let status = call(&through("ipv4:127.0.0.1:9", proxy.uri()))
        .await
        .expect_err("no tunnel");
    eprintln!("a user sees: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    assert!(
        status
            .message()
            .contains(&format!("proxy http://{}", proxy.addr)),
        "{status}"
    );
}

/// A proxy that answers 200 the moment it accepts, before the request arrives (some transparent
/// gateways do), then reads the request and relays: the tunnel works.
#[tokio::test]
async fn a_proxy_that_answers_before_reading_the_request() {
    let backend = server().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let target = backend.addr;
    let accept = tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            client.set_nodelay(true).expect("nodelay");
            tokio::spawn(async move {
                client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .expect("write");
                let Some(_head) = read_head(&mut client).await else {
                    return;
                };
                let mut upstream = TcpStream::connect(target).await.expect("backend");
                upstream.set_nodelay(true).expect("nodelay");
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    let result = call(&through(format!("ipv4:{target}"), format!("http://{addr}"))).await;
    accept.abort();
    assert_eq!(result.expect("early answer"), target.to_string());
}

/// An endless stream of `100 Continue` answers is bounded like one big answer: refused at 8 KiB, at once.
#[tokio::test(start_paused = true)]
async fn endless_interim_answers_hit_the_bound() {
    let proxy = ScriptedProxy::start(|mut client, _| async move {
        for _ in 0..100_000 {
            if client
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
        }
    })
    .await;
    let started = tokio::time::Instant::now();
    let status = call_within(&through("ipv4:127.0.0.1:9", proxy.uri()), GUARD)
        .await
        .expect_err("no final answer");
    eprintln!("{status}");
    assert!(status.message().contains("8192"), "{status}");
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// A wait-for-ready call waits through refusals and succeeds once the proxy lets it through.
#[tokio::test(start_paused = true)]
async fn wait_for_ready_rides_out_refusals() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let backend = server().await;
    let n = Arc::new(AtomicUsize::new(0));
    let proxy = ScriptedProxy::start(move |mut client, head| {
        let refuse = n.fetch_add(1, Ordering::SeqCst) < 3;
        async move {
            if refuse {
                let _ = client
                    .write_all(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
                    .await;
                let _ = client.shutdown().await;
                return;
            }
            let mut upstream = upstream(&head).await;
            client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .expect("write");
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        }
    })
    .await;
    let channel = through(format!("ipv4:{}", backend.addr), proxy.uri());
    let request = Request::new(SimpleRequest {
        fill_server_id: true,
        ..SimpleRequest::default()
    })
    .with_wait_for_ready(true)
    .with_timeout(Duration::from_secs(60));
    let response = tokio::time::timeout(
        GUARD,
        channel.unary::<_, SimpleResponse>(paths::UNARY_CALL, request),
    )
    .await
    .expect("ends")
    .expect("through after three refusals");
    assert_eq!(response.into_inner().server_id, backend.addr.to_string());
    assert_eq!(proxy.count(), 4);
}

/// Through a proxy, a `dns:` target needs no client-side DNS at all when service-config lookups are off:
/// the proxy resolves the name, so a resolv.conf the client cannot use (here one the application gives; in
/// the field, a container without a usable /etc/resolv.conf) does not matter.
#[tokio::test]
async fn by_name_needs_no_client_dns_when_lookups_are_off() {
    let backend = server().await;
    let backend_addr = backend.addr;
    let proxy = ScriptedProxy::start(move |mut client, _head| async move {
        let mut upstream = TcpStream::connect(backend_addr).await.expect("backend");
        upstream.set_nodelay(true).expect("nodelay");
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .expect("write");
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    })
    .await;
    let mut failures = Vec::new();
    for resolv_conf in ["", "nameserver not-an-address\n", "options ndots:banana\n"] {
        let options = grpc_service_config::ResolverOptions::default()
            .with_resolv_conf(resolv_conf.to_owned());
        let channel = Channel::builder("dns:///api.example.test:443")
            .proxy(proxy.uri())
            .resolver_options(options)
            .service_config_lookup(false)
            .build()
            .expect("channel");
        if let Err(status) = call(&channel).await {
            failures.push(format!("resolv.conf {resolv_conf:?}: {status}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Hedging (gRFC A6) with the one name endpoint of a by-name target: the hedges cannot avoid the used
/// address, so they go on the same tunnel; all `maxAttempts` reach the server.
#[tokio::test(start_paused = true)]
async fn hedging_over_one_name_endpoint_sends_every_hedge() {
    let target = H2Server::tcp(
        defaults,
        handler(|s| async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(s);
        }),
    )
    .await;
    let proxy = ScriptedProxy::start(tunnels(
        b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec(),
    ))
    .await;
    let channel = Channel::builder(format!("dns:///localhost:{}", target.addr().port()))
        .proxy(proxy.uri())
        .default_service_config(
            r#"{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],
                "hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.1s","nonFatalStatusCodes":[]}}]}"#,
        )
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let request = Request::new(SimpleRequest::default()).with_timeout(Duration::from_secs(2));
    let result = tokio::time::timeout(
        GUARD,
        channel.unary::<_, SimpleResponse>(paths::UNARY_CALL, request),
    )
    .await
    .expect("ends");
    assert_eq!(result.expect_err("held").code(), Code::DeadlineExceeded);
    assert_eq!(target.opens().len(), 3, "every hedge reached the server");
    assert_eq!(proxy.count(), 1, "one tunnel");
}

/// Outlier detection (gRFC A50) through tunnels: the failing backend is ejected, and the stats name the
/// target's address, never the proxy's.
#[tokio::test(start_paused = true)]
async fn outlier_detection_through_tunnels_names_the_target() {
    let (a, b) = (server().await, server().await);
    let bad = support::faulty_server().await;
    let proxy = ScriptedProxy::start(tunnels(
        b"HTTP/1.1 200 Connection established\r\n\r\n".to_vec(),
    ))
    .await;
    let channel = Channel::builder(format!("ipv4:{},{},{}", a.addr, b.addr, bad.addr))
        .proxy(proxy.uri())
        .default_service_config(
            r#"{"loadBalancingConfig":[{"outlier_detection_experimental":{
            "interval":"1s","baseEjectionTime":"30s","maxEjectionPercent":50,
            "failurePercentageEjection":{"threshold":50,"enforcementPercentage":100,
                                          "minimumHosts":3,"requestVolume":10},
            "childPolicy":[{"round_robin":{}}]}}]}"#,
        )
        .service_config_lookup(false)
        .build()
        .expect("channel");
    for _ in 0..60 {
        let _ = call_within(&channel, GUARD).await;
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..10 {
        let _ = call_within(&channel, GUARD).await;
    }
    assert_eq!(
        channel.stats().ejected_addresses,
        vec![bad.addr.to_string()]
    );
}
