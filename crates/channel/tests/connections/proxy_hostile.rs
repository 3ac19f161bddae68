//! HTTP CONNECT proxies (gRFC A1) that misbehave, as tinyproxy cannot: an in-process proxy on a loopback
//! port, scripted per test, that answers slowly, sends the tunnel's first bytes with its answer, refuses,
//! answers with an oversize header or garbage, closes mid-answer or never answers. Every failure is
//! UNAVAILABLE naming the proxy (`proxy http://127.0.0.1:P`) and what it said, and no call hangs. The
//! requests it receives are checked too: the CONNECT line, `Host`, and `Proxy-Authorization` only with
//! credentials (which never show in a status or a `Debug`).

use grpc_test_support as support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use grpc_channel::{Channel, Code, Status};
use parking_lot::Mutex;
use support::guards::GUARD;
use support::{interop_server_handle as server, served as call, served_by as call_within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::scripted_proxy::{answers, connect_target, pipe, upstream, ScriptedProxy};

/// A channel to `target` through `proxy`, without service-config lookups.
fn through(target: impl Into<String>, proxy: &ScriptedProxy) -> Channel {
    Channel::builder(target)
        .proxy(proxy.uri())
        .service_config_lookup(false)
        .build()
        .expect("channel")
}

/// A target nothing needs to listen on: the scripted proxies never connect to it.
const NOWHERE: &str = "ipv4:127.0.0.1:9";

/// Asserts that `status` is UNAVAILABLE, names `proxy` and says each of `fragments`.
fn assert_names(status: &Status, proxy: &ScriptedProxy, fragments: &[&str]) {
    eprintln!("a user sees: {status}");
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    let message = status.message();
    assert!(
        message.contains(&proxy.named()),
        "{:?} in {message}",
        proxy.named()
    );
    for fragment in fragments {
        assert!(message.contains(fragment), "{fragment:?} in {message}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_answer_in_pieces_still_opens_the_tunnel() {
    let backend = server().await;
    let proxy = ScriptedProxy::start(|mut client, head| async move {
        let upstream = upstream(&head).await;
        for piece in b"HTTP/1.1 200 Connection established\r\n\r\n".chunks(3) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            client.write_all(piece).await.expect("write");
        }
        pipe(client, upstream).await;
    })
    .await;
    let channel = through(format!("ipv4:{}", backend.addr), &proxy);
    assert_eq!(
        call_within(&channel, GUARD)
            .await
            .expect("through the slow proxy"),
        backend.addr.to_string()
    );
    assert_eq!(
        connect_target(&proxy.first_request()),
        backend.addr.to_string()
    );
}

#[tokio::test]
async fn bytes_after_the_answer_belong_to_the_tunnel() {
    let backend = server().await;
    let early = Arc::new(Mutex::new(0usize));
    let seen = early.clone();
    let proxy = ScriptedProxy::start(move |mut client, head| {
        let seen = seen.clone();
        async move {
            let mut upstream = upstream(&head).await;
            // The server speaks first (its SETTINGS). The first 4 bytes of its first frame header go out
            // with the answer, in one write, the rest after: a client that lost those 4 bytes would read
            // frames from the middle of a header (losing a whole frame might go unnoticed).
            let mut first = vec![0u8; 4096];
            let n = upstream
                .read(&mut first)
                .await
                .expect("the server's SETTINGS");
            assert!(n >= 9, "not even a frame header from the server: {n} bytes");
            *seen.lock() = n;
            let mut answer =
                b"HTTP/1.1 200 Connection established\r\nProxy-Agent: test\r\n\r\n".to_vec();
            answer.extend_from_slice(&first[..4]);
            client.write_all(&answer).await.expect("write");
            tokio::time::sleep(Duration::from_millis(20)).await;
            client.write_all(&first[4..n]).await.expect("write");
            pipe(client, upstream).await;
        }
    })
    .await;
    let channel = through(format!("ipv4:{}", backend.addr), &proxy);
    assert_eq!(
        call(&channel)
            .await
            .expect("the early bytes reached HTTP/2"),
        backend.addr.to_string()
    );
    assert!(
        *early.lock() >= 9,
        "the proxy relayed the server's first frame"
    );
}

/// A script that tunnels to the request's target after answering `answer` in one write.
fn tunnels(
    answer: &'static [u8],
) -> impl Fn(TcpStream, String) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync
{
    move |mut client, head| {
        Box::pin(async move {
            let upstream = upstream(&head).await;
            client.write_all(answer).await.expect("write");
            pipe(client, upstream).await;
        })
    }
}

#[tokio::test]
async fn any_2xx_answer_in_http_1_0_or_with_bare_line_feeds_opens_the_tunnel() {
    let backend = server().await;
    for answer in [
        &b"HTTP/1.0 200 Connection established\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\nProxy-Agent: lf-only\n\n",
        b"HTTP/1.1 204 No Content\r\n\r\n",
    ] {
        let proxy = ScriptedProxy::start(tunnels(answer)).await;
        let channel = through(format!("ipv4:{}", backend.addr), &proxy);
        assert_eq!(
            call(&channel)
                .await
                .unwrap_or_else(|s| panic!("{:?}: {s}", String::from_utf8_lossy(answer))),
            backend.addr.to_string()
        );
    }
}

/// RFC 9110 §15.2: "A client MUST be able to parse one or more 1xx responses received prior to a final
/// response, even if the client does not expect one." A `100 Continue` before the 200 is skipped.
#[tokio::test]
async fn an_interim_1xx_answer_before_the_200_is_skipped() {
    let backend = server().await;
    let proxy = ScriptedProxy::start(tunnels(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 Connection established\r\n\r\n",
    ))
    .await;
    let channel = through(format!("ipv4:{}", backend.addr), &proxy);
    assert_eq!(
        call(&channel)
            .await
            .expect("the 100 is interim: the 200 opens the tunnel"),
        backend.addr.to_string()
    );
}

#[tokio::test]
async fn a_407_names_the_status_and_the_realm() {
    let proxy = ScriptedProxy::start(answers(
        b"HTTP/1.1 407 Proxy Authentication Required\r\n\
          Proxy-Authenticate: Basic realm=\"corp\"\r\nContent-Length: 13\r\n\r\nlog in first!",
    ))
    .await;
    let status = call(&through(NOWHERE, &proxy)).await.expect_err("refused");
    assert_names(
        &status,
        &proxy,
        &["refused CONNECT 127.0.0.1:9", "407", "realm \"corp\""],
    );
}

#[tokio::test]
async fn a_502_and_a_403_are_refusals() {
    for (answer, code) in [
        (
            &b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nno upstream"[..],
            "502 Bad Gateway",
        ),
        (
            &b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"[..],
            "403 Forbidden",
        ),
    ] {
        let proxy = ScriptedProxy::start(answers(answer)).await;
        let status = call(&through(NOWHERE, &proxy)).await.expect_err("refused");
        assert_names(&status, &proxy, &["refused CONNECT", code]);
    }
}

/// What a flooding proxy wrote, and whether a write failed (the client closed).
#[derive(Debug, Default)]
struct Flood {
    written: usize,
    refused: bool,
}

/// The most a flooding proxy writes: far beyond what loopback buffers hold, so that only a client that
/// closes ends the flood before it.
const FLOOD_CAP: usize = 64 << 20;

/// Writes `head`, then `line` over and over (at most [`FLOOD_CAP`]), until the client closes.
fn floods(
    head: &'static [u8],
    line: &'static [u8],
    flood: Arc<Mutex<Flood>>,
) -> impl Fn(TcpStream, String) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync
{
    move |mut stream, _| {
        let flood = flood.clone();
        Box::pin(async move {
            let mut next = head;
            while flood.lock().written < FLOOD_CAP {
                if stream.write_all(next).await.is_err() {
                    flood.lock().refused = true;
                    return;
                }
                flood.lock().written += next.len();
                next = line;
            }
        })
    }
}

#[tokio::test]
async fn an_answer_header_over_8_kib_is_refused_at_the_bound() {
    // A 200 whose header fields never end: 200-byte fields, so that the bound (41 of them) comes before
    // the parser's limit of 64 fields.
    let field: &'static [u8] = Box::leak(
        format!("X-Padding: {}\r\n", "a".repeat(187))
            .into_bytes()
            .into_boxed_slice(),
    );
    assert_eq!(field.len(), 200);
    let fields = Arc::new(Mutex::new(Flood::default()));
    let proxy = ScriptedProxy::start(floods(b"HTTP/1.1 200 OK\r\n", field, fields.clone())).await;
    let status = call(&through(NOWHERE, &proxy)).await.expect_err("too long");
    assert_names(&status, &proxy, &["header over 8192 bytes"]);

    // One endless header line.
    let line = Arc::new(Mutex::new(Flood::default()));
    let proxy = ScriptedProxy::start(floods(
        b"HTTP/1.1 200 OK\r\nX-Endless: ",
        b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        line.clone(),
    ))
    .await;
    let status = call(&through(NOWHERE, &proxy)).await.expect_err("too long");
    assert_names(&status, &proxy, &["header over 8192 bytes"]);
    // The client stopped reading and closed the connection: the proxy's writes failed before its cap.
    // (What it wrote is what loopback buffers held, not what the client read.)
    support::guards::eventually("the proxy's writes fail", || line.lock().refused).await;
    {
        let flood = line.lock();
        eprintln!(
            "the endless proxy wrote {} bytes before the client closed",
            flood.written
        );
        assert!(flood.written < FLOOD_CAP, "{flood:?}");
    }

    // Endless interim answers count against the same bound.
    let interim = Arc::new(Mutex::new(Flood::default()));
    let proxy = ScriptedProxy::start(floods(
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        interim.clone(),
    ))
    .await;
    let status = call(&through(NOWHERE, &proxy)).await.expect_err("too long");
    assert_names(&status, &proxy, &["header over 8192 bytes"]);
}

#[tokio::test]
async fn a_garbage_answer_is_malformed() {
    let proxy = ScriptedProxy::start(answers(b"SSH-2.0-x\r\n\r\n")).await;
    let status = call(&through(NOWHERE, &proxy)).await.expect_err("garbage");
    assert_names(
        &status,
        &proxy,
        &["malformed answer to CONNECT 127.0.0.1:9"],
    );
}

#[tokio::test]
async fn a_proxy_closing_mid_answer_is_named() {
    let proxy = ScriptedProxy::start(answers(b"HTTP/1.1 20")).await;
    let status = call(&through(NOWHERE, &proxy)).await.expect_err("closed");
    assert_names(
        &status,
        &proxy,
        &["closed the connection before answering CONNECT 127.0.0.1:9"],
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_proxy_fails_the_attempt_at_the_connect_timeout() {
    // Accepts, reads the request, holds the connection open and says nothing.
    let proxy = ScriptedProxy::start(|client, _| async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        drop(client);
    })
    .await;
    let channel = Channel::builder(NOWHERE)
        .proxy(proxy.uri())
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("channel");
    let started = tokio::time::Instant::now();
    let status = call_within(&channel, GUARD).await.expect_err("silent");
    let waited = started.elapsed();
    assert_names(
        &status,
        &proxy,
        &["connection attempt timed out (in the proxy's CONNECT"],
    );
    assert!(
        (Duration::from_secs(5)..Duration::from_secs(6)).contains(&waited),
        "failed after {waited:?} of paused time, not at the 5 s connect timeout"
    );
}

#[tokio::test]
async fn a_proxy_that_is_not_there_is_named() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let uri = format!("http://127.0.0.1:{port}");
    let channel = Channel::builder(NOWHERE)
        .proxy(&uri)
        .build()
        .expect("channel");
    let status = call(&channel).await.expect_err("refused");
    eprintln!("a user sees: {status}");
    assert_eq!(status.code(), Code::Unavailable);
    assert!(
        status.message().contains(&format!("proxy {uri}")),
        "{status}"
    );
}

/// The request's header lines, without the blank line.
fn lines(head: &str) -> Vec<&str> {
    head.trim_end_matches("\r\n").split("\r\n").collect()
}

/// The value of header `name` (any case), if the request has it, and how many times it appears.
fn header<'a>(head: &'a str, name: &str) -> (Option<&'a str>, usize) {
    let values: Vec<&str> = lines(head)
        .into_iter()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
        .collect();
    (values.first().copied(), values.len())
}

#[tokio::test]
async fn the_request_names_the_target_and_carries_credentials_only_when_given() {
    let forbidden = || answers(b"HTTP/1.1 403 Forbidden\r\n\r\n");

    // Without credentials: no Proxy-Authorization.
    let proxy = ScriptedProxy::start(forbidden()).await;
    call(&through("ipv4:127.0.0.1:9", &proxy))
        .await
        .expect_err("refused");
    let head = proxy.first_request();
    eprintln!("the proxy received: {head:?}");
    assert_eq!(lines(&head)[0], "CONNECT 127.0.0.1:9 HTTP/1.1");
    assert_eq!(header(&head, "host"), (Some("127.0.0.1:9"), 1));
    assert_eq!(header(&head, "proxy-authorization"), (None, 0));

    // Percent-encoded credentials, decoded before encoding.
    let proxy = ScriptedProxy::start(forbidden()).await;
    let channel = Channel::builder("ipv6:[::1]:9")
        .proxy(format!("http://al%40ce:p%3Ass%20w0rd@{}", proxy.addr))
        .build()
        .expect("channel");
    call(&channel).await.expect_err("refused");
    let head = proxy.first_request();
    assert_eq!(lines(&head)[0], "CONNECT [::1]:9 HTTP/1.1");
    assert_eq!(header(&head, "host"), (Some("[::1]:9"), 1));
    let (authorization, count) = header(&head, "proxy-authorization");
    assert_eq!(count, 1);
    let encoded = authorization
        .and_then(|v| v.strip_prefix("Basic "))
        .expect("Basic credentials");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("base64");
    assert_eq!(decoded, b"al@ce:p:ss w0rd");

    // A dns: target's name goes unresolved.
    let proxy = ScriptedProxy::start(forbidden()).await;
    call(&through("dns:///localhost:50051", &proxy))
        .await
        .expect_err("refused");
    let head = proxy.first_request();
    assert_eq!(lines(&head)[0], "CONNECT localhost:50051 HTTP/1.1");
    assert_eq!(header(&head, "host"), (Some("localhost:50051"), 1));
}

#[tokio::test]
async fn credentials_never_show() {
    let proxy = ScriptedProxy::start(answers(
        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 6\r\n\r\nno way",
    ))
    .await;
    let channel = Channel::builder(NOWHERE)
        .proxy(format!("http://user:topsecret@{}", proxy.addr))
        .build()
        .expect("channel");
    let status = call(&channel).await.expect_err("refused");
    assert_names(&status, &proxy, &["403"]);
    assert!(
        header(&proxy.first_request(), "proxy-authorization")
            .0
            .is_some(),
        "the credentials were sent"
    );
    for shown in [
        status.to_string(),
        format!("{status:?}"),
        format!("{channel:?}"),
        format!("{:?}", channel.stats()),
    ] {
        assert!(!shown.contains("topsecret"), "{shown}");
        assert!(
            !shown.contains("dXNlcjp0b3BzZWNyZXQ"),
            "base64 credentials: {shown}"
        );
    }
}
