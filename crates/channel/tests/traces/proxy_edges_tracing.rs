//! Proxy credentials never reach a tracing event, for a refused, a malformed and a successful CONNECT.
//! Runs alone, as every test of this binary does (tracing caches callsite interest; see `main.rs`).

use grpc_test_support as support;

use std::net::SocketAddr;
use std::time::Duration;

use grpc_channel::{Channel, Request};
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::tracing_capture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[tokio::test]
async fn credentials_never_reach_a_tracing_event() {
    let (capture, _installed) = tracing_capture::install().await;
    let backend = interop::server::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("server");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let proxy = listener.local_addr().expect("addr");
    let answers: [&'static [u8]; 3] = [
        b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"r\"\r\n\r\n",
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 Connection established\r\n\r\n",
    ];
    let accept = tokio::spawn(async move {
        for answer in answers {
            let Ok((mut client, _)) = listener.accept().await else {
                return;
            };
            client.set_nodelay(true).expect("nodelay");
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
                if client.read(&mut byte).await.unwrap_or(0) == 0 {
                    break;
                }
                head.push(byte[0]);
            }
            let text = String::from_utf8_lossy(&head).into_owned();
            let target = text
                .strip_prefix("CONNECT ")
                .and_then(|r| r.split(' ').next())
                .unwrap_or("")
                .to_owned();
            client.write_all(answer).await.expect("write");
            if answer.starts_with(b"HTTP/1.1 200") {
                let mut upstream = tokio::net::TcpStream::connect(target)
                    .await
                    .expect("upstream");
                upstream.set_nodelay(true).expect("nodelay");
                tokio::spawn(async move {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        }
    });
    for _ in 0..3 {
        let channel = Channel::builder(format!("ipv4:{}", backend.addr))
            .proxy(format!("http://user:topsecret@{proxy}"))
            .service_config_lookup(false)
            .build()
            .expect("channel");
        let call = channel
            .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(SimpleRequest::default()));
        let result = tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .expect("ends");
        eprintln!("{:?}", result.map(|_| ()));
    }
    // Malformed URIs with credentials, too.
    for uri in [
        "http://user:topsecret@proxy.example:99999",
        "https://user:topsecret@proxy.example",
        "http://user:topsecret@proxy.example/path",
    ] {
        let built = Channel::builder("dns:///api.example.com:443")
            .proxy(uri)
            .build();
        assert!(built.is_err(), "{uri}");
    }
    accept.abort();
    // Not vacuous: the capture saw the calls (the channel traces no event naming the proxy itself).
    assert!(
        capture.lines_containing("").len() > 10,
        "the capture saw events"
    );
    for secret in ["topsecret", "dXNlcjp0b3BzZWNyZXQ"] {
        let lines = capture.lines_containing(secret);
        assert!(lines.is_empty(), "{secret} in events: {lines:#?}");
    }
}
