//! Response decompression against a scriptable h2 server: a gzip message of several members is decoded
//! whole, and bytes after the compressed data are corruption (INTERNAL), never silently dropped.

use grpc_test_support as support;

use std::io::Write as _;

use bytes::Bytes;
use grpc_channel::{Channel, Code, Request};
use support::guards::no_hang;
use support::h2_server::{handler, response_head, trailers, H2Server, Stream};

const METHOD: &str = "/t.S/M";

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("gzip");
    e.finish().expect("gzip")
}

/// A server answering one message whose payload (sent with flag 1 under `grpc-encoding: gzip`) is the
/// request's `x-payload` scenario.
async fn server() -> H2Server {
    H2Server::tcp(
        support::h2_server::defaults,
        handler(|s: Stream| async move {
            let mut s = s;
            let scenario = s
                .headers
                .get("x-scenario")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let payload = match scenario.as_str() {
                // RFC 1952 §2.2: "A gzip file consists of a series of members". Two members: the message
                // is "hello world".
                "two-members" => [gzip(b"hello "), gzip(b"world")].concat(),
                // One member followed by bytes that are not gzip at all.
                "trailing-garbage" => [gzip(b"hello world"), b"GARBAGE".to_vec()].concat(),
                _ => gzip(b"hello world"),
            };
            let mut head = response_head();
            head.headers_mut()
                .insert("grpc-encoding", "gzip".parse().expect("value"));
            let Ok(mut send) = s.respond.send_response(head, false) else {
                return;
            };
            let mut frame = vec![1u8];
            frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            frame.extend_from_slice(&payload);
            let _ = send.send_data(Bytes::from(frame), false);
            let _ = send.send_trailers(trailers("0", &[]));
        }),
    )
    .await
}

async fn call(channel: &Channel, scenario: &str) -> Result<Bytes, grpc_channel::Status> {
    let mut req = Request::new(Bytes::new());
    req.metadata_mut()
        .append("x-scenario", scenario)
        .expect("md");
    no_hang("call", channel.unary_raw(METHOD, req))
        .await
        .map(|r| r.into_inner())
}

/// A gzip message of two members (as `pigz`, or any encoder that flushes members, writes; Go's
/// `gzip.Reader` and Java's `GZIPInputStream` read every member) must decode to all of its bytes, or at
/// worst fail the call. The channel decodes only the first member and silently hands the application a
/// truncated message as if it were whole.
#[tokio::test]
async fn a_two_member_gzip_message_is_not_silently_truncated() {
    let server = server().await;
    let channel = Channel::new(server.target()).expect("channel");
    let sanity = call(&channel, "one-member").await.expect("one member");
    assert_eq!(&sanity[..], b"hello world");
    // RFC 1952 2.2: a gzip stream is a series of members; every one is part of the message.
    let message = call(&channel, "two-members").await.expect("two members");
    assert_eq!(
        String::from_utf8_lossy(&message),
        "hello world",
        "a two-member gzip message is decoded whole, not cut to its first member"
    );
}

/// Bytes after the end of the gzip data are not part of any message: the payload is corrupt (INTERNAL),
/// not a valid message with junk ignored.
#[tokio::test]
async fn trailing_garbage_after_a_gzip_member_is_not_ignored() {
    let server = server().await;
    let channel = Channel::new(server.target()).expect("channel");
    match call(&channel, "trailing-garbage").await {
        Ok(message) => panic!(
            "a payload of gzip data plus 7 bytes of garbage was accepted as {:?}",
            String::from_utf8_lossy(&message)
        ),
        Err(status) => assert_eq!(status.code(), Code::Internal, "{status:?}"),
    }
}
