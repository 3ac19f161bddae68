//! The three clients the side-by-side scenarios compare ([`Client`]: grpc-channel, tonic, a raw h2 client
//! doing the least gRPC needs), how each connects with the same HTTP/2 windows, and the raw h2 helpers the
//! other scenarios share.

use bytes::{Bytes, BytesMut};
use grpc_channel::framing::{self, Deframer};
use grpc_channel::{Channel, Request};
use interop_proto::{
    paths, Payload, ResponseParameters, SimpleRequest, SimpleResponse, StreamingOutputCallRequest,
};
use prost::Message;

pub(crate) const STREAM_WINDOW: u32 = 1 << 20;
pub(crate) const CONNECTION_WINDOW: u32 = 16 << 20;

#[derive(Clone)]
pub(crate) enum Client {
    Ours(Channel),
    Tonic(tonic::client::Grpc<tonic::transport::Channel>),
    Raw(h2::client::SendRequest<Bytes>, http::uri::Authority),
}

impl Client {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Client::Ours(_) => "grpc-channel",
            Client::Tonic(_) => "tonic",
            Client::Raw(..) => "raw h2",
        }
    }

    pub(crate) async fn unary(&mut self, req: &SimpleRequest) -> Result<SimpleResponse, String> {
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
    pub(crate) async fn stream(
        &mut self,
        req: &StreamingOutputCallRequest,
    ) -> Result<usize, String> {
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

/// A bidi message of 1 KiB each way: 1 KiB of payload, asking for 1 KiB back.
pub(crate) fn bidi_request() -> StreamingOutputCallRequest {
    StreamingOutputCallRequest {
        response_parameters: vec![ResponseParameters {
            size: 1024,
            ..Default::default()
        }],
        payload: Some(Payload {
            r#type: 0,
            body: Bytes::from(vec![0u8; 1024]),
        }),
        ..Default::default()
    }
}

impl Client {
    /// One FullDuplexCall: `n` messages sent while the answers are read; returns how many came back.
    pub(crate) async fn bidi(&mut self, n: usize) -> Result<usize, String> {
        let req = bidi_request();
        match self {
            Client::Ours(ch) => {
                let (mut tx, mut rx) = ch
                    .streaming::<StreamingOutputCallRequest, interop_proto::StreamingOutputCallResponse>(
                        paths::FULL_DUPLEX_CALL,
                        Request::new(()),
                    )
                    .await
                    .map_err(|s| s.to_string())?;
                let sender = tokio::spawn(async move {
                    for _ in 0..n {
                        tx.send(req.clone()).await?;
                    }
                    tx.finish().await
                });
                let mut got = 0;
                while rx.message().await.map_err(|e| e.to_string())?.is_some() {
                    got += 1;
                }
                sender
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|s| s.to_string())?;
                Ok(got)
            }
            Client::Tonic(grpc) => {
                let outbound = tokio_stream::iter(std::iter::repeat_n(req, n));
                let mut s = tonic_full_duplex(grpc, outbound).await?;
                let mut got = 0;
                while s.message().await.map_err(|e| e.to_string())?.is_some() {
                    got += 1;
                }
                Ok(got)
            }
            Client::Raw(send, authority) => {
                let (response, mut stream) =
                    open_raw(send, authority, paths::FULL_DUPLEX_CALL).await?;
                // Every message is ready at once: packed 16 KiB to a DATA frame, as tonic does.
                let sender = tokio::spawn(async move {
                    let len = req.encoded_len();
                    let mut buf = BytesMut::new();
                    for i in 0..n {
                        framing::put_header(&mut buf, false, len as u32);
                        req.encode(&mut buf).map_err(|e| e.to_string())?;
                        if buf.len() >= 16 << 10 || i + 1 == n {
                            raw_send(&mut stream, buf.split().freeze(), i + 1 == n).await?;
                        }
                    }
                    Ok::<_, String>(())
                });
                let mut got = 0;
                // The echoes' count is the check; the trailers are not read.
                let _ = raw_messages(response, |m| {
                    interop_proto::StreamingOutputCallResponse::decode(m)
                        .map_err(|e| e.to_string())?;
                    got += 1;
                    Ok(())
                })
                .await?;
                sender.await.map_err(|e| e.to_string())??;
                Ok(got)
            }
        }
    }
}

/// A tonic FullDuplexCall with `outbound` as its request stream: the response stream.
pub(crate) async fn tonic_full_duplex(
    grpc: &mut tonic::client::Grpc<tonic::transport::Channel>,
    outbound: impl tokio_stream::Stream<Item = StreamingOutputCallRequest> + Send + 'static,
) -> Result<tonic::Streaming<interop_proto::StreamingOutputCallResponse>, String> {
    grpc.ready().await.map_err(|e| e.to_string())?;
    let codec = tonic_prost::ProstCodec::<
        StreamingOutputCallRequest,
        interop_proto::StreamingOutputCallResponse,
    >::default();
    let path = http::uri::PathAndQuery::from_static(paths::FULL_DUPLEX_CALL);
    grpc.streaming(tonic::Request::new(outbound), path, codec)
        .await
        .map(tonic::Response::into_inner)
        .map_err(|e| e.to_string())
}

/// Reads a raw h2 response's messages as they arrive, releasing flow control, and hands each to `each`;
/// returns the body, for its trailers.
pub(crate) async fn raw_messages(
    response: h2::client::ResponseFuture,
    mut each: impl FnMut(Bytes) -> Result<(), String>,
) -> Result<h2::RecvStream, String> {
    let mut body = response.await.map_err(|e| e.to_string())?.into_body();
    let mut deframer = Deframer::new(usize::MAX >> 1);
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        let _ = body.flow_control().release_capacity(chunk.len());
        deframer.push(chunk);
        while let Some(frame) = deframer.next_frame().map_err(|e| e.to_string())? {
            each(frame.payload)?;
        }
    }
    Ok(body)
}

/// Sends `data` on a raw h2 stream as flow control admits (END_STREAM with the last of it if `end`).
pub(crate) async fn raw_send(
    stream: &mut h2::SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> Result<(), String> {
    loop {
        if data.is_empty() {
            return if end {
                stream.send_data(data, true).map_err(|e| e.to_string())
            } else {
                Ok(())
            };
        }
        stream.reserve_capacity(data.len());
        while stream.capacity() == 0 {
            match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err("stream closed".to_owned()),
            }
        }
        let chunk = data.split_to(stream.capacity().min(data.len()));
        let last = end && data.is_empty();
        stream.send_data(chunk, last).map_err(|e| e.to_string())?;
        if last {
            return Ok(());
        }
    }
}

/// Opens a raw h2 gRPC stream: the request HEADERS (`content-type`, `te`) for `path`, nothing sent yet.
pub(crate) async fn open_raw(
    send: &h2::client::SendRequest<Bytes>,
    authority: &http::uri::Authority,
    path: &'static str,
) -> Result<(h2::client::ResponseFuture, h2::SendStream<Bytes>), String> {
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
    ready
        .send_request(request, false)
        .map_err(|e| e.to_string())
}

/// The least a gRPC call needs on h2: headers, one framed message, then read frames and trailers.
pub(crate) async fn raw_call(
    send: &mut h2::client::SendRequest<Bytes>,
    authority: &http::uri::Authority,
    path: &'static str,
    msg: &impl Message,
) -> Result<Vec<Bytes>, String> {
    let (response, mut stream) = open_raw(send, authority, path).await?;
    let len = msg.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    framing::put_header(&mut buf, false, len as u32);
    msg.encode(&mut buf).map_err(|e| e.to_string())?;
    stream
        .send_data(buf.freeze(), true)
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut body = raw_messages(response, |m| {
        out.push(m);
        Ok(())
    })
    .await?;
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

pub(crate) async fn connect(kind: &str, port: u16) -> Result<Client, String> {
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

pub(crate) fn small_request(size: usize) -> SimpleRequest {
    SimpleRequest {
        response_size: size as i32,
        payload: Some(Payload {
            r#type: 0,
            body: Bytes::from(vec![0u8; size]),
        }),
        ..Default::default()
    }
}
