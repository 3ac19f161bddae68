//! Unary and server-streaming calls whose future is hand-written (`Start`, `Run`), whose resolution wait
//! is boxed and whose response goes to the receiving half directly. Cancellation at each await point, deadlines and failures around the first resolution,
//! retries through the boxed resolution path, the direct hand-over, exactly-once ids, and `Send`.
//! Loopback only, tokio's paused clock.

use grpc_test_support as support;

use std::future::poll_fn;
use std::net::Ipv4Addr;
use std::time::Duration;

use bytes::Bytes;
use grpc_channel::{CallInfo, Channel, Code, ConnectivityState, Request, ResolverOptions, Status};
use h2::Reason;
use interop::dns::TestDns;
use interop_proto::{SimpleRequest, SimpleResponse};
use support::config::retry;
use support::frames::grpc_message;
use support::guards::{eventually_every, guarded, settle, SETTLE_STEP};
use support::h2_server::{defaults, handler, response_head, trailers, H2Server, Stream, SVC};
use support::reserved_port;
use tokio::time::Instant;

const UNARY: &str = "/t.S/Unary";

/// A server that reads the request and then holds the stream: without answering (`headers` false), or
/// after sending the response headers (`headers` true). Either way it logs the client's reset.
async fn holding_server(headers: bool) -> H2Server {
    H2Server::tcp(
        defaults,
        handler(move |mut s: Stream| async move {
            let _ = s.read_to_end().await;
            if headers {
                let Some(mut send) = s.headers() else { return };
                if let Ok(reason) = poll_fn(|cx| send.poll_reset(cx)).await {
                    s.log_reset(reason);
                }
            } else {
                s.wait_reset().await;
            }
        }),
    )
    .await
}

fn idle_channel(target: &str, idle: Duration) -> Channel {
    Channel::builder(target)
        .idle_timeout(idle)
        .service_config_lookup(false)
        .build()
        .expect("channel")
}

/// The channel goes IDLE within `within`: no call is counted in flight any more.
async fn goes_idle(ch: &Channel, within: Duration) {
    let deadline = Instant::now() + within;
    let mut state = ch.state();
    while state != ConnectivityState::Idle && Instant::now() < deadline {
        state = ch.wait_for_state_change(state, deadline).await;
    }
    assert_eq!(
        state,
        ConnectivityState::Idle,
        "the channel never went IDLE: a call is still counted in flight"
    );
}

fn stats(ch: &Channel) -> (u64, u64, u64, u64) {
    let s = ch.stats();
    (
        s.calls_started,
        s.calls_succeeded,
        s.calls_failed,
        s.attempts_started,
    )
}

async fn reset_seen(server: &H2Server, reason: Reason) {
    eventually_every(SETTLE_STEP, "the server saw the reset", || {
        server.resets().iter().any(|r| r.reason == reason)
    })
    .await;
}

// ---- Cancellation at each await point ---------------------------------------------------------------

/// A unary future made and dropped without being polled does nothing: no call counted, the channel stays IDLE.
#[tokio::test(start_paused = true)]
async fn a_unary_future_never_polled_does_nothing() {
    let server = holding_server(false).await;
    let ch = idle_channel(&server.target(), Duration::from_secs(10));
    let raw = ch.unary_raw(UNARY, Request::new(Bytes::from_static(b"x")));
    let prost =
        ch.unary::<SimpleRequest, SimpleResponse>(UNARY, Request::new(SimpleRequest::default()));
    settle(Duration::from_millis(100)).await;
    drop((raw, prost));
    settle(Duration::from_millis(100)).await;
    assert_eq!(stats(&ch), (0, 0, 0, 0));
    assert_eq!(ch.state(), ConnectivityState::Idle);
    assert_eq!(server.connections(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_unary_dropped_before_commit_resets_its_stream_and_leaves_nothing_in_flight() {
    let server = holding_server(false).await;
    let ch = idle_channel(&server.target(), Duration::from_secs(10));
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        ch.unary_raw(UNARY, Request::new(Bytes::from_static(b"x"))),
    )
    .await;
    assert!(gave_up.is_err(), "the server never answers");
    reset_seen(&server, Reason::CANCEL).await;
    assert_eq!(stats(&ch), (1, 0, 1, 1));
    goes_idle(&ch, Duration::from_secs(60)).await;
}

#[tokio::test(start_paused = true)]
async fn a_unary_dropped_after_commit_resets_its_stream_and_leaves_nothing_in_flight() {
    let server = holding_server(true).await;
    let ch = idle_channel(&server.target(), Duration::from_secs(10));
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        ch.unary_raw(UNARY, Request::new(Bytes::from_static(b"x"))),
    )
    .await;
    assert!(gave_up.is_err(), "the server sends headers only");
    reset_seen(&server, Reason::CANCEL).await;
    assert_eq!(stats(&ch), (1, 0, 1, 1));
    let method = ch.stats().methods[UNARY].clone();
    assert_eq!((method.calls, method.attempts), (1, 1), "{method:?}");
    goes_idle(&ch, Duration::from_secs(60)).await;
}

#[tokio::test(start_paused = true)]
async fn a_server_streaming_call_dropped_before_its_headers_resets_its_stream() {
    let server = holding_server(false).await;
    let ch = idle_channel(&server.target(), Duration::from_secs(10));
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        ch.server_streaming::<SimpleRequest, SimpleResponse>(
            "/t.S/Stream",
            Request::new(SimpleRequest::default()),
        ),
    )
    .await;
    assert!(gave_up.is_err(), "the server never answers");
    reset_seen(&server, Reason::CANCEL).await;
    assert_eq!(stats(&ch), (1, 0, 1, 1));
    goes_idle(&ch, Duration::from_secs(60)).await;
}

/// Dropped during the backoff after a failed attempt: the call ends once (CANCELLED), and the per-method
/// statistics keep the attempt it made (as they do for a call dropped after commit, calls.rs).
#[tokio::test(start_paused = true)]
async fn a_unary_dropped_during_backoff_ends_once_and_keeps_its_attempt_in_the_stats() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            let _ = s.read_to_end().await;
            s.trailers_only("14", &[]);
        }),
    )
    .await;
    let ch = Channel::builder(server.target())
        .idle_timeout(Duration::from_secs(10))
        .default_service_config(
            retry(5, &["UNAVAILABLE"])
                .service(SVC)
                .initial_backoff("5s")
                .max_backoff("5s"),
        )
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let gave_up = tokio::time::timeout(
        Duration::from_millis(500),
        ch.unary_raw(UNARY, Request::new(Bytes::from_static(b"x"))),
    )
    .await;
    assert!(gave_up.is_err(), "still backing off");
    assert_eq!(server.opens().len(), 1);
    assert_eq!(stats(&ch), (1, 0, 1, 1));
    goes_idle(&ch, Duration::from_secs(60)).await;
    assert_eq!(server.opens().len(), 1, "no attempt after the drop");
}

// Failed before the fix (`Drop for retry_driver::Run`): a unary call dropped before it committed never
// handed the retry machine's counts to its telemetry (only the driver's finish and a committed call's end
// did), so `ChannelStats::methods` recorded it with 0 attempts although the channel totals counted it.
#[tokio::test(start_paused = true)]
async fn the_method_stats_keep_the_attempt_of_a_unary_dropped_before_commit() {
    let server = holding_server(false).await;
    let ch = idle_channel(&server.target(), Duration::from_secs(10));
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        ch.unary_raw(UNARY, Request::new(Bytes::from_static(b"x"))),
    )
    .await;
    assert!(gave_up.is_err());
    let stats = ch.stats();
    assert_eq!(stats.attempts_started, 1);
    let method = &stats.methods[UNARY];
    assert_eq!(
        (method.calls, method.attempts),
        (1, 1),
        "the dropped call's attempt is missing from the per-method stats: {method:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_for_ready_unary_dropped_while_connecting_leaves_nothing_in_flight() {
    let (_socket, addr) = reserved_port();
    let ch = idle_channel(&format!("ipv4:{addr}"), Duration::from_secs(10));
    let gave_up = tokio::time::timeout(
        Duration::from_secs(3),
        ch.unary_raw(
            UNARY,
            Request::new(Bytes::from_static(b"x")).with_wait_for_ready(true),
        ),
    )
    .await;
    assert!(gave_up.is_err(), "nothing listens: the call waits");
    let (started, ok, failed, _) = stats(&ch);
    assert_eq!((started, ok, failed), (1, 0, 1));
    goes_idle(&ch, Duration::from_secs(120)).await;
}

// ---- Around the first resolution result -----------------------------------------------------------

fn dns_channel(dns: std::net::SocketAddr, host: &str, port: u16) -> Channel {
    Channel::builder(format!("dns://{dns}/{host}:{port}"))
        .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(30)))
        .service_config_lookup(false)
        .build()
        .expect("channel")
}

#[tokio::test(start_paused = true)]
async fn a_unary_dropped_while_resolving_finishes_once_cancelled() {
    let (_socket, silent) = interop::dns::silent().await.expect("socket");
    let ch = dns_channel(silent, "svc.test", 1);
    let gave_up = tokio::time::timeout(
        Duration::from_secs(2),
        ch.unary_raw(UNARY, Request::new(Bytes::from_static(b"x"))),
    )
    .await;
    assert!(gave_up.is_err(), "resolution never answers");
    assert_eq!(stats(&ch), (1, 0, 1, 0));
    // A server-streaming call too.
    let gave_up = tokio::time::timeout(
        Duration::from_secs(2),
        ch.server_streaming::<SimpleRequest, SimpleResponse>(
            "/t.S/Stream",
            Request::new(SimpleRequest::default()),
        ),
    )
    .await;
    assert!(gave_up.is_err());
    assert_eq!(stats(&ch), (2, 0, 2, 0));
}

#[tokio::test(start_paused = true)]
async fn the_deadline_ends_calls_waiting_for_the_first_resolution_result_at_the_deadline() {
    let (_socket, silent) = interop::dns::silent().await.expect("socket");
    let ch = dns_channel(silent, "svc.test", 1);
    let start = Instant::now();
    let status = guarded(
        "unary",
        ch.unary_raw(
            UNARY,
            Request::new(Bytes::from_static(b"x")).with_timeout(Duration::from_secs(3)),
        ),
    )
    .await
    .expect_err("never resolved");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    assert_eq!(
        status.message(),
        "deadline exceeded while waiting for name resolution"
    );
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(3) && elapsed < Duration::from_millis(3100),
        "{elapsed:?}"
    );
    let start = Instant::now();
    let status = guarded(
        "server streaming",
        ch.server_streaming::<SimpleRequest, SimpleResponse>(
            "/t.S/Stream",
            Request::new(SimpleRequest::default()).with_timeout(Duration::from_secs(2)),
        ),
    )
    .await
    .expect_err("never resolved");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    assert!(start.elapsed() < Duration::from_millis(2100));
    // A deadline already past: DEADLINE_EXCEEDED at once, not a hang.
    let status = guarded(
        "zero timeout",
        ch.unary_raw(
            UNARY,
            Request::new(Bytes::new()).with_timeout(Duration::ZERO),
        ),
    )
    .await
    .expect_err("no time");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    assert_eq!(stats(&ch), (3, 0, 3, 0));
}

/// An interceptor that makes the call wait-for-ready and gives it a deadline: the call waits through a
/// failing resolution (NXDOMAIN) until that deadline, as the options after the interceptors say.
#[tokio::test(start_paused = true)]
async fn interceptor_options_apply_to_the_boxed_resolution_wait() {
    let dns = TestDns::start().await.expect("dns");
    let ch = Channel::builder(format!("dns://{}/missing.test:1", dns.addr))
        .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(2)))
        .service_config_lookup(false)
        .interceptor(|info: &mut CallInfo<'_>| -> Result<(), Status> {
            if info.method() == "/t.S/Patient" {
                info.options_mut().set_wait_for_ready(Some(true));
                info.options_mut().set_timeout(Some(Duration::from_secs(4)));
            }
            Ok(())
        })
        .build()
        .expect("channel");
    // Fail-fast: UNAVAILABLE once resolution fails.
    let status = guarded("fail fast", ch.unary_raw(UNARY, Request::new(Bytes::new())))
        .await
        .expect_err("nxdomain");
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    // Resolution has failed now: the fail-fast call fails without waiting (the `ready` path).
    let start = Instant::now();
    let status = guarded(
        "fail fast again",
        ch.unary_raw(UNARY, Request::new(Bytes::new())),
    )
    .await
    .expect_err("nxdomain");
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    assert!(start.elapsed() < Duration::from_millis(10));
    // Made wait-for-ready by the interceptor: waits through the failure until its deadline.
    let start = Instant::now();
    let status = guarded(
        "patient",
        ch.unary_raw("/t.S/Patient", Request::new(Bytes::new())),
    )
    .await
    .expect_err("nxdomain");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_secs(4) && elapsed < Duration::from_millis(4100),
        "{elapsed:?}"
    );
    assert_eq!(stats(&ch), (3, 0, 3, 0));
}

/// A server that fails the first attempt of each call (UNAVAILABLE) and answers the next with the request's
/// payload, then OK.
async fn fail_once_server() -> H2Server {
    H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            let mut body = Vec::new();
            while let Some(Ok(chunk)) = s.recv.data().await {
                let _ = s.recv.flow_control().release_capacity(chunk.len());
                body.extend_from_slice(&chunk);
            }
            if s.prev() == 0 {
                s.trailers_only("14", &[]);
                return;
            }
            let Ok(mut send) = s.respond.send_response(response_head(), false) else {
                return;
            };
            let _ = send.send_data(Bytes::from(body), false);
            let _ = send.send_trailers(trailers("0", &[]));
        }),
    )
    .await
}

/// The first calls of a DNS channel wait for its first resolution result (the boxed path), and are retried
/// from there: the request is replayed, the retry says `grpc-previous-rpc-attempts: 1`, and the response
/// says `previous_rpc_attempts() == 1`. Unary and server-streaming.
#[tokio::test(start_paused = true)]
async fn calls_started_before_the_first_resolution_result_are_retried_and_report_previous_attempts()
{
    let server = fail_once_server().await;
    let dns = TestDns::start().await.expect("dns");
    dns.add_a("svc.test", Ipv4Addr::LOCALHOST).await;
    let config = retry(3, &["UNAVAILABLE"]).service(SVC);
    let build = || {
        Channel::builder(format!(
            "dns://{}/svc.test:{}",
            dns.addr,
            server.addr().port()
        ))
        .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(2)))
        .default_service_config(config.clone())
        .service_config_lookup(false)
        .build()
        .expect("channel")
    };
    let ch = build();
    let response = guarded(
        "unary",
        ch.unary_raw(UNARY, Request::new(Bytes::from_static(b"payload"))),
    )
    .await
    .expect("the retry succeeds");
    // The retry echoes its request body: the request was replayed whole.
    assert_eq!(&response.message()[..], b"payload");
    assert_eq!(response.previous_rpc_attempts(), 1);
    let opens = server.opens();
    assert_eq!(opens.len(), 2);
    assert_eq!(opens[0].previous_attempts(), None);
    assert_eq!(opens[1].previous_attempts().as_deref(), Some("1"));

    // A fresh channel: its first call is a server-streaming one.
    let ch = build();
    let request = SimpleRequest {
        response_size: 7,
        ..Default::default()
    };
    let response = guarded(
        "server streaming",
        ch.server_streaming::<SimpleRequest, SimpleRequest>(
            "/t.S/Stream",
            Request::new(request.clone()),
        ),
    )
    .await
    .expect("the retry succeeds");
    assert_eq!(response.previous_rpc_attempts(), 1);
    let mut stream = response.into_message();
    assert_eq!(stream.previous_rpc_attempts(), 1);
    let echoed = guarded("message", stream.message())
        .await
        .expect("message")
        .expect("one");
    assert_eq!(echoed, request);
    assert!(guarded("end", stream.message())
        .await
        .expect("OK")
        .is_none());
    assert_eq!(server.opens().len(), 4);
    assert_eq!(stats(&ch), (1, 1, 0, 2));
}

// ---- The direct hand-over --------------------------------------------------------------------------

/// A server that answers at once with everything in one go (headers, `n` messages, trailers `code`), so the
/// whole response may be in before the driver hands over.
async fn eager_server(n: usize, code: &'static str) -> H2Server {
    H2Server::tcp(
        defaults,
        handler(move |mut s: Stream| async move {
            let _ = s.read_to_end().await;
            let Ok(mut send) = s.respond.send_response(response_head(), false) else {
                return;
            };
            for i in 0..n {
                let message = SimpleRequest {
                    response_size: i as i32 + 1,
                    ..Default::default()
                };
                let _ = send.send_data(
                    grpc_message(&prost::Message::encode_to_vec(&message)),
                    false,
                );
            }
            let _ = send.send_trailers(trailers(code, &[("x-t", "v")]));
        }),
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn a_server_stream_complete_before_the_hand_over_is_read_whole() {
    let server = eager_server(3, "0").await;
    let ch = idle_channel(&server.target(), Duration::from_secs(10));
    // Let the connection come up first, so a call's response may be complete by the time it commits.
    ch.connect();
    settle(Duration::from_millis(50)).await;
    for _ in 0..5 {
        let response = guarded(
            "call",
            ch.server_streaming::<SimpleRequest, SimpleRequest>(
                "/t.S/Stream",
                Request::new(SimpleRequest::default()),
            ),
        )
        .await
        .expect("call");
        let mut stream = response.into_message();
        let mut sizes = Vec::new();
        while let Some(m) = guarded("message", stream.message()).await.expect("ok") {
            sizes.push(m.response_size);
        }
        assert_eq!(sizes, [1, 2, 3]);
        assert_eq!(stream.trailers().and_then(|t| t.get("x-t")), Some("v"));
        // Polled again after the end: the same outcome.
        assert!(guarded("again", stream.message())
            .await
            .expect("ok")
            .is_none());
    }
    assert_eq!(stats(&ch), (5, 5, 0, 5));
    goes_idle(&ch, Duration::from_secs(60)).await;
}

/// A unary response with an error status after a message: the status wins, counted once; a response with
/// two messages: UNIMPLEMENTED and the stream cancelled.
#[tokio::test(start_paused = true)]
async fn unary_outcomes_after_the_direct_hand_over() {
    let server = eager_server(1, "5").await;
    let ch = idle_channel(&server.target(), Duration::from_secs(10));
    let status = guarded("call", ch.unary_raw(UNARY, Request::new(Bytes::new())))
        .await
        .expect_err("NOT_FOUND");
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(status.metadata().get("x-t"), Some("v"));
    assert_eq!(stats(&ch), (1, 0, 1, 1));

    let server = eager_server(2, "0").await;
    let ch = idle_channel(&server.target(), Duration::from_secs(10));
    let status = guarded("call", ch.unary_raw(UNARY, Request::new(Bytes::new())))
        .await
        .expect_err("two messages");
    assert_eq!(status.code(), Code::Unimplemented);
    assert_eq!(stats(&ch), (1, 0, 1, 1));
    goes_idle(&ch, Duration::from_secs(60)).await;
}

/// A server-streaming call that ends with Trailers-Only after a retry: the error, with the number of
/// attempts before it.
#[tokio::test(start_paused = true)]
async fn a_server_streaming_call_that_fails_before_commit_reports_its_status_and_attempts() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            let _ = s.read_to_end().await;
            s.trailers_only("14", &[("x-t", "v")]);
        }),
    )
    .await;
    let ch = Channel::builder(server.target())
        .default_service_config(retry(3, &["UNAVAILABLE"]).service(SVC))
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let status = guarded(
        "call",
        ch.server_streaming::<SimpleRequest, SimpleResponse>(
            "/t.S/Stream",
            Request::new(SimpleRequest::default()),
        ),
    )
    .await
    .expect_err("always UNAVAILABLE");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.previous_rpc_attempts(), 2);
    assert_eq!(status.metadata().get("x-t"), Some("v"));
    assert_eq!(server.opens().len(), 3);
    assert_eq!(stats(&ch), (1, 0, 1, 3));
    let method = &ch.stats().methods["/t.S/Stream"];
    assert_eq!((method.calls, method.attempts), (1, 3), "{method:?}");
}

// ---- Exactly-once ids ----------------------------------------------------------------------------------

fn request_id(o: &support::h2_server::Opened) -> grpc_exactly_once::RequestId {
    let value = o
        .headers
        .get(grpc_exactly_once::HEADER)
        .expect("request id");
    let bytes = grpc_channel::metadata::decode_bin(value.as_bytes()).expect("base64");
    grpc_exactly_once::RequestId::from_bytes(&bytes).expect("id")
}

/// An exactly-once call dropped at any await point (resolution, before commit, after commit) is no longer
/// in flight: a later call's watermark (its first incomplete sequence number) is its own.
#[tokio::test(start_paused = true)]
async fn exactly_once_ids_of_dropped_unary_calls_are_released() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            let _ = s.read_to_end().await;
            match s.path.as_str() {
                "/t.S/Silent" => s.wait_reset().await,
                "/t.S/Headers" => {
                    let Some(mut send) = s.headers() else { return };
                    let _ = poll_fn(|cx| send.poll_reset(cx)).await;
                }
                _ => s.ok(b"ok"),
            }
        }),
    )
    .await;
    let dns = TestDns::start().await.expect("dns");
    dns.add_a("svc.test", Ipv4Addr::LOCALHOST).await;
    let ch = Channel::builder(format!(
        "dns://{}/svc.test:{}",
        dns.addr,
        server.addr().port()
    ))
    .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(2)))
    .service_config_lookup(false)
    .exactly_once(true)
    .build()
    .expect("channel");
    for path in ["/t.S/Silent", "/t.S/Headers"] {
        let gave_up = tokio::time::timeout(
            Duration::from_secs(1),
            ch.unary_raw(path, Request::new(Bytes::from_static(b"x"))),
        )
        .await;
        assert!(gave_up.is_err(), "{path} never answers");
    }
    guarded("ok", ch.unary_raw("/t.S/Ok", Request::new(Bytes::new())))
        .await
        .expect("ok");
    let opens = server.opens();
    assert_eq!(opens.len(), 3);
    let last = request_id(&opens[2]);
    assert_eq!(
        last.first_incomplete_seq_no,
        last.seq_no,
        "a dropped call is still in flight: {:?}",
        opens.iter().map(request_id).collect::<Vec<_>>()
    );
}

// ---- Send ------------------------------------------------------------------------------------------------

/// `tokio::spawn` of a unary call compiles for any prost request (generic code), with a borrowed path.
fn spawn_unary<Req, Resp>(
    ch: Channel,
    path: String,
    request: Req,
) -> tokio::task::JoinHandle<Result<grpc_channel::Response<Resp>, Status>>
where
    Req: prost::Message + Send + 'static,
    Resp: prost::Message + Default + 'static,
{
    tokio::spawn(async move { ch.unary::<Req, Resp>(&path, Request::new(request)).await })
}

fn spawn_server_streaming<Req, Resp>(
    ch: Channel,
    path: String,
    request: Req,
) -> tokio::task::JoinHandle<Result<grpc_channel::Response<grpc_channel::Streaming<Resp>>, Status>>
where
    Req: prost::Message + Send + 'static,
    Resp: prost::Message + Default + Send + 'static,
{
    tokio::spawn(async move {
        ch.server_streaming::<Req, Resp>(&path, Request::new(request))
            .await
    })
}

fn assert_send<T: Send>(t: T) -> T {
    t
}

#[tokio::test(start_paused = true)]
async fn unary_futures_are_send_in_generic_code() {
    let server = eager_server(1, "0").await;
    let ch = idle_channel(&server.target(), Duration::from_secs(10));
    let response = guarded(
        "spawned",
        spawn_unary::<SimpleRequest, SimpleRequest>(
            ch.clone(),
            UNARY.into(),
            SimpleRequest::default(),
        ),
    )
    .await
    .expect("joined");
    assert_eq!(response.expect("ok").message().response_size, 1);
    let path = String::from(UNARY);
    let raw = assert_send(ch.unary_raw(&path, Request::new(Bytes::new())));
    let _ = guarded("raw", raw).await;
    let stream = guarded(
        "spawned",
        spawn_server_streaming::<SimpleRequest, SimpleRequest>(
            ch.clone(),
            "/t.S/Stream".into(),
            SimpleRequest::default(),
        ),
    )
    .await
    .expect("joined");
    assert!(stream.is_ok());
    // `'static` channel: the future itself is spawned.
    let leaked: &'static Channel = Box::leak(Box::new(ch.clone()));
    let handle = tokio::spawn(
        leaked.unary::<SimpleRequest, SimpleRequest>(UNARY, Request::new(SimpleRequest::default())),
    );
    assert!(guarded("join", handle).await.expect("joined").is_ok());
}

// ---- More shapes of cancellation and failure ---------------------------------------------------------

/// A hedged unary call dropped while its three attempts are in flight: each is reset with CANCEL, each is
/// counted, and the channel goes idle.
#[tokio::test(start_paused = true)]
async fn a_hedged_unary_dropped_with_three_attempts_in_flight_cancels_them_all() {
    let server = holding_server(false).await;
    let ch = Channel::builder(server.target())
        .idle_timeout(Duration::from_secs(10))
        .default_service_config(support::config::hedging(3, "0.1s").service(SVC))
        .service_config_lookup(false)
        .build()
        .expect("channel");
    let gave_up = tokio::time::timeout(
        Duration::from_millis(350),
        ch.unary_raw(UNARY, Request::new(Bytes::from_static(b"x"))),
    )
    .await;
    assert!(gave_up.is_err());
    eventually_every(SETTLE_STEP, "three resets", || server.resets().len() == 3).await;
    assert!(server.resets().iter().all(|r| r.reason == Reason::CANCEL));
    assert_eq!(stats(&ch), (1, 0, 1, 3));
    goes_idle(&ch, Duration::from_secs(60)).await;
}

/// An oversize request fails RESOURCE_EXHAUSTED unsent, also when the call first waits for resolution (the
/// boxed path encodes it after the wait).
#[tokio::test(start_paused = true)]
async fn an_oversize_request_fails_unsent_after_the_resolution_wait() {
    let server = holding_server(false).await;
    let dns = TestDns::start().await.expect("dns");
    dns.add_a("svc.test", Ipv4Addr::LOCALHOST).await;
    let ch = Channel::builder(format!(
        "dns://{}/svc.test:{}",
        dns.addr,
        server.addr().port()
    ))
    .resolver_options(ResolverOptions::default().with_query_timeout(Duration::from_secs(2)))
    .service_config_lookup(false)
    .max_send_message_size(10)
    .build()
    .expect("channel");
    for _ in 0..2 {
        let status = guarded(
            "oversize",
            ch.unary_raw(UNARY, Request::new(Bytes::from(vec![0; 100]))),
        )
        .await
        .expect_err("too large");
        assert_eq!(status.code(), Code::ResourceExhausted, "{status}");
    }
    let status = guarded(
        "oversize stream",
        ch.server_streaming::<SimpleRequest, SimpleResponse>(
            "/t.S/Stream",
            Request::new(SimpleRequest {
                payload: Some(interop_proto::Payload {
                    r#type: 0,
                    body: Bytes::from(vec![0; 100]),
                }),
                ..Default::default()
            }),
        ),
    )
    .await
    .expect_err("too large");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status}");
    assert_eq!(stats(&ch), (3, 0, 3, 0));
    assert!(server.opens().is_empty());
}

/// Many unary calls on one channel, each given up at a different moment (before the response headers,
/// between headers and message, or never): every call is counted once, every stream either completes or
/// is reset with CANCEL, and the channel goes idle.
#[tokio::test(start_paused = true)]
async fn calls_given_up_at_every_moment_are_each_counted_once() {
    let server = H2Server::tcp(
        defaults,
        handler(|mut s: Stream| async move {
            let _ = s.read_to_end().await;
            let n: u64 = s.header("x-n").and_then(|v| v.parse().ok()).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(10 * (n % 7))).await;
            let Ok(mut send) = s.respond.send_response(response_head(), false) else {
                return;
            };
            tokio::time::sleep(Duration::from_millis(10 * (n % 5))).await;
            let _ = send.send_data(grpc_message(b"m"), false);
            let _ = send.send_trailers(trailers("0", &[]));
            if let Ok(reason) = poll_fn(|cx| send.poll_reset(cx)).await {
                s.log_reset(reason);
            }
        }),
    )
    .await;
    let ch = idle_channel(&server.target(), Duration::from_secs(10));
    let mut tasks = Vec::new();
    const N: u64 = 60;
    for n in 0..N {
        let ch = ch.clone();
        tasks.push(tokio::spawn(async move {
            let mut request = Request::new(Bytes::from_static(b"x"));
            request
                .metadata_mut()
                .append("x-n", &n.to_string())
                .expect("md");
            let limit = Duration::from_millis(5 * (n % 23));
            tokio::time::timeout(limit, ch.unary_raw(UNARY, request))
                .await
                .map(|r| r.is_ok())
        }));
    }
    let mut ok = 0;
    let mut gave_up = 0;
    for t in tasks {
        match guarded("join", t).await.expect("joined") {
            Ok(true) => ok += 1,
            Ok(false) => panic!("a call failed"),
            Err(_) => gave_up += 1,
        }
    }
    settle(Duration::from_millis(200)).await;
    let (started, succeeded, failed, attempts) = stats(&ch);
    assert_eq!(started, N);
    assert_eq!(succeeded + failed, N, "every call finished once");
    assert_eq!(succeeded, ok);
    assert_eq!(failed, gave_up);
    assert_eq!(attempts, N);
    goes_idle(&ch, Duration::from_secs(60)).await;
}
