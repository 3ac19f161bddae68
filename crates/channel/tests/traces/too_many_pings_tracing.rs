//! gRFC A8: a client that receives GOAWAY(ENHANCE_YOUR_CALM, "too_many_pings") doubles its keepalive time,
//! and the observability page lists the WARN that says so ("the server sent GOAWAY `too_many_pings` and the
//! keepalive time doubled"). grpc-go, grpc-java and C-core servers send that GOAWAY and close the
//! connection at once; this server does the same (raw HTTP/2 frames over a loopback socket).

use grpc_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use grpc_channel::{Channel, Request};
use interop_proto::{paths, SimpleRequest, SimpleResponse};
use support::guards::guarded;
use support::tracing_capture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Reads frames after the preface, answering PINGs (the channel's connection check), until the client's
/// first HEADERS frame (a call).
async fn until_headers(socket: &mut tokio::net::TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut at = PREFACE.len();
    loop {
        while buf.len() >= at + 9 {
            let len = (usize::from(buf[at]) << 16)
                | (usize::from(buf[at + 1]) << 8)
                | usize::from(buf[at + 2]);
            if buf.len() < at + 9 + len {
                break;
            }
            let (kind, flags) = (buf[at + 3], buf[at + 4]);
            if kind == 0x1 {
                return true;
            }
            if kind == 0x6 && flags & 0x1 == 0 {
                let ack = frame(0x6, 0x1, 0, &buf[at + 9..at + 9 + len]);
                if socket.write_all(&ack).await.is_err() {
                    return false;
                }
            }
            at += 9 + len;
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Every connection: SETTINGS, SETTINGS ACK, and once a call arrives GOAWAY(ENHANCE_YOUR_CALM,
/// "too_many_pings") and the socket closes, as grpc-go's server does after its third ping strike.
async fn too_many_pings_server(listener: TcpListener, goaways: Arc<AtomicUsize>) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        let goaways = goaways.clone();
        tokio::spawn(async move {
            let _ = socket.write_all(&frame(0x4, 0, 0, &[])).await;
            let _ = socket.write_all(&frame(0x4, 0x1, 0, &[])).await;
            if !until_headers(&mut socket).await {
                return;
            }
            let mut payload = 0u32.to_be_bytes().to_vec(); // last stream id: the call was not processed
            payload.extend_from_slice(&0xbu32.to_be_bytes()); // ENHANCE_YOUR_CALM
            payload.extend_from_slice(b"too_many_pings");
            let _ = socket.write_all(&frame(0x7, 0, 0, &payload)).await;
            goaways.fetch_add(1, Ordering::SeqCst);
            let _ = socket.shutdown().await;
        });
    }
}

/// Each too_many_pings GOAWAY the channel receives must double its keepalive time, and say so at WARN
/// (observability.rs, # Events). The connection task (control/subchannel.rs) waits in a `tokio::select!`
/// on the connection's end and on a GOAWAY: when the server closes right after its GOAWAY both are ready,
/// `select!` picks one at random, and when it picks the end `keepalive.on_goaway` never runs: the GOAWAY
/// is neither logged nor obeyed, and the client keeps pinging as often as before.
#[tokio::test(start_paused = true)]
async fn every_too_many_pings_goaway_doubles_the_keepalive_time_and_warns() {
    let (capture, _installed) = tracing_capture::install().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let goaways = Arc::new(AtomicUsize::new(0));
    tokio::spawn(too_many_pings_server(listener, goaways.clone()));
    let channel = Channel::builder(format!("ipv4:{addr}"))
        .keepalive_time(Duration::from_secs(30))
        .build()
        .expect("channel");
    for _ in 0..200 {
        if goaways.load(Ordering::SeqCst) >= 20 {
            break;
        }
        let call = channel
            .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(SimpleRequest::default()));
        let _ = guarded("a call", call).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent = goaways.load(Ordering::SeqCst);
    assert!(sent >= 20, "the server sent {sent} GOAWAYs");
    // Let the channel handle the last one.
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let warned = capture.lines_containing("keepalive time doubled").len();
    assert!(
        warned >= sent - 1,
        "{sent} GOAWAY(too_many_pings) received, keepalive time doubled only {warned} times"
    );
}
