//! The server side of one gRPC call on h2: reading request messages, writing response headers, messages and
//! trailers (or Trailers-Only), with per-message compression. Shared by the interop server and the
//! fault-injecting server.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use grpc_channel::framing::{self, Deframer, HEADER_LEN};
use grpc_channel::{Code, Encoding, Status};
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, HeaderValue};
use prost::Message;

/// The receive limit of the test servers (gRPC servers' usual default).
pub const MAX_RECEIVE: usize = 4 << 20;

/// One call as the server sees it.
pub struct ServerCall {
    /// The request's `:path`.
    pub path: String,
    /// The request's `:authority`.
    pub authority: String,
    /// The request headers.
    pub request_headers: HeaderMap,
    /// The client's address.
    pub peer: SocketAddr,
    recv: RecvStream,
    deframer: Deframer,
    request_encoding: Option<Encoding>,
    request_encoding_name: Option<String>,
    respond: SendResponse<Bytes>,
    send: Option<SendStream<Bytes>>,
    client_accepts_gzip: bool,
    /// Metadata to send in the response headers.
    pub initial_metadata: HeaderMap,
    /// Metadata to send in the trailers.
    pub trailing_metadata: HeaderMap,
    ended: bool,
    /// Response messages queued by [`ServerCall::queue_message`], not yet handed to h2.
    pending: BytesMut,
}

/// The most bytes of queued response messages [`ServerCall::queue_message`] holds before writing them: one
/// DATA frame at the default maximum frame size.
const BATCH: usize = 16 << 10;

/// A received request message.
pub struct Received {
    /// The message bytes, decompressed.
    pub payload: Bytes,
    /// Whether the message's compressed flag was set.
    pub compressed: bool,
}

impl ServerCall {
    /// Wraps an accepted stream.
    pub fn new(
        request: http::Request<RecvStream>,
        respond: SendResponse<Bytes>,
        peer: SocketAddr,
    ) -> ServerCall {
        let (parts, recv) = request.into_parts();
        let encoding_name = parts
            .headers
            .get("grpc-encoding")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let request_encoding = match encoding_name.as_deref() {
            Some("gzip") => Some(Encoding::Gzip),
            _ => None,
        };
        let client_accepts_gzip = parts
            .headers
            .get_all("grpc-accept-encoding")
            .iter()
            .any(|v| {
                v.as_bytes()
                    .split(|b| *b == b',')
                    .any(|e| e.trim_ascii() == b"gzip")
            });
        ServerCall {
            path: parts.uri.path().to_owned(),
            authority: parts
                .uri
                .authority()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            request_headers: parts.headers,
            peer,
            recv,
            deframer: Deframer::new(MAX_RECEIVE),
            request_encoding,
            request_encoding_name: encoding_name,
            respond,
            send: None,
            client_accepts_gzip,
            initial_metadata: HeaderMap::new(),
            trailing_metadata: HeaderMap::new(),
            ended: false,
            pending: BytesMut::new(),
        }
    }

    /// Whether the request's `grpc-encoding` is one this server cannot decode.
    pub fn unsupported_request_encoding(&self) -> Option<&str> {
        match self.request_encoding_name.as_deref() {
            None | Some("identity") | Some("gzip") => None,
            Some(other) => Some(other),
        }
    }

    /// Whether the client listed gzip in `grpc-accept-encoding`.
    pub fn client_accepts_gzip(&self) -> bool {
        self.client_accepts_gzip
    }

    /// The next request message, or `None` after the client half-closed.
    pub async fn next_message(&mut self) -> Result<Option<Received>, Status> {
        loop {
            match self.deframer.next_frame() {
                Ok(Some(frame)) => {
                    let payload = if frame.compressed {
                        match self.request_encoding {
                            Some(enc) => enc.decompress(frame.payload, MAX_RECEIVE)?,
                            None => {
                                return Err(Status::new(
                                    Code::Internal,
                                    "compressed message without a grpc-encoding",
                                ))
                            }
                        }
                    } else {
                        frame.payload
                    };
                    return Ok(Some(Received {
                        payload,
                        compressed: frame.compressed,
                    }));
                }
                Ok(None) => {}
                Err(e) => {
                    let code = match e {
                        framing::FrameError::TooLarge { .. } => Code::ResourceExhausted,
                        _ => Code::Internal,
                    };
                    return Err(Status::new(code, e.to_string()));
                }
            }
            let next = match self.ready_chunk() {
                Some(next) => next,
                None => {
                    // Nothing more to read now: what was queued goes out before waiting.
                    self.flush().await?;
                    self.recv.data().await
                }
            };
            match next {
                Some(Ok(chunk)) => {
                    let _ = self.recv.flow_control().release_capacity(chunk.len());
                    self.deframer.push(chunk);
                }
                Some(Err(e)) => {
                    return Err(Status::new(
                        Code::Cancelled,
                        format!("request stream failed: {e}"),
                    ))
                }
                None => {
                    self.deframer
                        .finish()
                        .map_err(|e| Status::new(Code::Internal, e.to_string()))?;
                    return Ok(None);
                }
            }
        }
    }

    /// The next request DATA if it has arrived already, without waiting (`None` also when nothing is
    /// queued to send, so the caller simply waits).
    fn ready_chunk(&mut self) -> Option<Option<Result<Bytes, h2::Error>>> {
        if self.pending.is_empty() {
            return None;
        }
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match self.recv.poll_data(&mut cx) {
            Poll::Ready(next) => Some(next),
            Poll::Pending => None,
        }
    }

    /// Queues one response message for the next write: messages queued together leave in one DATA frame
    /// (as a server that answers a batch of requests does). They are written once 16 KiB are
    /// queued, before [`ServerCall::next_message`] waits for the client, and by [`ServerCall::flush`].
    pub async fn queue_message(&mut self, payload: &[u8], compress: bool) -> Result<(), Status> {
        let frame = self.encode(payload, compress)?;
        self.pending.extend_from_slice(&frame);
        if self.pending.len() >= BATCH {
            self.flush().await?;
        }
        Ok(())
    }

    /// Writes the queued response messages.
    pub async fn flush(&mut self) -> Result<(), Status> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let data = self.pending.split().freeze();
        self.send_raw(data).await
    }

    /// Sends the response headers if they have not gone yet.
    pub fn send_headers(&mut self) -> Result<(), Status> {
        if self.send.is_some() {
            return Ok(());
        }
        let mut response = http::Response::new(());
        let h = response.headers_mut();
        h.insert("content-type", HeaderValue::from_static("application/grpc"));
        if self.client_accepts_gzip {
            h.insert("grpc-encoding", HeaderValue::from_static("gzip"));
        }
        h.insert("grpc-accept-encoding", HeaderValue::from_static("gzip"));
        for (k, v) in &self.initial_metadata {
            h.append(k.clone(), v.clone());
        }
        let send = self
            .respond
            .send_response(response, false)
            .map_err(|e| Status::new(Code::Unavailable, format!("send headers: {e}")))?;
        self.send = Some(send);
        Ok(())
    }

    /// Sends one response message; `compress` applies gzip when the client accepts it.
    pub async fn send_message(&mut self, payload: &[u8], compress: bool) -> Result<(), Status> {
        self.flush().await?;
        let frame = self.encode(payload, compress)?;
        self.send_raw(frame).await
    }

    /// One response message, framed.
    fn encode(&mut self, payload: &[u8], compress: bool) -> Result<Bytes, Status> {
        self.send_headers()?;
        let compress = compress && self.client_accepts_gzip;
        let mut buf = BytesMut::with_capacity(HEADER_LEN + payload.len());
        buf.extend_from_slice(&[0; HEADER_LEN]);
        if compress {
            Encoding::Gzip.compress(payload, &mut buf)?;
        } else {
            buf.extend_from_slice(payload);
        }
        let len = u32::try_from(buf.len() - HEADER_LEN)
            .map_err(|_| Status::new(Code::Internal, "too large"))?;
        let mut header = BytesMut::new();
        framing::put_header(&mut header, compress, len);
        buf[..HEADER_LEN].copy_from_slice(&header);
        Ok(buf.freeze())
    }

    /// Sends bytes as DATA (after the response headers), waiting for flow control.
    pub async fn send_raw(&mut self, mut data: Bytes) -> Result<(), Status> {
        self.send_headers()?;
        let Some(send) = self.send.as_mut() else {
            return Err(Status::new(Code::Internal, "no send stream"));
        };
        poll_fn(|cx| loop {
            if data.is_empty() {
                return Poll::Ready(Ok(()));
            }
            let capacity = send.capacity();
            if capacity == 0 {
                send.reserve_capacity(data.len());
                match send.poll_capacity(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Ok(_))) => continue,
                    Poll::Ready(Some(Err(e))) => {
                        return Poll::Ready(Err(Status::new(Code::Cancelled, format!("send: {e}"))))
                    }
                    Poll::Ready(None) => {
                        return Poll::Ready(Err(Status::new(Code::Cancelled, "stream closed")))
                    }
                }
            }
            let chunk = data.split_to(capacity.min(data.len()));
            if let Err(e) = send.send_data(chunk, false) {
                return Poll::Ready(Err(Status::new(Code::Cancelled, format!("send: {e}"))));
            }
        })
        .await
    }

    /// Ends the call with `status`: trailers after a response, or Trailers-Only before one.
    pub fn finish(&mut self, status: &Status) {
        if self.ended {
            return;
        }
        self.ended = true;
        let mut trailers = status.to_headers();
        for (k, v) in &self.trailing_metadata {
            trailers.append(k.clone(), v.clone());
        }
        match self.send.as_mut() {
            Some(send) => {
                let _ = send.send_trailers(trailers);
            }
            None => {
                let mut response = http::Response::new(());
                let h = response.headers_mut();
                h.insert("content-type", HeaderValue::from_static("application/grpc"));
                for (k, v) in &self.initial_metadata {
                    h.append(k.clone(), v.clone());
                }
                h.extend(trailers);
                let _ = self.respond.send_response(response, true);
            }
        }
    }

    /// Resets the stream (e.g. when the server's deadline for the call passed).
    pub fn reset(&mut self, reason: h2::Reason) {
        self.ended = true;
        match self.send.as_mut() {
            Some(send) => send.send_reset(reason),
            None => self.respond.send_reset(reason),
        }
    }

    /// Gives access to the raw response handle, for fault injection.
    pub fn respond_mut(&mut self) -> &mut SendResponse<Bytes> {
        &mut self.respond
    }

    /// Gives access to the raw send stream, once the headers went.
    pub fn send_stream_mut(&mut self) -> Option<&mut SendStream<Bytes>> {
        self.send.as_mut()
    }

    /// Marks the call as ended without sending anything more.
    pub fn mark_ended(&mut self) {
        self.ended = true;
    }
}

/// h2 server settings for the test servers: windows and DATA-frame budget sized like the client's.
pub fn h2_server_builder() -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.initial_window_size(1 << 20)
        .initial_connection_window_size(16 << 20)
        .data_frame_budget(8 << 20)
        .max_concurrent_streams(1000);
    b
}

/// Reads the call's one request message as `M` (UNIMPLEMENTED without one, INTERNAL if it does not decode).
pub(crate) async fn read_one<M: Message + Default>(call: &mut ServerCall) -> Result<M, Status> {
    let msg = call
        .next_message()
        .await?
        .ok_or_else(|| Status::new(Code::Unimplemented, "expected one request message"))?;
    M::decode(msg.payload).map_err(decode_error)
}

/// Sends `msg` as a response message, compressed if `compress`.
pub(crate) async fn send<M: Message>(
    call: &mut ServerCall,
    msg: &M,
    compress: bool,
) -> Result<(), Status> {
    call.send_message(&msg.encode_to_vec(), compress).await
}

/// INTERNAL for a request message that does not decode.
pub(crate) fn decode_error(e: prost::DecodeError) -> Status {
    Status::new(Code::Internal, format!("failed to decode the request: {e}"))
}
