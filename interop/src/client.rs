//! The interop test cases (`shared/spec/interop.md`), client side, on `grpc-channel`: through the clients
//! grpc-build generates (`interop_proto::test_service_client`), except where a case needs what only the channel's
//! sender/receiver halves offer (per-message compression, cancelling mid-call, strict ping-pong).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use grpc_channel::{Channel, Code, Encoding, MessageOptions, Request, Status};
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::unimplemented_service_client::UnimplementedServiceClient;
use interop_proto::{
    paths, BoolValue, EchoStatus, Empty, Payload, ResponseParameters, SimpleRequest,
    StreamingInputCallRequest, StreamingInputCallResponse, StreamingOutputCallRequest,
    StreamingOutputCallResponse,
};
use tokio_stream::StreamExt as _;

/// Every case this client runs for `--test_case=all`, in order.
pub const ALL_CASES: [&str; 20] = [
    "empty_unary",
    "large_unary",
    "client_compressed_unary",
    "server_compressed_unary",
    "client_streaming",
    "client_compressed_streaming",
    "server_streaming",
    "server_compressed_streaming",
    "ping_pong",
    "empty_stream",
    "custom_metadata",
    "status_code_and_message",
    "special_status_message",
    "unimplemented_method",
    "unimplemented_service",
    "cancel_after_begin",
    "cancel_after_first_response",
    "timeout_on_sleeping_server",
    "rpc_soak",
    "channel_soak",
];

/// Set once a write to stdout has failed; nothing more is written after that.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Writes `text` to stdout and flushes it. Unlike `print!`, which panics when stdout is a closed pipe (Rust
/// ignores SIGPIPE, so `| head -1` gives EPIPE), this returns the error; after the first failure it writes
/// nothing more and returns `BrokenPipe`.
pub fn write_stdout(text: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return Err(std::io::ErrorKind::BrokenPipe.into());
    }
    let mut stdout = std::io::stdout().lock();
    let result = stdout.write_fmt(text).and_then(|()| stdout.flush());
    if result.is_err() {
        STDOUT_GONE.store(true, Ordering::Relaxed);
    }
    result
}

/// Writes one line to stdout, never panicking: once stdout is gone (a closed pipe), the remaining lines are
/// dropped quietly and the caller carries on; any other write error is reported once on stderr.
pub fn out_line(line: std::fmt::Arguments<'_>) {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    }
    if let Err(e) = write_stdout(format_args!("{line}\n")) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("interop-client: cannot write to stdout ({e}); carrying on without output");
        }
    }
}

/// Settings of the soak cases (the standard flags' defaults).
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// `--soak_iterations`.
    pub iterations: u32,
    /// `--soak_max_failures`.
    pub max_failures: u32,
    /// `--soak_per_iteration_max_acceptable_latency_ms`.
    pub max_latency: Duration,
    /// `--soak_overall_timeout_seconds`.
    pub overall_timeout: Duration,
    /// `--soak_min_time_ms_between_rpcs`.
    pub min_time_between: Duration,
    /// `--soak_request_size`.
    pub request_size: usize,
    /// `--soak_response_size`.
    pub response_size: usize,
    /// `--soak_num_threads`.
    pub threads: u32,
}

impl Default for SoakConfig {
    fn default() -> Self {
        SoakConfig {
            iterations: 10,
            max_failures: 0,
            max_latency: Duration::from_millis(1000),
            overall_timeout: Duration::from_secs(10),
            min_time_between: Duration::ZERO,
            request_size: 271_828,
            response_size: 314_159,
            threads: 1,
        }
    }
}

/// What the cases run against.
#[derive(Clone, Debug)]
pub struct Context {
    /// The channel the cases share.
    pub channel: Channel,
    /// The target, for messages.
    pub target: String,
    /// Builds the channel_soak case's new channels, configured as `channel` was (authority, TLS, service
    /// config).
    pub channel_builder: grpc_channel::ChannelBuilder,
    /// `--additional_metadata`, sent on every call.
    pub metadata: Vec<(String, String)>,
    /// Soak settings.
    pub soak: SoakConfig,
}

type CaseResult = Result<(), String>;

/// Runs one case by name.
pub async fn run_case(ctx: &Context, name: &str) -> CaseResult {
    match name {
        "empty_unary" => empty_unary(ctx).await,
        "large_unary" => large_unary(ctx).await,
        "client_compressed_unary" => client_compressed_unary(ctx).await,
        "server_compressed_unary" => server_compressed_unary(ctx).await,
        "client_streaming" => client_streaming(ctx).await,
        "client_compressed_streaming" => client_compressed_streaming(ctx).await,
        "server_streaming" => server_streaming(ctx).await,
        "server_compressed_streaming" => server_compressed_streaming(ctx).await,
        "ping_pong" => ping_pong(ctx).await,
        "empty_stream" => empty_stream(ctx).await,
        "custom_metadata" => custom_metadata(ctx).await,
        "status_code_and_message" => status_code_and_message(ctx).await,
        "special_status_message" => special_status_message(ctx).await,
        "unimplemented_method" => unimplemented_method(ctx).await,
        "unimplemented_service" => unimplemented_service(ctx).await,
        "cancel_after_begin" => cancel_after_begin(ctx).await,
        "cancel_after_first_response" => cancel_after_first_response(ctx).await,
        "timeout_on_sleeping_server" => timeout_on_sleeping_server(ctx).await,
        "rpc_soak" => soak(ctx, false).await,
        "channel_soak" => soak(ctx, true).await,
        other => Err(format!("unknown test case {other:?}")),
    }
}

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

fn zeros(n: usize) -> Option<Payload> {
    Some(Payload {
        r#type: 0,
        body: Bytes::from(vec![0u8; n]),
    })
}

fn bool_value(value: bool) -> Option<BoolValue> {
    Some(BoolValue { value })
}

fn body_len(payload: &Option<Payload>) -> usize {
    payload.as_ref().map_or(0, |p| p.body.len())
}

type FullDuplex = (
    grpc_channel::RequestSender<StreamingOutputCallRequest>,
    grpc_channel::Streaming<StreamingOutputCallResponse>,
);
type StreamingInput = (
    grpc_channel::RequestSender<StreamingInputCallRequest>,
    grpc_channel::Streaming<StreamingInputCallResponse>,
);

impl Context {
    /// A generated TestService client on the shared channel.
    fn test_service(&self) -> TestServiceClient {
        TestServiceClient::new(self.channel.clone())
    }

    /// Starts a FullDuplexCall.
    async fn full_duplex(&self, request: Request<()>) -> Result<FullDuplex, String> {
        ok(
            self.channel
                .streaming(paths::FULL_DUPLEX_CALL, request)
                .await,
            "FullDuplexCall",
        )
    }

    /// Starts a StreamingInputCall.
    async fn streaming_input(&self, request: Request<()>) -> Result<StreamingInput, String> {
        ok(
            self.channel
                .streaming(paths::STREAMING_INPUT_CALL, request)
                .await,
            "StreamingInputCall",
        )
    }

    fn request<T>(&self, message: T) -> Request<T> {
        let mut r = Request::new(message);
        for (k, v) in &self.metadata {
            // The flag's keys were checked when it was parsed.
            let _ = r.metadata_mut().append(k, v);
        }
        r
    }
}

fn expect_code<T>(result: Result<T, Status>, code: Code, what: &str) -> CaseResult {
    match result {
        Ok(_) => Err(format!("{what}: expected {code}, got OK")),
        Err(s) if s.code() == code => Ok(()),
        Err(s) => Err(format!("{what}: expected {code}, got {s}")),
    }
}

fn ok<T>(result: Result<T, Status>, what: &str) -> Result<T, String> {
    result.map_err(|s| format!("{what}: {s}"))
}

async fn empty_unary(ctx: &Context) -> CaseResult {
    let r = ok(
        ctx.test_service().empty_call(ctx.request(Empty {})).await,
        "EmptyCall",
    )?;
    ensure!(*r.get_ref() == Empty {}, "response is not Empty");
    Ok(())
}

fn large_request() -> SimpleRequest {
    SimpleRequest {
        response_size: 314_159,
        payload: zeros(271_828),
        ..Default::default()
    }
}

async fn large_unary(ctx: &Context) -> CaseResult {
    let r = ok(
        ctx.test_service()
            .unary_call(ctx.request(large_request()))
            .await,
        "UnaryCall",
    )?;
    ensure!(
        body_len(&r.message().payload) == 314_159,
        "response body is {} bytes",
        body_len(&r.message().payload)
    );
    ensure!(
        r.message()
            .payload
            .as_ref()
            .is_some_and(|p| p.body.iter().all(|b| *b == 0)),
        "body is not zeros"
    );
    Ok(())
}

async fn client_compressed_unary(ctx: &Context) -> CaseResult {
    let probe = SimpleRequest {
        expect_compressed: bool_value(true),
        ..large_request()
    };
    expect_code(
        ctx.test_service()
            .unary_call(ctx.request(probe.clone()))
            .await,
        Code::InvalidArgument,
        "uncompressed probe",
    )?;
    let compressed = ctx.request(probe).with_compression(Encoding::Gzip);
    let r = ok(
        ctx.test_service().unary_call(compressed).await,
        "compressed request",
    )?;
    ensure!(
        body_len(&r.message().payload) == 314_159,
        "compressed: wrong body size"
    );
    let plain = SimpleRequest {
        expect_compressed: bool_value(false),
        ..large_request()
    };
    let r = ok(
        ctx.test_service().unary_call(ctx.request(plain)).await,
        "uncompressed request",
    )?;
    ensure!(
        body_len(&r.message().payload) == 314_159,
        "uncompressed: wrong body size"
    );
    Ok(())
}

async fn server_compressed_unary(ctx: &Context) -> CaseResult {
    for compressed in [true, false] {
        let req = SimpleRequest {
            response_compressed: bool_value(compressed),
            ..large_request()
        };
        let r = ok(
            ctx.test_service().unary_call(ctx.request(req)).await,
            "UnaryCall",
        )?;
        ensure!(body_len(&r.message().payload) == 314_159, "wrong body size");
        ensure!(
            r.was_compressed() == compressed,
            "response_compressed={compressed} but the message's compressed flag was {}",
            r.was_compressed()
        );
    }
    Ok(())
}

fn input(size: usize, expect_compressed: Option<bool>) -> StreamingInputCallRequest {
    StreamingInputCallRequest {
        payload: zeros(size),
        expect_compressed: expect_compressed.and_then(bool_value),
    }
}

async fn client_streaming(ctx: &Context) -> CaseResult {
    let requests = [27_182, 8, 1_828, 45_904].map(|size| input(size, None));
    // The call fails (UNIMPLEMENTED) unless exactly one response arrives.
    let resp = ok(
        ctx.test_service()
            .streaming_input_call(ctx.request(tokio_stream::iter(requests)))
            .await,
        "StreamingInputCall",
    )?
    .into_inner();
    ensure!(
        resp.aggregated_payload_size == 74_922,
        "aggregated_payload_size {}",
        resp.aggregated_payload_size
    );
    Ok(())
}

async fn client_compressed_streaming(ctx: &Context) -> CaseResult {
    let (mut tx, mut rx) = ctx.streaming_input(ctx.request(())).await?;
    // The probe's send may fail once the server has rejected the call; the status is what counts.
    let _ = tx.send(input(27_182, Some(true))).await;
    drop(tx);
    expect_code(
        rx.message().await,
        Code::InvalidArgument,
        "uncompressed probe",
    )?;

    let request = ctx.request(()).with_compression(Encoding::Gzip);
    let (mut tx, mut rx) = ctx.streaming_input(request).await?;
    ok(tx.send(input(27_182, Some(true))).await, "send compressed")?;
    ok(
        tx.send_with(input(45_904, Some(false)), MessageOptions::uncompressed())
            .await,
        "send uncompressed",
    )?;
    ok(tx.finish().await, "half-close")?;
    let resp = ok(rx.message().await, "response")?.ok_or("no response")?;
    ensure!(
        resp.aggregated_payload_size == 73_086,
        "aggregated_payload_size {}",
        resp.aggregated_payload_size
    );
    ensure!(
        ok(rx.message().await, "status")?.is_none(),
        "more than one response"
    );
    Ok(())
}

fn params(size: i32, compressed: Option<bool>) -> ResponseParameters {
    ResponseParameters {
        size,
        compressed: compressed.and_then(bool_value),
        ..Default::default()
    }
}

async fn server_streaming(ctx: &Context) -> CaseResult {
    let sizes = [31_415, 9, 2_653, 58_979];
    let req = StreamingOutputCallRequest {
        response_parameters: sizes.iter().map(|s| params(*s, None)).collect(),
        ..Default::default()
    };
    let r = ok(
        ctx.test_service()
            .streaming_output_call(ctx.request(req))
            .await,
        "StreamingOutputCall",
    )?;
    let mut stream = r.into_inner();
    let mut got = Vec::new();
    while let Some(msg) = ok(stream.message().await, "message")? {
        got.push(body_len(&msg.payload));
    }
    ensure!(got == sizes.map(|s| s as usize), "response sizes {got:?}");
    Ok(())
}

async fn server_compressed_streaming(ctx: &Context) -> CaseResult {
    let req = StreamingOutputCallRequest {
        response_parameters: vec![params(31_415, Some(true)), params(92_653, Some(false))],
        ..Default::default()
    };
    let r = ok(
        ctx.test_service()
            .streaming_output_call(ctx.request(req))
            .await,
        "StreamingOutputCall",
    )?;
    let mut stream = r.into_inner();
    let mut got = Vec::new();
    while let Some(msg) = ok(stream.message().await, "message")? {
        got.push((body_len(&msg.payload), stream.last_message_compressed()));
    }
    ensure!(
        got == [(31_415, true), (92_653, false)],
        "(size, compressed) of responses: {got:?}"
    );
    Ok(())
}

async fn ping_pong(ctx: &Context) -> CaseResult {
    let (mut tx, mut rx) = ctx.full_duplex(ctx.request(())).await?;
    for (resp_size, req_size) in [(31_415, 27_182), (9, 8), (2_653, 1_828), (58_979, 45_904)] {
        let req = StreamingOutputCallRequest {
            response_parameters: vec![params(resp_size, None)],
            payload: zeros(req_size),
            ..Default::default()
        };
        ok(tx.send(req).await, "send")?;
        let resp = ok(rx.message().await, "reply")?.ok_or("stream ended early")?;
        ensure!(
            body_len(&resp.payload) == resp_size as usize,
            "reply of {} bytes",
            body_len(&resp.payload)
        );
    }
    ok(tx.finish().await, "half-close")?;
    ensure!(
        ok(rx.message().await, "status")?.is_none(),
        "unexpected extra reply"
    );
    Ok(())
}

async fn empty_stream(ctx: &Context) -> CaseResult {
    let requests = tokio_stream::empty::<StreamingOutputCallRequest>();
    let mut rx = ok(
        ctx.test_service()
            .full_duplex_call(ctx.request(requests))
            .await,
        "FullDuplexCall",
    )?
    .into_inner();
    ensure!(
        ok(rx.message().await, "status")?.is_none(),
        "expected no responses"
    );
    Ok(())
}

const ECHO_INITIAL: &str = "x-grpc-test-echo-initial";
const ECHO_TRAILING: &str = "x-grpc-test-echo-trailing-bin";
const INITIAL_VALUE: &str = "test_initial_metadata_value";
const TRAILING_VALUE: [u8; 3] = [0xab, 0xab, 0xab];

fn with_echo_metadata<T>(mut r: Request<T>) -> Request<T> {
    let md = r.metadata_mut();
    let _ = md.append(ECHO_INITIAL, INITIAL_VALUE);
    let _ = md.append_bin(ECHO_TRAILING, &TRAILING_VALUE);
    r
}

fn check_echo(
    initial: Option<&grpc_channel::MetadataMap>,
    trailing: Option<&grpc_channel::MetadataMap>,
) -> CaseResult {
    let got = initial.and_then(|m| m.get(ECHO_INITIAL));
    ensure!(got == Some(INITIAL_VALUE), "initial metadata echo: {got:?}");
    let got = trailing
        .and_then(|m| m.get_bin(ECHO_TRAILING))
        .and_then(Result::ok);
    ensure!(
        got.as_deref() == Some(&TRAILING_VALUE[..]),
        "trailing metadata echo: {got:?}"
    );
    Ok(())
}

async fn custom_metadata(ctx: &Context) -> CaseResult {
    let req = with_echo_metadata(ctx.request(SimpleRequest {
        response_size: 314_159,
        payload: zeros(271_828),
        ..Default::default()
    }));
    let r = ok(ctx.test_service().unary_call(req).await, "UnaryCall")?;
    check_echo(Some(r.metadata()), Some(r.trailers())).map_err(|e| format!("unary: {e}"))?;

    let requests = tokio_stream::once(StreamingOutputCallRequest {
        response_parameters: vec![params(314_159, None)],
        payload: zeros(271_828),
        ..Default::default()
    });
    let mut rx = ok(
        ctx.test_service()
            .full_duplex_call(with_echo_metadata(ctx.request(requests)))
            .await,
        "FullDuplexCall",
    )?
    .into_inner();
    let mut n = 0;
    while let Some(msg) = ok(rx.message().await, "message")? {
        ensure!(body_len(&msg.payload) == 314_159, "reply size");
        n += 1;
    }
    ensure!(n == 1, "{n} replies");
    check_echo(rx.metadata(), rx.trailers()).map_err(|e| format!("streaming: {e}"))
}

async fn check_status_echo(ctx: &Context, code: i32, message: &str) -> CaseResult {
    let echo = Some(EchoStatus {
        code,
        message: message.to_owned(),
    });
    let req = SimpleRequest {
        response_status: echo.clone(),
        ..Default::default()
    };
    let want = Code::from_i32(code).ok_or("bad code")?;
    match ctx.test_service().unary_call(ctx.request(req)).await {
        Err(s) if s.code() == want && s.message() == message => {}
        Err(s) => return Err(format!("unary: got {:?} {:?}", s.code(), s.message())),
        Ok(_) => return Err("unary: got OK".to_owned()),
    }
    let requests = tokio_stream::once(StreamingOutputCallRequest {
        response_status: echo,
        ..Default::default()
    });
    let mut client = ctx.test_service();
    let outcome = async {
        let mut rx = client
            .full_duplex_call(ctx.request(requests))
            .await?
            .into_inner();
        rx.message().await
    };
    match outcome.await {
        Err(s) if s.code() == want && s.message() == message => Ok(()),
        Err(s) => Err(format!("streaming: got {:?} {:?}", s.code(), s.message())),
        Ok(_) => Err("streaming: got no error".to_owned()),
    }
}

async fn status_code_and_message(ctx: &Context) -> CaseResult {
    check_status_echo(ctx, 2, "test status message").await
}

async fn special_status_message(ctx: &Context) -> CaseResult {
    check_status_echo(
        ctx,
        2,
        "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n",
    )
    .await
}

async fn unimplemented_method(ctx: &Context) -> CaseResult {
    expect_code(
        ctx.test_service()
            .unimplemented_call(ctx.request(Empty {}))
            .await,
        Code::Unimplemented,
        paths::UNIMPLEMENTED_CALL,
    )
}

async fn unimplemented_service(ctx: &Context) -> CaseResult {
    expect_code(
        UnimplementedServiceClient::new(ctx.channel.clone())
            .unimplemented_call(ctx.request(Empty {}))
            .await,
        Code::Unimplemented,
        paths::UNIMPLEMENTED_SERVICE_CALL,
    )
}

async fn cancel_after_begin(ctx: &Context) -> CaseResult {
    let (tx, mut rx) = ctx.streaming_input(ctx.request(())).await?;
    rx.cancel();
    drop(tx);
    expect_code(rx.message().await, Code::Cancelled, "after cancel")
}

async fn cancel_after_first_response(ctx: &Context) -> CaseResult {
    let (mut tx, mut rx) = ctx.full_duplex(ctx.request(())).await?;
    ok(
        tx.send(StreamingOutputCallRequest {
            response_parameters: vec![params(31_415, None)],
            payload: zeros(27_182),
            ..Default::default()
        })
        .await,
        "send",
    )?;
    let first = ok(rx.message().await, "first reply")?.ok_or("no reply")?;
    ensure!(body_len(&first.payload) == 31_415, "reply size");
    rx.cancel();
    expect_code(rx.message().await, Code::Cancelled, "after cancel")?;
    expect_code(
        tx.send(StreamingOutputCallRequest::default()).await,
        Code::Cancelled,
        "send after cancel",
    )
}

async fn timeout_on_sleeping_server(ctx: &Context) -> CaseResult {
    // One request, and no half-close: the server sleeps until the deadline.
    let requests = tokio_stream::once(StreamingOutputCallRequest {
        payload: zeros(27_182),
        ..Default::default()
    })
    .chain(tokio_stream::pending());
    let request = ctx.request(requests).with_timeout(Duration::from_millis(1));
    let mut client = ctx.test_service();
    // The deadline may pass while the call starts or while it waits for a reply.
    let outcome = async {
        let mut rx = client.full_duplex_call(request).await?.into_inner();
        rx.message().await
    };
    expect_code(outcome.await, Code::DeadlineExceeded, "sleeping server")
}

async fn soak(ctx: &Context, new_channel_each_time: bool) -> CaseResult {
    let cfg = &ctx.soak;
    let overall_deadline = Instant::now() + cfg.overall_timeout;
    let threads = cfg.threads.max(1);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let ctx = ctx.clone();
            let per_thread = cfg.iterations / threads + u32::from(t < cfg.iterations % threads);
            tokio::spawn(async move {
                soak_thread(&ctx, t, per_thread, new_channel_each_time, overall_deadline).await
            })
        })
        .collect();
    let (mut done, mut failures, mut attempted) = (0, 0, 0);
    for h in handles {
        let (d, f, a) = h.await.map_err(|e| format!("soak thread panicked: {e}"))?;
        done += d;
        failures += f;
        attempted += a;
    }
    out_line(format_args!(
        "soak summary: {attempted} of {} iterations ran, {done} succeeded within the latency limit, {failures} failed",
        cfg.iterations
    ));
    ensure!(
        attempted == cfg.iterations,
        "only {attempted} of {} iterations ran before the overall timeout",
        cfg.iterations
    );
    ensure!(
        failures <= cfg.max_failures,
        "{failures} failures, more than the {} allowed",
        cfg.max_failures
    );
    Ok(())
}

async fn soak_thread(
    ctx: &Context,
    thread: u32,
    iterations: u32,
    new_channel: bool,
    overall_deadline: Instant,
) -> (u32, u32, u32) {
    let cfg = &ctx.soak;
    let (mut done, mut failures, mut attempted) = (0, 0, 0);
    for i in 0..iterations {
        if Instant::now() >= overall_deadline {
            break;
        }
        let start = Instant::now();
        let result = async {
            let channel = if new_channel {
                ctx.channel_builder
                    .clone()
                    .build()
                    .map_err(|e| e.to_string())?
            } else {
                ctx.channel.clone()
            };
            let req = SimpleRequest {
                response_size: cfg.response_size as i32,
                payload: zeros(cfg.request_size),
                ..Default::default()
            };
            let r = TestServiceClient::new(channel)
                .unary_call(ctx.request(req))
                .await
                .map_err(|s| s.to_string())?;
            ensure!(
                body_len(&r.message().payload) == cfg.response_size,
                "wrong response size"
            );
            Ok(())
        }
        .await;
        let elapsed = start.elapsed();
        attempted += 1;
        let ms = elapsed.as_millis();
        match result {
            Ok(()) if elapsed <= cfg.max_latency => {
                done += 1;
                out_line(format_args!(
                    "soak iteration: {i} thread: {thread} elapsed_ms: {ms} peer: {} succeeded",
                    ctx.target
                ));
            }
            Ok(()) => {
                failures += 1;
                out_line(format_args!("soak iteration: {i} thread: {thread} elapsed_ms: {ms} peer: {} failed: slower than the latency limit", ctx.target));
            }
            Err(e) => {
                failures += 1;
                out_line(format_args!(
                    "soak iteration: {i} thread: {thread} elapsed_ms: {ms} peer: {} failed: {e}",
                    ctx.target
                ));
            }
        }
        let wait = cfg.min_time_between.saturating_sub(start.elapsed());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
    (done, failures, attempted)
}
