//! Windowed bidi, the way applications stream: one FullDuplexCall per run; a producer task keeps up to
//! `window` messages outstanding (sent, echo not yet read) and feeds them through an mpsc channel to the
//! client's sender (grpc-channel: a task calling `RequestSender::send` for each; tonic: a `ReceiverStream`
//! as the request stream; raw h2: a task packing every ready message into one DATA frame of up to 16 KiB,
//! the best a client on h2 can do), while the caller reads the echoes. Windows 1, 8 and 64; 1 KiB and 64 B
//! messages each way; against the project's interop server and a tonic server (`tonic_server.rs`), each in
//! its own process (`cargo xtask bench` pins the servers to one core and the bench to the others).
//!
//! Per run: messages per second, round trip p50 and p99 (from handing a message to the channel until its
//! echo is read), client CPU per message (the whole process: the client runs alone in it), and write system
//! calls per message (`syscw` of `/proc/self/io`, every thread of the process).

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use grpc_channel::framing;
use grpc_channel::Request;
use hdrhistogram::Histogram;
use interop_proto::{
    paths, Payload, ResponseParameters, StreamingOutputCallRequest, StreamingOutputCallResponse,
};
use prost::Message;
use tokio::sync::{mpsc, Semaphore};

use crate::clients::Client;
use crate::report::{Line, Table};
use crate::sys;

/// The most bytes the raw h2 client packs into one `send_data` (one DATA frame at the default maximum
/// frame size), like grpc-channel.
const RAW_BATCH: usize = 16 << 10;

/// What one run measured.
pub(crate) struct Sample {
    rate: f64,
    p50: f64,
    p99: f64,
    cpu_per_message: f64,
    writes_per_message: f64,
}

fn request(size: usize) -> StreamingOutputCallRequest {
    StreamingOutputCallRequest {
        response_parameters: vec![ResponseParameters {
            size: size as i32,
            ..Default::default()
        }],
        payload: Some(Payload {
            r#type: 0,
            body: vec![0u8; size].into(),
        }),
        ..Default::default()
    }
}

/// The scenario against each peer server: `(name, port)`.
pub(crate) async fn windowed(peers: &[(&str, u16)], quick: bool) -> Result<Table, String> {
    let reps = if quick { 1 } else { 3 };
    let mut table = Table::new(
        "Windowed bidi: one call, a producer keeping `window` messages outstanding through an mpsc channel \
         (servers in their own processes, pinned to another core than the client)",
        &["grpc-channel", "tonic", "raw h2 (packing)"],
    );
    for &(peer, port) in peers {
        let mut clients = Vec::new();
        for k in ["ours", "tonic", "raw"] {
            clients.push(crate::clients::connect(k, port).await?);
        }
        for size in [1024, 64] {
            for window in [1, 8, 64] {
                // Runs of about half a second or more (connection start-up effects fade).
                let n = match (window, quick) {
                    (1, true) => 2_000,
                    (1, false) => 5_000,
                    (8, true) => 10_000,
                    (8, false) => 40_000,
                    (_, true) => 30_000,
                    (_, false) => 100_000,
                };
                let what = format!("{size} B, window {window}, {peer} server");
                let mut lines = [
                    Line::new(format!("bidi {what}: msgs/s"), "/s", true),
                    Line::new("  round trip p50", "µs", false),
                    Line::new("  round trip p99", "µs", false),
                    Line::new("  client CPU per message", "µs", false),
                    Line::new("  write syscalls per message", "", false),
                ];
                for _ in 0..reps {
                    for (i, c) in clients.iter_mut().enumerate() {
                        // Warm-up, then the measured run.
                        c.windowed(window, size, n / 10).await?;
                        let s = c.windowed(window, size, n).await?;
                        for (line, v) in lines.iter_mut().zip([
                            s.rate,
                            s.p50,
                            s.p99,
                            s.cpu_per_message,
                            s.writes_per_message,
                        ]) {
                            line.samples[i].push(v);
                        }
                    }
                }
                table.rows.extend(lines.iter().map(Line::row));
            }
        }
    }
    Ok(table)
}

impl Client {
    /// One windowed run of `n` messages of `size` bytes each way.
    pub(crate) async fn windowed(
        &mut self,
        window: usize,
        size: usize,
        n: usize,
    ) -> Result<Sample, String> {
        let req = request(size);
        let permits = Arc::new(Semaphore::new(window));
        let (times_tx, mut times) = mpsc::unbounded_channel::<Instant>();
        let (messages_tx, messages) = mpsc::channel::<StreamingOutputCallRequest>(window);
        let cpu = sys::cpu_time();
        let writes = sys::write_syscalls();
        let start = Instant::now();
        let producer = {
            let permits = permits.clone();
            tokio::spawn(async move {
                for _ in 0..n {
                    let Ok(permit) = permits.acquire().await else {
                        return;
                    };
                    permit.forget();
                    let _ = times_tx.send(Instant::now());
                    if messages_tx.send(req.clone()).await.is_err() {
                        return;
                    }
                }
            })
        };
        let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
        let mut echoed = |hist: &mut Histogram<u64>| {
            if let Ok(sent) = times.try_recv() {
                let _ = hist.record(sent.elapsed().as_micros() as u64);
            }
            permits.add_permits(1);
        };
        let got = match self {
            Client::Ours(ch) => {
                let (mut tx, mut rx) = ch
                    .streaming::<StreamingOutputCallRequest, StreamingOutputCallResponse>(
                        paths::FULL_DUPLEX_CALL,
                        Request::new(()),
                    )
                    .await
                    .map_err(|s| s.to_string())?;
                let sender = tokio::spawn(async move {
                    let mut messages = messages;
                    while let Some(m) = messages.recv().await {
                        tx.send(m).await?;
                    }
                    tx.finish().await
                });
                let mut got = 0;
                while rx.message().await.map_err(|e| e.to_string())?.is_some() {
                    got += 1;
                    echoed(&mut hist);
                }
                sender
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|s| s.to_string())?;
                got
            }
            Client::Tonic(grpc) => {
                let outbound = tokio_stream::wrappers::ReceiverStream::new(messages);
                let mut s = crate::clients::tonic_full_duplex(grpc, outbound).await?;
                let mut got = 0;
                while s.message().await.map_err(|e| e.to_string())?.is_some() {
                    got += 1;
                    echoed(&mut hist);
                }
                got
            }
            Client::Raw(send, authority) => {
                let (response, stream) =
                    crate::clients::open_raw(send, authority, paths::FULL_DUPLEX_CALL).await?;
                let sender = tokio::spawn(raw_packing_sender(messages, stream));
                let mut got = 0;
                // The echoes' count is the check; the trailers are not read.
                let _ = crate::clients::raw_messages(response, |m| {
                    StreamingOutputCallResponse::decode(m).map_err(|e| e.to_string())?;
                    got += 1;
                    echoed(&mut hist);
                    Ok(())
                })
                .await?;
                sender.await.map_err(|e| e.to_string())??;
                got
            }
        };
        let elapsed = start.elapsed().as_secs_f64();
        let cpu = (sys::cpu_time() - cpu).as_secs_f64() * 1e6;
        let writes = sys::write_syscalls().saturating_sub(writes) as f64;
        let _ = producer.await;
        if got != n {
            return Err(format!("windowed bidi: {got} of {n} messages came back"));
        }
        Ok(Sample {
            rate: n as f64 / elapsed,
            p50: hist.value_at_quantile(0.5) as f64,
            p99: hist.value_at_quantile(0.99) as f64,
            cpu_per_message: cpu / n as f64,
            writes_per_message: writes / n as f64,
        })
    }
}

/// The raw h2 client's sender: every message ready in the channel (up to [`RAW_BATCH`] bytes) framed into
/// one buffer and sent as one DATA frame, under flow control; END_STREAM at the end.
async fn raw_packing_sender(
    mut messages: mpsc::Receiver<StreamingOutputCallRequest>,
    mut stream: h2::SendStream<bytes::Bytes>,
) -> Result<(), String> {
    let mut buf = BytesMut::new();
    while let Some(first) = messages.recv().await {
        let mut next = Some(first);
        while let Some(m) = next.take() {
            let len = m.encoded_len();
            framing::put_header(&mut buf, false, len as u32);
            m.encode(&mut buf).map_err(|e| e.to_string())?;
            if buf.len() < RAW_BATCH {
                next = messages.try_recv().ok();
            }
        }
        let batch = buf.split().freeze();
        crate::clients::raw_send(&mut stream, batch, false).await?;
    }
    crate::clients::raw_send(&mut stream, bytes::Bytes::new(), true).await
}
