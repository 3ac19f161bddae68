//! A graceful load-balancing policy switch: when a new service config changes the policy, the old
//! policy's READY connections keep serving (and finish the calls they carry) until the new policy is READY,
//! so no call fails. Real DNS (an in-process hickory server on loopback), two backends on the same port of
//! 127.0.0.1 and 127.0.0.2, real time with bounded waits on conditions.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{Channel, Request, ResolverOptions};
use interop::dns::TestDns;

const UNARY: &str = "/switch.Svc/Unary";

/// A backend answering its name after `delay`; it shuts its connections down gracefully when told to.
async fn backend(
    addr: SocketAddr,
    name: &'static str,
    goaway: tokio::sync::watch::Receiver<bool>,
) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    let bound = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let mut goaway = goaway.clone();
            tokio::spawn(async move {
                let mut conn: h2::server::Connection<_, Bytes> =
                    h2::server::handshake(tcp).await.expect("handshake");
                let mut closing = false;
                loop {
                    tokio::select! {
                        accepted = conn.accept() => {
                            let Some(Ok((_, mut respond))) = accepted else { return };
                            tokio::spawn(async move {
                                // Calls take a moment, so some are always in flight.
                                tokio::time::sleep(Duration::from_millis(2)).await;
                                let head = http::Response::builder()
                                    .header("content-type", "application/grpc")
                                    .body(())
                                    .expect("response");
                                if let Ok(mut send) = respond.send_response(head, false) {
                                    let mut f = vec![0u8, 0, 0, 0, name.len() as u8];
                                    f.extend_from_slice(name.as_bytes());
                                    let _ = send.send_data(Bytes::from(f), false);
                                    let mut t = http::HeaderMap::new();
                                    t.insert("grpc-status", http::HeaderValue::from_static("0"));
                                    let _ = send.send_trailers(t);
                                }
                            });
                        }
                        changed = goaway.wait_for(|go| *go), if !closing => {
                            closing = true;
                            if changed.is_ok() {
                                conn.graceful_shutdown();
                            }
                        }
                    }
                }
            });
        }
    });
    bound
}

async fn call(ch: &Channel) -> Result<String, grpc_channel::Status> {
    let r = ch
        .unary_raw(
            UNARY,
            Request::new(Bytes::new()).with_timeout(Duration::from_secs(5)),
        )
        .await?;
    Ok(String::from_utf8_lossy(&r.into_message()).into_owned())
}

#[tokio::test]
async fn switching_from_round_robin_to_pick_first_fails_no_call_under_load() {
    let (_a_goaway, a_rx) = tokio::sync::watch::channel(false);
    let (b_goaway, b_rx) = tokio::sync::watch::channel(false);
    let a = backend("127.0.0.1:0".parse().expect("addr"), "a", a_rx).await;
    let port = a.port();
    backend(
        SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), port)),
        "b",
        b_rx,
    )
    .await;
    let dns = TestDns::start().await.expect("dns");
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 1)).await;
    dns.add_a("svc.test", Ipv4Addr::new(127, 0, 0, 2)).await;
    dns.set_service_config(
        "svc.test",
        r#"[{"serviceConfig":{"loadBalancingConfig":[{"round_robin":{}}]}}]"#,
    )
    .await;
    let ch = Channel::builder(format!("dns://{}/svc.test:{port}", dns.addr))
        .resolver_options(ResolverOptions {
            min_interval: Duration::from_millis(100),
            query_timeout: Duration::from_secs(2),
            ..ResolverOptions::default()
        })
        .build()
        .expect("channel");
    // round_robin: both backends answer.
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        seen.insert(call(&ch).await.expect("warm-up call"));
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen.len(), 2, "round_robin reaches both backends");

    // Load: 8 loops of calls, each failure counted.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut loops = Vec::new();
    for _ in 0..8 {
        let (ch, stop, failures, done) = (ch.clone(), stop.clone(), failures.clone(), done.clone());
        loops.push(tokio::spawn(async move {
            let mut last = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match call(&ch).await {
                    Ok(name) => last.push(name),
                    Err(status) => {
                        eprintln!("failed during the switch: {status:?}");
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            last
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The new config says pick_first; backend b's graceful GOAWAY makes round_robin re-resolve.
    dns.set_service_config(
        "svc.test",
        r#"[{"serviceConfig":{"loadBalancingConfig":[{"pick_first":{}}]}}]"#,
    )
    .await;
    let _ = b_goaway.send(true);
    // pick_first sends every call to one backend: wait (bounded) for a long run of calls to one.
    let mut run = 0;
    let mut previous = String::new();
    for _ in 0..5000 {
        let name = call(&ch).await.expect("a call during the switch");
        run = if name == previous { run + 1 } else { 1 };
        previous = name;
        if run >= 200 {
            break;
        }
    }
    assert!(run >= 200, "the channel never switched to pick_first");
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.await.expect("load loop");
    }
    assert!(done.load(Ordering::Relaxed) > 100, "the load ran");
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "no call fails while the policy switches"
    );
}
