//! gRPC's Length-Prefixed-Message framing as the test servers write and read it: a 1-byte compressed flag,
//! a 4-byte big-endian length, the payload. Writing reuses the interop crate's encoder
//! ([`interop::raw::grpc_message`]), so the tests' frames do not come from the channel's own encoder; the
//! request bodies of the tower adapter's tests, compressed or not, are written by [`frame`].

use bytes::{Bytes, BytesMut};
use grpc_channel::framing::{self, HEADER_LEN};

pub use interop::raw::grpc_message;

/// A gRPC Length-Prefixed-Message: the compressed flag, the 4-byte length, the payload (the prefix written
/// by `grpc_channel::framing::put_header`).
pub fn frame(compressed: bool, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(HEADER_LEN + payload.len());
    framing::put_header(&mut b, compressed, payload.len() as u32);
    b.extend_from_slice(payload);
    b.freeze()
}

/// (compressed flag, payload) of every Length-Prefixed-Message in a request body; fails the test on a
/// truncated message or trailing bytes.
pub fn deframe(mut body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        assert!(
            body.len() >= 5 + len,
            "truncated message in the request body"
        );
        out.push((body[0], body[5..5 + len].to_vec()));
        body = &body[5 + len..];
    }
    assert!(body.is_empty(), "trailing bytes in the request body");
    out
}

/// The payloads of every Length-Prefixed-Message in a request body (see [`deframe`]).
pub fn payloads(body: &[u8]) -> Vec<Vec<u8>> {
    deframe(body).into_iter().map(|(_, m)| m).collect()
}

/// Message `i` of a numbered run: its index (4 bytes, big-endian), then `filler` bytes; a server that
/// deframes the request can check that nothing was lost, duplicated or reordered.
pub fn numbered(i: u32, filler: usize) -> Vec<u8> {
    let mut m = i.to_be_bytes().to_vec();
    m.resize(4 + filler, (i % 251) as u8);
    m
}
