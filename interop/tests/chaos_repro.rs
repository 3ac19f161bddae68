//! Regression tests for channel defects the chaos soak (`cargo xtask chaos`) found, each reproducing its
//! race many times over so that it fails reliably if the defect comes back.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request};
use http::HeaderValue;
use interop::server_call::{h2_server_builder, ServerCall};
use tokio::net::TcpListener;

/// Starts, on its own runtime thread (like a server process), a server that answers every call Trailers-Only
/// UNAVAILABLE as soon as the first request message arrived, while the client is still sending. h2 then
/// resets the stream with RST_STREAM(NO_ERROR), as RFC 9113 §8.1 allows ("a server can send a complete
/// response prior to the client sending an entire request ... the server MAY request that the client abort
/// transmission of a request without error by sending a RST_STREAM with an error code of NO_ERROR"); the
/// client "MUST NOT discard responses as a result of receiving such a RST_STREAM".
fn early_unavailable_server() -> std::net::SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("server runtime");
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let _ = tx.send(listener.local_addr().expect("addr"));
            while let Ok((tcp, peer)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                tokio::spawn(async move {
                    let Ok(mut conn) = h2_server_builder().handshake::<_, Bytes>(tcp).await else {
                        return;
                    };
                    while let Some(Ok((request, respond))) = conn.accept().await {
                        tokio::spawn(async move {
                            let mut call = ServerCall::new(request, respond, peer);
                            let _ = call.next_message().await;
                            let mut r = http::Response::new(());
                            let h = r.headers_mut();
                            h.insert("content-type", HeaderValue::from_static("application/grpc"));
                            h.insert("grpc-status", HeaderValue::from_static("14"));
                            let _ = call.respond_mut().send_response(r, true);
                            call.mark_ended();
                            // Dropped with the request still streaming: h2 sends RST_STREAM(NO_ERROR).
                        });
                    }
                });
            }
        });
    });
    rx.recv().expect("server address")
}

const CALLS: usize = 20_000;
const IN_FLIGHT: usize = 16;

/// Found by the chaos soak (1 call in ~200,000; INTERNAL "stream reset by server (NO_ERROR)"): a
/// client-streaming call whose server answers Trailers-Only UNAVAILABLE before the request ended, followed
/// by RST_STREAM(NO_ERROR), sometimes ends INTERNAL instead of UNAVAILABLE. The attempt polls the response
/// (pending), then writes the next message; if the HEADERS and the RST_STREAM arrive in between (the
/// connection task runs on the other worker thread), the write fails and `Attempt::write_failed` reports the
/// reset (NO_ERROR → INTERNAL) without looking at the response h2 has already buffered. INTERNAL is not
/// retryable, so a retry policy does not save the call either.
#[test]
fn early_trailers_only_then_rst_no_error_keeps_the_servers_status() {
    let addr = early_unavailable_server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let channel = Channel::builder(format!("ipv4:{addr}"))
            .service_config_lookup(false)
            .build()
            .expect("channel");
        let wrong = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        for worker in 0..IN_FLIGHT {
            let channel = channel.clone();
            let wrong = wrong.clone();
            tasks.spawn(async move {
                for i in 0..CALLS / IN_FLIGHT {
                    let request = Request::new(()).with_timeout(Duration::from_secs(5));
                    let Ok((mut tx, mut rx)) = channel
                        .streaming_raw("/chaos.Chaos/ClientStream", request)
                        .await
                    else {
                        continue;
                    };
                    // Keep writing small messages until the call ends: every write is a chance.
                    for _ in 0..1000 {
                        if tx.send(Bytes::from_static(&[7u8; 100])).await.is_err() {
                            break;
                        }
                    }
                    drop(tx);
                    if let Err(s) = rx.message().await {
                        if s.code() != Code::Unavailable {
                            if let Ok(mut w) = wrong.lock() {
                                w.push(format!(
                                    "worker {worker} call {i}: {:?} {}",
                                    s.code(),
                                    s.message()
                                ));
                            }
                        }
                    }
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let wrong = wrong.lock().expect("lock");
        assert!(
            wrong.is_empty(),
            "{} of {CALLS} calls did not end UNAVAILABLE: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
    });
}
