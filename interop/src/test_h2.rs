//! A bare h2 client for the test servers' own tests: it shows exactly which frames came back (Trailers-Only or
//! not, a reset and its reason, a GOAWAY), which the channel deliberately hides.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use http::HeaderMap;
use tokio::net::TcpStream;

/// What came back on one stream.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The response headers (a Trailers-Only response has `grpc-status` here).
    pub(crate) headers: HeaderMap,
    /// Whether the response headers ended the stream (Trailers-Only).
    pub(crate) trailers_only: bool,
    /// The response messages.
    pub(crate) messages: Vec<Bytes>,
    /// The trailers, if the response was not Trailers-Only.
    pub(crate) trailers: Option<HeaderMap>,
}

impl Answer {
    /// The `grpc-status`, from the trailers or the Trailers-Only headers.
    pub(crate) fn status(&self) -> Option<&str> {
        self.trailers
            .as_ref()
            .unwrap_or(&self.headers)
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
    }
}

/// Connects, handshakes, and waits for a PING ACK (so the server's SETTINGS are in force).
pub(crate) async fn connect(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, mut conn) = h2::client::handshake(tcp).await.unwrap();
    let ping_pong = conn.ping_pong();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    if let Some(mut p) = ping_pong {
        p.ping(h2::Ping::opaque()).await.unwrap();
    }
    send.ready().await.unwrap()
}

/// A gRPC request for `path` with extra headers.
pub(crate) fn request(path: &str, headers: &[(&str, &str)]) -> http::Request<()> {
    let mut b = http::Request::post(format!("http://test{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap()
}

/// Length-prefixed messages.
pub(crate) fn frames(messages: &[&[u8]]) -> Bytes {
    let mut b = BytesMut::new();
    for m in messages {
        b.put_u8(0);
        b.put_u32(m.len() as u32);
        b.extend_from_slice(m);
    }
    b.freeze()
}

/// Sends `messages` and half-closes, then reads the whole answer.
pub(crate) async fn call(
    send: &mut SendRequest<Bytes>,
    path: &str,
    headers: &[(&str, &str)],
    messages: &[&[u8]],
) -> Result<Answer, h2::Error> {
    let (response, mut stream) = send.send_request(request(path, headers), false)?;
    // The server may already have refused or ended the stream; the answer says how.
    let _ = stream.send_data(frames(messages), true);
    read_answer(response).await
}

/// Reads a response: headers, messages, trailers.
pub(crate) async fn read_answer(response: h2::client::ResponseFuture) -> Result<Answer, h2::Error> {
    let response = response.await?;
    let (parts, mut body) = response.into_parts();
    let trailers_only = body.is_end_stream();
    let mut data = BytesMut::new();
    let mut trailers = None;
    if !trailers_only {
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        trailers = body.trailers().await?;
    }
    let mut messages = Vec::new();
    let mut data = data.freeze();
    while data.len() >= 5 {
        let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
        let _ = data.split_to(5);
        messages.push(data.split_to(len.min(data.len())));
    }
    Ok(Answer {
        headers: parts.headers,
        trailers_only,
        messages,
        trailers,
    })
}
