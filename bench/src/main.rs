//! `grpc-bench --port PORT [--quick]`: the same scenarios through three clients against one interop server
//! (which `cargo xtask bench` runs in its own process): grpc-channel, tonic, and a raw h2 client that does the
//! least gRPC needs (the floor). Each client gets the same HTTP/2 windows and TCP_NODELAY. Results are
//! printed side by side with ratios; they are measurements, never assertions.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use grpc_channel::framing::{self, Deframer};
use grpc_channel::{Channel, Request};
use hdrhistogram::Histogram;
use interop_proto::{
    paths, Payload, ResponseParameters, SimpleRequest, SimpleResponse, StreamingOutputCallRequest,
};
use prost::Message;

mod measure;

const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;

#[derive(Clone)]
enum Client {
    Ours(Channel),
    Tonic(tonic::client::Grpc<tonic::transport::Channel>),
    Raw(h2::client::SendRequest<Bytes>, http::uri::Authority),
}

impl Client {
    fn name(&self) -> &'static str {
        match self {
            Client::Ours(_) => "grpc-channel",
            Client::Tonic(_) => "tonic",
            Client::Raw(..) => "raw h2",
        }
    }

    async fn unary(&mut self, req: &SimpleRequest) -> Result<SimpleResponse, String> {
        match self {
            Client::Ours(ch) => ch
                .unary::<_, SimpleResponse>(paths::UNARY_CALL, Request::new(req.clone()))
                .await
                .map(|r| r.into_message())
                .map_err(|s| s.to_string()),
            Client::Tonic(grpc) => {
                grpc.ready().await.map_err(|e| e.to_string())?;
                let codec = tonic_prost::ProstCodec::<SimpleRequest, SimpleResponse>::default();
                let path = http::uri::PathAndQuery::from_static(paths::UNARY_CALL);
                grpc.unary(tonic::Request::new(req.clone()), path, codec)
                    .await
                    .map(|r| r.into_inner())
                    .map_err(|s| s.to_string())
            }
            Client::Raw(send, authority) => {
                let body = raw_call(send, authority, paths::UNARY_CALL, req).await?;
                let mut frames = body.into_iter();
                let first = frames.next().ok_or("no response message")?;
                SimpleResponse::decode(first).map_err(|e| e.to_string())
            }
        }
    }

    /// A server-streaming call; returns the number of messages received.
    async fn stream(&mut self, req: &StreamingOutputCallRequest) -> Result<usize, String> {
        match self {
            Client::Ours(ch) => {
                let r = ch
                    .server_streaming::<_, interop_proto::StreamingOutputCallResponse>(
                        paths::STREAMING_OUTPUT_CALL,
                        Request::new(req.clone()),
                    )
                    .await
                    .map_err(|s| s.to_string())?;
                let mut s = r.into_message();
                let mut n = 0;
                while s.message().await.map_err(|e| e.to_string())?.is_some() {
                    n += 1;
                }
                Ok(n)
            }
            Client::Tonic(grpc) => {
                grpc.ready().await.map_err(|e| e.to_string())?;
                let codec = tonic_prost::ProstCodec::<
                    StreamingOutputCallRequest,
                    interop_proto::StreamingOutputCallResponse,
                >::default();
                let path = http::uri::PathAndQuery::from_static(paths::STREAMING_OUTPUT_CALL);
                let mut s = grpc
                    .server_streaming(tonic::Request::new(req.clone()), path, codec)
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner();
                let mut n = 0;
                while s.message().await.map_err(|e| e.to_string())?.is_some() {
                    n += 1;
                }
                Ok(n)
            }
            Client::Raw(send, authority) => {
                let frames = raw_call(send, authority, paths::STREAMING_OUTPUT_CALL, req).await?;
                for f in &frames {
                    interop_proto::StreamingOutputCallResponse::decode(f.clone())
                        .map_err(|e| e.to_string())?;
                }
                Ok(frames.len())
            }
        }
    }
}

/// The least a gRPC call needs on h2: headers, one framed message, then read frames and trailers.
async fn raw_call(
    send: &mut h2::client::SendRequest<Bytes>,
    authority: &http::uri::Authority,
    path: &'static str,
    msg: &impl Message,
) -> Result<Vec<Bytes>, String> {
    let mut ready = send.clone().ready().await.map_err(|e| e.to_string())?;
    let uri = http::Uri::builder()
        .scheme("http")
        .authority(authority.clone())
        .path_and_query(path)
        .build()
        .map_err(|e| e.to_string())?;
    let request = http::Request::post(uri)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .map_err(|e| e.to_string())?;
    let (response, mut stream) = ready
        .send_request(request, false)
        .map_err(|e| e.to_string())?;
    let len = msg.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    framing::put_header(&mut buf, false, len as u32);
    msg.encode(&mut buf).map_err(|e| e.to_string())?;
    stream
        .send_data(buf.freeze(), true)
        .map_err(|e| e.to_string())?;
    let mut body = response.await.map_err(|e| e.to_string())?.into_body();
    let mut deframer = Deframer::new(usize::MAX >> 1);
    let mut out = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        let _ = body.flow_control().release_capacity(chunk.len());
        deframer.push(chunk);
        while let Some(frame) = deframer.next_frame().map_err(|e| e.to_string())? {
            out.push(frame.payload);
        }
    }
    let trailers = body.trailers().await.map_err(|e| e.to_string())?;
    match trailers
        .as_ref()
        .and_then(|t| t.get("grpc-status"))
        .map(|v| v.as_bytes())
    {
        Some(b"0") => Ok(out),
        other => Err(format!("grpc-status {other:?}")),
    }
}

async fn connect(kind: &str, port: u16) -> Result<Client, String> {
    let target = format!("127.0.0.1:{port}");
    match kind {
        "ours" => Ok(Client::Ours(
            Channel::new(target).map_err(|e| e.to_string())?,
        )),
        "tonic" => {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{target}"))
                .map_err(|e| e.to_string())?
                .tcp_nodelay(true)
                .initial_stream_window_size(STREAM_WINDOW)
                .initial_connection_window_size(CONNECTION_WINDOW)
                .connect()
                .await
                .map_err(|e| e.to_string())?;
            Ok(Client::Tonic(tonic::client::Grpc::new(channel)))
        }
        _ => {
            let tcp = tokio::net::TcpStream::connect(&target)
                .await
                .map_err(|e| e.to_string())?;
            tcp.set_nodelay(true).map_err(|e| e.to_string())?;
            let (send, conn) = h2::client::Builder::new()
                .initial_window_size(STREAM_WINDOW)
                .initial_connection_window_size(CONNECTION_WINDOW)
                .data_frame_budget(8 << 20)
                .handshake::<_, Bytes>(tcp)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            let authority =
                http::uri::Authority::try_from(target.as_str()).map_err(|e| e.to_string())?;
            Ok(Client::Raw(send, authority))
        }
    }
}

fn small_request(size: usize) -> SimpleRequest {
    SimpleRequest {
        response_size: size as i32,
        payload: Some(Payload {
            r#type: 0,
            body: Bytes::from(vec![0u8; size]),
        }),
        ..Default::default()
    }
}

struct Result3 {
    unit: &'static str,
    higher_is_better: bool,
    values: Vec<f64>,
}

async fn sequential_unary(
    client: &mut Client,
    n: usize,
    size: usize,
) -> Result<(f64, Histogram<u64>), String> {
    let req = small_request(size);
    for _ in 0..n / 10 {
        client.unary(&req).await?;
    }
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        client.unary(&req).await?;
        let _ = hist.record(t.elapsed().as_micros() as u64);
    }
    Ok((n as f64 / start.elapsed().as_secs_f64(), hist))
}

async fn concurrent_unary(client: &Client, tasks: usize, per_task: usize) -> Result<f64, String> {
    let req = Arc::new(small_request(16));
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let mut c = client.clone();
        let req = req.clone();
        handles.push(tokio::spawn(async move {
            for _ in 0..per_task {
                c.unary(&req).await?;
            }
            Ok::<_, String>(())
        }));
    }
    for h in handles {
        h.await.map_err(|e| e.to_string())??;
    }
    Ok((tasks * per_task) as f64 / start.elapsed().as_secs_f64())
}

async fn run(port: u16, quick: bool) -> Result<(), String> {
    let scale = if quick { 1 } else { 5 };
    let kinds = ["ours", "tonic", "raw"];
    let mut clients = Vec::new();
    for k in kinds {
        clients.push(connect(k, port).await?);
    }
    let names: Vec<&str> = clients.iter().map(Client::name).collect();
    let mut rows: Vec<(String, Result3)> = Vec::new();

    let mut seq = Result3 {
        unit: "calls/s",
        higher_is_better: true,
        values: vec![],
    };
    let mut p50 = Result3 {
        unit: "µs",
        higher_is_better: false,
        values: vec![],
    };
    let mut p99 = Result3 {
        unit: "µs",
        higher_is_better: false,
        values: vec![],
    };
    for c in &mut clients {
        let (rate, hist) = sequential_unary(c, 2000 * scale, 16).await?;
        seq.values.push(rate);
        p50.values.push(hist.value_at_quantile(0.5) as f64);
        p99.values.push(hist.value_at_quantile(0.99) as f64);
    }
    rows.push(("unary 16 B, sequential".into(), seq));
    rows.push(("  latency p50".into(), p50));
    rows.push(("  latency p99".into(), p99));

    let mut conc = Result3 {
        unit: "calls/s",
        higher_is_better: true,
        values: vec![],
    };
    for c in &clients {
        conc.values
            .push(concurrent_unary(c, 64, 100 * scale).await?);
    }
    rows.push(("unary 16 B, 64 concurrent".into(), conc));

    let mut big = Result3 {
        unit: "MiB/s",
        higher_is_better: true,
        values: vec![],
    };
    for c in &mut clients {
        let (rate, _) = sequential_unary(c, 40 * scale, 1 << 20).await?;
        big.values.push(rate * 2.0);
    }
    rows.push(("unary 1 MiB each way".into(), big));

    let mut stream = Result3 {
        unit: "msgs/s",
        higher_is_better: true,
        values: vec![],
    };
    let req = StreamingOutputCallRequest {
        response_parameters: vec![
            ResponseParameters {
                size: 64,
                ..Default::default()
            };
            10_000
        ],
        ..Default::default()
    };
    for c in &mut clients {
        c.stream(&req).await?;
        let start = Instant::now();
        let mut n = 0;
        for _ in 0..scale {
            n += c.stream(&req).await?;
        }
        stream.values.push(n as f64 / start.elapsed().as_secs_f64());
    }
    rows.push(("server stream 10,000 × 64 B".into(), stream));

    println!();
    println!(
        "{:<30} {:>14} {:>14} {:>14}   {:>12} {:>12}",
        "scenario", names[0], names[1], names[2], "ours/tonic", "ours/raw h2"
    );
    println!("{}", "-".repeat(104));
    for (name, r) in rows {
        let ratio = |other: f64| {
            let x = r.values[0] / other;
            if r.higher_is_better {
                x
            } else {
                1.0 / x
            }
        };
        println!(
            "{:<30} {:>9.0} {:<4} {:>9.0} {:<4} {:>9.0} {:<4}   {:>11.2}x {:>11.2}x",
            name,
            r.values[0],
            r.unit,
            r.values[1],
            r.unit,
            r.values[2],
            r.unit,
            ratio(r.values[1]),
            ratio(r.values[2]),
        );
    }
    println!("\nratios: above 1.00x means grpc-channel is better (faster, or lower latency).");
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let port: Option<u16> = args
        .iter()
        .enumerate()
        .find_map(|(i, a)| match a.strip_prefix("--port=") {
            Some(p) => Some(p.to_owned()),
            None if a == "--port" => args.get(i + 1).cloned(),
            None => None,
        })
        .and_then(|p| p.parse().ok());
    let Some(port) = port else {
        eprintln!("usage: grpc-bench --port PORT [--quick]");
        eprintln!(
            "       grpc-bench --port PORT --measure SCENARIO --client ours|raw --n N [--current-thread]"
        );
        return ExitCode::from(2);
    };
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let measure = flag("--measure").map(|scenario| measure::Measure {
        scenario,
        client: flag("--client").unwrap_or_else(|| "ours".to_owned()),
        n: flag("--n").and_then(|n| n.parse().ok()).unwrap_or(1000),
    });
    // `--current-thread` (measurements only): one thread, so task interleaving, and with it the instruction
    // count under callgrind, is the same from run to run.
    let mut builder = if measure.is_some() && args.iter().any(|a| a == "--current-thread") {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("grpc-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match measure {
        Some(m) => runtime.block_on(measure::run(port, m)),
        None => runtime.block_on(run(port, quick)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("grpc-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
