//! `grpc-bench --port PORT --measure SCENARIO --client ours|raw --n N`: one scenario through one client, for
//! profiling under `valgrind --tool=callgrind` or `--tool=dhat` (the server runs in its own process, so only
//! the client is measured). Run it twice with different `N` and divide the difference in instructions or
//! allocations by the difference in `N`: set-up costs cancel out, what is left is the cost of one message
//! or call. Scenarios:
//! * `bidi-stream`: one FullDuplexCall; a task sends N 1 KiB requests while the caller reads the N 1 KiB
//!   echoes;
//! * `bidi-pingpong`: one FullDuplexCall; N times: send one 1 KiB request, read its echo;
//! * `client-stream`: one StreamingInputCall of N 1 KiB requests, answered once at the end: under 1 MiB the
//!   call never commits before the answer, so every message takes the retry driver's path (buffered for
//!   replay, handed over by the driver task);
//! * `unary`: N sequential 16 B unary calls;
//! * `unary-generated`: the same N calls through grpc-build's generated `TestServiceClient` on the
//!   channel (`--client ours` only): beside `unary`, what the generated client adds; both print their
//!   allocations per call (the process's counting allocator, warm-up excluded);
//! * `in-flight`: the scale scenario's memory figure alone: N unary calls held in flight by a backend that
//!   never answers (its own child process; `--port` is not used), live heap per call printed;
//! * `windowed-W-S`: the windowed bidi scenario (`windowed.rs`) with window W and S-byte messages, N
//!   messages (also with `--client tonic`).
//!
//! Every scenario first runs a short warm-up call (the connection is up and its windows are open). With
//! `--current-thread` the client runs on one thread: its instruction counts repeat exactly from run to run
//! (on the multi-threaded runtime they vary with how the threads interleave under valgrind).

use bytes::{Bytes, BytesMut};
use grpc_channel::framing::{self, Deframer};
use grpc_channel::{Channel, Request};
use interop_proto::test_service_client::TestServiceClient;
use interop_proto::{
    paths, Payload, ResponseParameters, StreamingInputCallRequest, StreamingInputCallResponse,
    StreamingOutputCallRequest, StreamingOutputCallResponse,
};
use prost::Message;

use crate::clients::{connect, small_request, Client};

/// What to measure, from the command line.
pub(crate) struct Measure {
    pub(crate) scenario: String,
    pub(crate) client: String,
    pub(crate) n: usize,
}

fn echo_request(size: usize) -> StreamingOutputCallRequest {
    StreamingOutputCallRequest {
        response_parameters: vec![ResponseParameters {
            size: size as i32,
            ..Default::default()
        }],
        payload: Some(Payload {
            r#type: 0,
            body: Bytes::from(vec![0u8; size]),
        }),
        ..Default::default()
    }
}

pub(crate) async fn run(port: u16, m: Measure) -> Result<(), String> {
    let kind = match m.client.as_str() {
        "ours" | "raw" | "tonic" => m.client.as_str(),
        other => {
            return Err(format!(
                "--client must be ours, raw or tonic, not {other:?}"
            ))
        }
    };
    if m.scenario == "in-flight" {
        let per_call = match kind {
            "ours" => crate::a6::in_flight_memory(m.n).await?,
            "raw" => crate::a6::raw_in_flight_memory(m.n).await?,
            _ => return Err("in-flight measures ours or raw".into()),
        };
        println!(
            "in-flight {kind} n={}: {per_call:.0} B ({:.2} KiB) per idle in-flight call",
            m.n,
            per_call / 1024.0
        );
        return Ok(());
    }
    let mut client = connect(kind, port).await?;
    match m.scenario.as_str() {
        "unary" => {
            let req = small_request(16);
            for _ in 0..20 {
                client.unary(&req).await?;
            }
            let allocations = crate::sys::allocations();
            for _ in 0..m.n {
                client.unary(&req).await?;
            }
            print_allocations(allocations, m.n);
        }
        "unary-generated" => {
            let Client::Ours(channel) = &client else {
                return Err("unary-generated measures --client ours".into());
            };
            let mut generated = TestServiceClient::new(channel.clone());
            let req = small_request(16);
            for _ in 0..20 {
                generated
                    .unary_call(req.clone())
                    .await
                    .map_err(|s| s.to_string())?;
            }
            let allocations = crate::sys::allocations();
            for _ in 0..m.n {
                generated
                    .unary_call(req.clone())
                    .await
                    .map_err(|s| s.to_string())?;
            }
            print_allocations(allocations, m.n);
        }
        "client-stream" => {
            client_stream(&client, 20).await?;
            client_stream(&client, m.n).await?;
        }
        "bidi-stream" | "bidi-pingpong" => {
            let pingpong = m.scenario == "bidi-pingpong";
            bidi(&client, 20, pingpong).await?;
            bidi(&client, m.n, pingpong).await?;
        }
        other => {
            let parsed = other.strip_prefix("windowed-").and_then(|ws| {
                let (w, s) = ws.split_once('-')?;
                Some((w.parse::<usize>().ok()?, s.parse::<usize>().ok()?))
            });
            let Some((window, size)) = parsed else {
                return Err(format!("unknown scenario {other:?}"));
            };
            client.windowed(window, size, 1000).await?;
            client.windowed(window, size, m.n).await?;
        }
    }
    println!("{} {} n={}: done", m.scenario, client.name(), m.n);
    Ok(())
}

/// Prints the allocations per call since `before` (the request clones included).
fn print_allocations(before: u64, n: usize) {
    let per_call = (crate::sys::allocations() - before) as f64 / n.max(1) as f64;
    println!("allocations per call: {per_call:.2}");
}

/// One StreamingInputCall of `n` 1 KiB messages.
async fn client_stream(client: &Client, n: usize) -> Result<(), String> {
    let req = StreamingInputCallRequest {
        payload: Some(Payload {
            r#type: 0,
            body: Bytes::from(vec![0u8; 1024]),
        }),
        ..Default::default()
    };
    let got = match client {
        Client::Ours(ch) => {
            let (mut tx, mut rx) = ch
                .streaming::<StreamingInputCallRequest, StreamingInputCallResponse>(
                    paths::STREAMING_INPUT_CALL,
                    Request::new(()),
                )
                .await
                .map_err(|s| s.to_string())?;
            for _ in 0..n {
                tx.send(req.clone()).await.map_err(|s| s.to_string())?;
            }
            tx.finish().await.map_err(|s| s.to_string())?;
            rx.message()
                .await
                .map_err(|s| s.to_string())?
                .ok_or("no response")?
        }
        Client::Raw(send, authority) => {
            let (response, mut stream) =
                crate::clients::open_raw(send, authority, paths::STREAMING_INPUT_CALL).await?;
            for _ in 0..n {
                send_one(&mut stream, &req).await?;
            }
            stream
                .send_data(Bytes::new(), true)
                .map_err(|e| e.to_string())?;
            let mut body = response.await.map_err(|e| e.to_string())?.into_body();
            let mut deframer = Deframer::new(usize::MAX >> 1);
            let mut got = None;
            while let Some(chunk) = body.data().await {
                let chunk = chunk.map_err(|e| e.to_string())?;
                let _ = body.flow_control().release_capacity(chunk.len());
                deframer.push(chunk);
                if let Some(frame) = deframer.next_frame().map_err(|e| e.to_string())? {
                    got = Some(
                        StreamingInputCallResponse::decode(frame.payload)
                            .map_err(|e| e.to_string())?,
                    );
                }
            }
            got.ok_or("no response")?
        }
        Client::Tonic(_) => return Err("tonic is not measured here".into()),
    };
    if got.aggregated_payload_size as usize != 1024 * n {
        return Err(format!("the server counted {got:?}"));
    }
    Ok(())
}

/// Hands one framed message to h2 once the stream has some send capacity (hyper's way: reserve one byte,
/// let h2 buffer the rest).
async fn send_one<M: Message>(stream: &mut h2::SendStream<Bytes>, msg: &M) -> Result<(), String> {
    let len = msg.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    framing::put_header(&mut buf, false, len as u32);
    msg.encode(&mut buf).map_err(|e| e.to_string())?;
    stream.reserve_capacity(1);
    while stream.capacity() == 0 {
        match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("stream closed".into()),
        }
    }
    stream
        .send_data(buf.freeze(), false)
        .map_err(|e| e.to_string())
}

/// One FullDuplexCall of `n` 1 KiB echoes.
async fn bidi(client: &Client, n: usize, pingpong: bool) -> Result<(), String> {
    let req = echo_request(1024);
    match client {
        Client::Ours(ch) => bidi_ours(ch, &req, n, pingpong).await,
        Client::Raw(send, authority) => bidi_raw(send, authority, &req, n, pingpong).await,
        Client::Tonic(_) => Err("tonic is not measured here".into()),
    }
}

async fn bidi_ours(
    ch: &Channel,
    req: &StreamingOutputCallRequest,
    n: usize,
    pingpong: bool,
) -> Result<(), String> {
    let (mut tx, mut rx) = ch
        .streaming::<StreamingOutputCallRequest, StreamingOutputCallResponse>(
            paths::FULL_DUPLEX_CALL,
            Request::new(()),
        )
        .await
        .map_err(|s| s.to_string())?;
    async fn recv_one(
        rx: &mut grpc_channel::Streaming<StreamingOutputCallResponse>,
    ) -> Result<(), String> {
        match rx.message().await.map_err(|s| s.to_string())? {
            Some(_) => Ok(()),
            None => Err("the call ended early".into()),
        }
    }
    if pingpong {
        for _ in 0..n {
            tx.send(req.clone()).await.map_err(|s| s.to_string())?;
            recv_one(&mut rx).await?;
        }
        tx.finish().await.map_err(|s| s.to_string())?;
    } else {
        let req = req.clone();
        let sender = tokio::spawn(async move {
            for _ in 0..n {
                tx.send(req.clone()).await.map_err(|s| s.to_string())?;
            }
            tx.finish().await.map_err(|s| s.to_string())
        });
        for _ in 0..n {
            recv_one(&mut rx).await?;
        }
        sender.await.map_err(|e| e.to_string())??;
    }
    match rx.message().await.map_err(|s| s.to_string())? {
        None => Ok(()),
        Some(_) => Err("an echo too many".into()),
    }
}

/// The least a bidi gRPC call needs on h2: the request HEADERS, then each framed message handed to h2 once
/// the stream has some send capacity ([`send_one`]), and the responses read and deframed as they come.
async fn bidi_raw(
    send: &h2::client::SendRequest<Bytes>,
    authority: &http::uri::Authority,
    req: &StreamingOutputCallRequest,
    n: usize,
    pingpong: bool,
) -> Result<(), String> {
    let (response, mut stream) =
        crate::clients::open_raw(send, authority, paths::FULL_DUPLEX_CALL).await?;
    struct Reader {
        body: Option<h2::RecvStream>,
        response: Option<h2::client::ResponseFuture>,
        deframer: Deframer,
    }
    impl Reader {
        async fn next(&mut self) -> Result<(), String> {
            loop {
                if let Some(frame) = self.deframer.next_frame().map_err(|e| e.to_string())? {
                    StreamingOutputCallResponse::decode(frame.payload)
                        .map_err(|e| e.to_string())?;
                    return Ok(());
                }
                if let Some(response) = self.response.take() {
                    self.body = Some(response.await.map_err(|e| e.to_string())?.into_body());
                }
                let body = self.body.as_mut().ok_or("no body")?;
                let chunk = body
                    .data()
                    .await
                    .ok_or("the call ended early")?
                    .map_err(|e| e.to_string())?;
                let _ = body.flow_control().release_capacity(chunk.len());
                self.deframer.push(chunk);
            }
        }
    }
    let mut reader = Reader {
        body: None,
        response: Some(response),
        deframer: Deframer::new(usize::MAX >> 1),
    };
    if pingpong {
        for _ in 0..n {
            send_one(&mut stream, req).await?;
            reader.next().await?;
        }
        stream
            .send_data(Bytes::new(), true)
            .map_err(|e| e.to_string())?;
    } else {
        let req = req.clone();
        let sender = tokio::spawn(async move {
            for _ in 0..n {
                send_one(&mut stream, &req).await?;
            }
            stream
                .send_data(Bytes::new(), true)
                .map_err(|e| e.to_string())
        });
        for _ in 0..n {
            reader.next().await?;
        }
        sender.await.map_err(|e| e.to_string())??;
    }
    // Read to the trailers, so the call ends cleanly.
    let body = reader.body.as_mut().ok_or("no body")?;
    while let Some(chunk) = body.data().await {
        chunk.map_err(|e| e.to_string())?;
    }
    body.trailers().await.map_err(|e| e.to_string())?;
    Ok(())
}
